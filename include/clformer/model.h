/* The Transformer, Post-LN or Pre-LN (Xiong et al. 2020, Figure 1): the decoder-only causal
 * language model, or the encoder-decoder translation model. Parameters, gradients and Adam's
 * moments each live in one contiguous device buffer described by a table of named views;
 * activations are sized once for (B, T). */
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

/* CF_INIT_EMBED: the token and learned position embeddings and the output projection, Xavier or
 * normal(0, C^-1/2) by model.init (cf_weight_init). */
enum { CF_INIT_XAVIER, CF_INIT_ZERO, CF_INIT_ONE, CF_INIT_EMBED };

typedef struct cf_model cf_model;

/* The device memory a model needs for batches of B sequences of T tokens (one micro-batch when
 * gradients are accumulated), in bytes, computed without allocating: cf_model_create lays the model
 * out the same way and allocates exactly these buffers (the GEMM layer's scratch aside, which is
 * estimated: the largest operand our kernels pack, rounded up to the MiB it grows by). */
typedef struct cf_memory_plan {
  int batch, seq_len;
  size_t params;                       /* trainable numbers */
  size_t parameters, gradients;        /* one flat buffer each */
  size_t optimizer;                    /* Adam's m and v, or SGD's momentum */
  size_t activations;                  /* saved for backward (embedding, every layer, logits and their gradient) */
  size_t attention_probs;              /*   of which the attention probabilities, B x heads x T x T a layer */
  size_t workspace;                    /* attention's and backward's scratch, the GEMM scratch */
  size_t attention_workspace;          /*   of which attention's */
  size_t gemm_scratch;                 /*   of which the GEMM layer's (estimated) */
  size_t inputs;                       /* token ids and targets */
  size_t total;
  int buffers;                         /* device buffers, the GEMM scratch included */
  size_t largest;                      /* the largest one, and its name */
  char largest_name[48];
  int has_device;                      /* the fields below were compared against a device */
  char device[256];
  unsigned long long global_mem, max_alloc;
  int fits;                            /* total <= global_mem and largest <= max_alloc (1 without a device) */
  int max_batch;                       /* the largest B that fits this device, up to 65536; 0: none does */
  int seq2seq;                         /* an encoder-decoder's: B x T is data.max_tokens (for the advice) */
} cf_memory_plan;

/* The plan of the model mc and oc describe (validated: final_norm resolved) at batch B x T, compared
 * with dev when it is not NULL (then max_batch is searched too). */
cf_status cf_model_plan(const cf_model_config *mc, const cf_optim_config *oc, int B, int T, const cf_device_info *dev,
                        cf_memory_plan *plan);
/* The plan as a few lines of text, each starting with prefix, in MiB: each part, the total, and
 * against the device, whether it fits and the largest batch that does. */
void cf_model_plan_write(const cf_memory_plan *plan, const char *prefix, FILE *f);
/* CF_OK when the plan fits its device; else CF_ERR_CONFIG (reported) with the plan, the largest
 * batch that fits and what to change: the refusal cf_model_create, train and check give. */
cf_status cf_model_fits(const cf_memory_plan *plan);

/* The (B, T) cf_model_create and cf_model_plan take for config c: cf_config_model_shape's. */
void cf_model_shape(const cf_config *c, int *B, int *T);

/* Lay out and allocate everything for batches of B sequences of T tokens: the model mc describes
 * (validated: final_norm resolved) with the state optimizer oc needs; seed keys the dropout masks.
 * The weights are uninitialised until cf_model_init or cf_model_set_params. A model whose plan
 * (cf_model_plan) does not fit the device, in all or in one buffer, is refused before any
 * allocation (CF_ERR_CONFIG), the plan and the largest batch that fits in the message. */
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
const cf_memory_plan *cf_model_memory_plan(const cf_model *m);  /* its plan, against its device */
cf_context *cf_model_context(const cf_model *m);  /* the context it was made on */
int cf_model_batch(const cf_model *m);
int cf_model_seq_len(const cf_model *m);
int cf_model_vocab(const cf_model *m);  /* V: logits per position */

/* Forward pass on one batch of (B, T) token ids; with targets, also the mean loss (on the device,
 * read it with cf_model_loss). train = 1 applies dropout keyed by (seed, step). */
cf_status cf_model_forward(cf_model *m, const int *inputs, const int *targets, uint32_t step, int train);
/* Zero the gradients and back-propagate the last forward's loss (which must have had targets). */
cf_status cf_model_backward(cf_model *m);

/* Gradient accumulation: one optimizer step over `parts` micro-batches of B sequences, the same
 * update as one batch of parts x B (to float rounding). cf_model_forward_part is cf_model_forward
 * for micro-batch `part` (0 .. parts-1; part 0 of 1 is cf_model_forward): its dropout masks are its
 * own (part 0 draws cf_model_forward's), its loss gradient is scaled by 1/parts, and after the last
 * part the step's loss (the parts' mean: every part counts B x T targets) is what cf_model_watch
 * checks and cf_model_add_loss adds. Each part's backward is cf_model_backward_add, which adds into
 * the gradients that cf_model_zero_grads zeroed before the first. */
cf_status cf_model_forward_part(cf_model *m, const int *inputs, const int *targets, uint32_t step, int part, int parts,
                                int train);
/* Data parallelism: this model's micro-batches 0 .. parts-1 are numbers first .. first+parts-1 of a
 * step's `total` over all ranks. Their dropout masks are keyed by that global number, so an example
 * gets the same masks whatever rank computes it (for a given data.batch_size), and each loss
 * gradient is scaled by 1/(count x total), so the ranks' gradients sum to the whole step's. The step
 * loss stays this rank's parts' mean. Default (and total 0): first 0, total = parts. */
