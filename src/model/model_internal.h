/* Inside the model layer: the model's own record, shared by model.c and watch.c. */
#ifndef CLFORMER_MODEL_INTERNAL_H
#define CLFORMER_MODEL_INTERNAL_H

#include <stdint.h>
#include "clformer/model.h"

/* The watch's verdicts on their way back: a non-blocking read per step into one of two host
 * slots, each looked at (in step order) before its slot is reused. */
typedef struct cf_watch_reads {
  float host[2][3];
  int step[2];
  cl_event ev[2];
  int next;
  cf_divergence verdict;  /* sticky: the first bad step found */
} cf_watch_reads;

typedef struct layer_params {  /* offsets into the flat parameter buffer */
  size_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
} layer_params;

/* Activations saved for backward, per layer. Pre-LN: norm1 = LN1(x), res1 = x + attn,
 * norm2 = LN2(res1), res2 = res1 + ffn (the output). Post-LN: res1 = x + attn, norm1 = LN1(res1),
 * res2 = norm1 + ffn, norm2 = LN2(res2) (the output). */
typedef struct layer_acts {
  size_t norm1, mean1, rstd1, res1, norm2, mean2, rstd2, res2;
  size_t qkv, qkvp, att, atty, h, a;
} layer_acts;

struct cf_model {
  cf_context *ctx;
  cf_model_config mc;
  cf_optim_config oc;
  unsigned long long seed;       /* the dropout masks' Philox key */
  int B, T, C, NH, F, L, V;
  cf_activation act;
  cf_tensor_view *views;
  int nviews, cap_views;
  size_t nparams;
  cl_mem params, grads, m1, m2;  /* m1/m2: Adam's moments (m1 is SGD's momentum) */
  layer_params *lp;
  size_t wte, wpe, lnf_w, lnf_b, out_w;  /* wpe/lnf unused (SIZE_MAX) when absent; out_w == wte when tied */
  cl_mem acts;
  layer_acts *la;
  size_t emb, lnf_out, lnf_mean, lnf_rstd, logits, dlogits, losses, loss, grad_norm;
  size_t watch_state, watch_flags, watch_table;  /* the divergence watch (model/watch.c) */
  cl_mem tokens, targets;  /* int (B, T) */
  /* Host staging for their uploads, two slots each: the writes are non-blocking (no sync point
   * per step) and a slot is reused only after its previous write has completed. */
  struct staging { int *host[2]; cl_event ev[2]; int next; } stage_tokens, stage_targets;
  cl_mem scratch;
  size_t s_attn, s_branch, s_stream, s_res, s_wide, s_dqkv, s_norm;
  size_t bytes;
  int count;               /* targets that count for the loss in the last forward */
  uint32_t step;           /* dropout key of the last forward */
  int train;
  cf_watch_reads watch;
};

/* The watch's state zeroed and its table of views uploaded; its pending reads waited for and
 * released (model/watch.c, called by create and free). */
cf_status cf_model_watch_setup(cf_model *m);
void cf_model_watch_release(cf_model *m);

#endif
