/* The decoder-only causal Transformer language model, Post-LN or Pre-LN (Xiong et al. 2020,
 * Figure 1). Parameters, gradients and Adam's moments each live in one contiguous device buffer
 * described by a table of named views; activations are sized once for (B, T). */
#ifndef CLFORMER_MODEL_H
#define CLFORMER_MODEL_H

#include <stdint.h>
#include "clformer/config.h"
#include "clformer/gemm.h"
#include "clformer/runtime.h"

typedef struct cf_tensor_view {
  char name[64];      /* e.g. "layers.3.ffn.fc2.weight" (the safetensors name) */
  size_t off, numel;  /* in floats, into the flat parameter (and gradient) buffer */
  int ndim;
  int shape[2];
  int kind;           /* CF_INIT_* */
} cf_tensor_view;

enum { CF_INIT_XAVIER, CF_INIT_ZERO, CF_INIT_ONE };

typedef struct cf_model cf_model;

/* Lay out and allocate everything for batches of B sequences of T tokens: the model mc describes
 * (validated: final_norm resolved) with the state optimizer oc needs; seed keys the dropout masks.
 * The weights are uninitialised until cf_model_init or cf_model_set_params. */
cf_status cf_model_create(cf_context *ctx, const cf_model_config *mc, const cf_optim_config *oc,
                          unsigned long long seed, int B, int T, cf_model **out);
void cf_model_free(cf_model *m);  /* NULL is a no-op */

/* Xavier-uniform matrices (each attention projection as its own C x C matrix), zero biases, unit LN
 * gains; embeddings Xavier too. Drawn from Philox keyed by (seed, hash of the tensor's name), so the
 * same architecture gets the same initial weights whatever the norm placement. Zeroes the moments. */
cf_status cf_model_init(cf_model *m, uint64_t seed);

int cf_model_num_views(const cf_model *m);
const cf_tensor_view *cf_model_view(const cf_model *m, int i);
const cf_tensor_view *cf_model_find_view(const cf_model *m, const char *name);
size_t cf_model_num_params(const cf_model *m);   /* trainable numbers */
size_t cf_model_flat_floats(const cf_model *m);  /* length of each flat buffer (views padded to 16 floats) */
size_t cf_model_device_bytes(const cf_model *m);  /* all buffers the model allocated */
int cf_model_batch(const cf_model *m);
int cf_model_seq_len(const cf_model *m);
int cf_model_vocab(const cf_model *m);  /* V: logits per position */

/* Forward pass on one batch of (B, T) token ids; with targets, also the mean loss (on the device,
 * read it with cf_model_loss). train = 1 applies dropout keyed by (seed, step). */
cf_status cf_model_forward(cf_model *m, const int *inputs, const int *targets, uint32_t step, int train);
/* Zero the gradients and back-propagate the last forward's loss (which must have had targets). */
cf_status cf_model_backward(cf_model *m);
/* Global L2 norm of the gradient, computed on the device (kept for the clipping in cf_model_update). */
cf_status cf_model_global_grad_norm(cf_model *m);
/* One optimizer step at learning rate lr (step is 1-based, for Adam's bias correction); clips by
 * the norm cf_model_global_grad_norm computed when optim.clip_norm > 0. */
cf_status cf_model_update(cf_model *m, float lr, int step);

/* acc[0] += the last forward's mean loss, on the device (no host round trip). */
cf_status cf_model_add_loss(cf_model *m, cf_mem acc);
/* Blocking reads of the last loss and gradient norm. */
cf_status cf_model_loss(cf_model *m, float *loss);
cf_status cf_model_read_global_grad_norm(cf_model *m, float *norm);
/* Logits of sequence b at position t after a forward, (V) floats. */
cf_status cf_model_logits(cf_model *m, int b, int t, float *out);
/* L2 norm of each tensor's gradient, one per view (cf_model_num_views floats): the gradnorm experiment's numbers. */
cf_status cf_model_tensor_grad_norms(cf_model *m, float *out);

/* The divergence watch. cf_model_watch, once a training step after cf_model_global_grad_norm,
 * checks that step's loss and gradient norm on the device and, at the first step where the norm is
 * not finite or the loss not finite or above loss_limit, which tensors' gradients are not finite;
 * a non-blocking read brings each verdict back, so no step waits for the device.
 * cf_model_watch_poll looks at the verdicts of every watched step before the latest, and at the
 * latest's too when wait_latest (then it waits for the device). */
typedef struct cf_divergence {
  int step;               /* the first step that diverged; 0: none so far */
  float loss, grad_norm;  /* that step's */
  int tensor;             /* the view nearest the output (backward reaches it first) whose gradient
                             was not finite; -1: none (the loss alone) */
  int tensors;            /* how many views' gradients were not finite */
} cf_divergence;
cf_status cf_model_watch(cf_model *m, int step, float loss_limit);
cf_status cf_model_watch_poll(cf_model *m, int wait_latest, cf_divergence *out);

/* Host copies of the flat buffers (cf_model_flat_floats floats each). which: 0 params, 1 grads,
 * 2 Adam m (or SGD momentum), 3 Adam v. */
cf_status cf_model_read(cf_model *m, int which, float *host);
cf_status cf_model_write(cf_model *m, int which, const float *host);

/* How cf_model_sample_next picks a byte. */
typedef struct cf_sample_options {
  double temperature;         /* logits divided by it; 0: the most likely byte (greedy) */
  int top_k;                  /* only the k most likely bytes; 0: all */
  double top_p;               /* then the smallest set of probability >= top_p (nucleus); 1: all */
  unsigned long long seed;    /* with index, names the draw: the same seed gives the same text */
} cf_sample_options;
/* The byte after text[0..n) (its last seq_len bytes as context) from a batch-1 model; index is the
 * draw's number (0, 1, ... for successive bytes). */
cf_status cf_model_sample_next(cf_model *m, const int *text, size_t n, const cf_sample_options *opts, uint32_t index,
                               int *next);

/* Every GEMM shape a training step of this config's model issues (forward, both backward products,
 * the batched attention products), each with its count per step; returns how many (at most
 * CF_GEMM_MAX_SHAPES). bench gemm, bench step and tune all take them from here. */
int cf_model_gemm_shapes(const cf_config *cfg, cf_gemm_shape *out);
/* Floating-point operations of those products in one training step (2 M N K per product). */
double cf_model_gemm_flops(const cf_config *cfg);

#endif