cf_status cf_model_set_shard(cf_model *m, int first, int total);
cf_status cf_model_zero_grads(cf_model *m);
cf_status cf_model_backward_add(cf_model *m);
/* Gradients final while the backward goes on, for data parallelism to sum them over the ranks as
 * the rest is computed: floats [from, to) of the flat gradient buffer `grads` (cf_model_flat_floats
 * of them) hold their step's values once the context's queue has run what is enqueued so far. */
typedef struct cf_grads_ready {
  cl_mem grads;
  size_t from, to;
  cf_mem step_loss;  /* the step's loss (one float), final since the forward */
} cf_grads_ready;
typedef cf_status (*cf_grads_ready_fn)(void *user, const cf_grads_ready *r);
/* Set (fn NULL: clear) the hook cf_model_backward_add calls in a step's last micro-batch (part ==
 * parts - 1) as stages finish: after the output projection and final LayerNorm, after each block,
 * after the embeddings. The ranges go from the buffer's end to its start, each ending where the one
 * before began, the last from 0 (the layout puts layers in forward order between the embeddings,
 * finished last, tied or not, and the output's own tensors). A hook's error ends the backward. */
void cf_model_on_grads_ready(cf_model *m, cf_grads_ready_fn fn, void *user);
/* Global L2 norm of the gradient, computed on the device (kept for the clipping in cf_model_update). */
cf_status cf_model_global_grad_norm(cf_model *m);
/* One optimizer step at learning rate lr (step is 1-based, for Adam's bias correction); clips by
 * the norm cf_model_global_grad_norm computed when optim.clip_norm > 0. */
cf_status cf_model_update(cf_model *m, float lr, int step);

/* acc[0] += the last step's mean loss (the last forward's, or its parts'), on the device (no host round trip). */
cf_status cf_model_add_loss(cf_model *m, cf_mem acc);
/* Blocking reads of the last loss and gradient norm. */
cf_status cf_model_loss(cf_model *m, float *loss);
/* The last step's loss (what cf_model_watch checks and cf_model_add_loss adds): read, or replaced
 * (by the mean over all ranks, before the watch). */
cf_status cf_model_read_step_loss(cf_model *m, float *loss);
cf_status cf_model_write_step_loss(cf_model *m, float loss);
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
/* A flat buffer mapped for reading in place (no copy where the device shares host memory), after
 * the queued work; *host is NULL for a buffer the optimizer does not keep. Unmap before the next
 * step. */
cf_status cf_model_map(cf_model *m, int which, const float **host);
cf_status cf_model_unmap(cf_model *m, int which, const float *host);
/* Wall-clock seconds the host has spent uploading token ids and targets (copying into host slots
 * or filling mapped buffers, enqueueing, and waiting for a slot to come free). */
double cf_model_upload_seconds(const cf_model *m);

/* ---- The encoder-decoder (model.arch encoder_decoder, src/model/seq2seq.c) ----
 * cf_model_create lays it out for batches of at most B x T tokens a side (data.max_tokens), each
 * sequence at most T tokens (data.max_len): any number of sentences up to that. Ids 0, 1, 2 are
 * pad, bos and eos (the BPE's). */
typedef struct cf_pair_input {
  int B, S, T;          /* sentence pairs, source and target lengths (padded) */
  const int *src;       /* (B, S) source ids, eos, then pad */
  const int *src_len;   /* (B) source tokens (eos included): the keys the padding mask lets through */
  const int *tgt_in;    /* (B, T) bos, target ids, then pad: the decoder's input */
  const int *tgt_out;   /* (B, T) target ids, eos, then pad (no loss); NULL: no loss */
} cf_pair_input;
/* cf_model_forward_part for an encoder-decoder: the loss is the mean over target tokens that are
 * not pad. Backward, the optimizer step, accumulation and the watch as for the language model. */
cf_status cf_model_forward_pairs(cf_model *m, const cf_pair_input *in, uint32_t step, int part, int parts, int train);
/* Decoding: encode B source rows (no dropout; for a beam of k over n sentences, each repeated k
 * times), kept until the next encode or forward. */
cf_status cf_model_encode(cf_model *m, const int *src, const int *src_len, int B, int S);
/* The next token's log-probabilities (B, V) after each of the B prefixes (B, len) of ids (bos
 * first), prefix row i attending to encoded row i: the decoder run over the prefixes, the output
 * projection of their last positions only. */
cf_status cf_model_next_logprobs(cf_model *m, const int *prefix, int B, int len, float *logprobs);
/* The same, incrementally:
 * cf_model_decode_start, after cf_model_encode, keeps room for max_len positions of every encoded
 * row (at most data.max_len, and rows x max_len at most the tokens a side the model holds); then
 * each cf_model_decode_next takes the prefixes (rows, len) for len = 1, 2, ... in turn, runs the
 * decoder on their last position alone (the earlier positions' keys and values are kept from the
 * calls before, so the earlier columns must be those calls' prefixes) and writes (rows, V)
 * log-probabilities. */
cf_status cf_model_decode_start(cf_model *m, int max_len);
cf_status cf_model_decode_next(cf_model *m, const int *prefix, int len, float *logprobs);
/* For a beam, whose rows change places: row i goes on from row parents[i]'s prefix (0 <= parents[i]
 * < rows), so the kept keys and values move with it, before the next cf_model_decode_next. */
cf_status cf_model_decode_reorder(cf_model *m, const int *parents);
/* The cache's device memory given back (it is outside the memory plan: rows x max_len x 2C floats
 * a decoder block, twice). A new encode, or a forward, makes the cache unusable in any case. */
void cf_model_decode_end(cf_model *m);

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
