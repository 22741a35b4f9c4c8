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

/* A run of device floats laid out as one (tensor offsets index the whole run) but held in
 * segments, each its own buffer, so that no buffer outgrows the device's largest allocation while
 * the whole fits its memory: a segment per layer's activations, say. */
typedef struct cf_arena {
  size_t total;        /* floats laid out so far */
  int n, cap;          /* segments */
  struct cf_segment { char name[40]; size_t base, floats; cl_mem buf; } *seg;
} cf_arena;

/* Start a new segment named name; later cf_arena_take calls fall in it. 0, or -1 when out of memory. */
int cf_arena_segment(cf_arena *a, const char *name);
/* n floats (at least 1, rounded up to 16 for whole vectors and cache lines) in the current segment;
 * their offset in the run. */
size_t cf_arena_take(cf_arena *a, size_t n);
/* The device address of float `off` of the run (allocated). */
cf_mem cf_arena_at(const cf_arena *a, size_t off);
void cf_arena_free(cf_arena *a);  /* buffers and table */

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

/* A per-step upload of n ints to the device, double-buffered so that no step waits for the one
 * before it (model/transfer.c). Copying: the ints go to a host slot and a non-blocking write
 * takes them to slot[0]. Mapping (zero-copy): the device buffers slot[0] and slot[1] are filled in
 * place, alternately, each mapped ahead of its turn. */
typedef struct cf_upload {
  cf_context *ctx;
  const char *name;    /* "token ids", "targets": in messages and profiles */
  size_t n;
  cl_mem slot[2];      /* slot[1]: made when first mapping */
  int *host[2];        /* copying: the host slots */
  cl_event written[2]; /* copying: the slot's write */
  void *ahead[2];      /* mapping: where the slot is mapped ahead of its turn, or NULL */
  cl_event mapped[2];  /* mapping: that map's completion */
  int next, current;   /* the slot the next upload fills, the one the last filled */
  int mapping;         /* the way of the uploads so far */
  double host_s;       /* wall-clock seconds spent in cf_upload_put, all uploads */
} cf_upload;

/* The first slot made (mappable when the context maps); uploads follow the context's choice. */
cf_status cf_upload_create(cf_context *ctx, cf_upload *u, const char *name, size_t n);
/* n ints from host into the next slot, ordered before the compute queue's next command. */
cf_status cf_upload_put(cf_upload *u, const int *host);
/* The device buffer the last upload filled. */
static inline cl_mem cf_upload_current(const cf_upload *u) { return u->slot[u->current]; }
/* Waits for what is pending and releases everything (a zeroed upload too). */
void cf_upload_free(cf_upload *u);

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
  cf_arena acts;           /* saved activations: a segment for the embedding, each layer, the output */
  layer_acts *la;
  size_t emb, lnf_out, lnf_mean, lnf_rstd, logits, dlogits, losses, loss, grad_norm;
  size_t watch_state, watch_flags, watch_table;  /* the divergence watch (model/watch.c) */
  cf_upload tokens, targets; /* int (B, T) each, uploaded per forward (model/transfer.c) */
  cf_arena scratch;        /* workspaces: attention's, then backward's */
  size_t s_attn, s_branch, s_stream, s_res, s_wide, s_dqkv, s_norm;
  size_t bytes;
  cf_memory_plan plan;     /* against the context's device, made before allocating */
  size_t step_loss;        /* the mean loss of an accumulated step's parts (model.c) */
  int count;               /* targets that count for the loss in the last forward */
  int part, parts;         /* the last forward was micro-batch `part` of a step of `parts` */
  int shard_first, shard_total; /* cf_model_set_shard: global micro-batch of part 0, of all ranks' (0: parts) */
  uint32_t step;           /* dropout key of the last forward */
  int train;
  cf_watch_reads watch;
  cf_grads_ready_fn ready_fn; /* cf_model_on_grads_ready's hook, NULL: none */
  void *ready_user;
  size_t ready_from;          /* in a backward: gradients from here to the end told final */
};

/* Fill in m's sizes from mc, oc, B and T, and lay out its parameters (views), activations and
 * workspaces, without touching a device: what cf_model_create allocates and cf_model_plan counts. */
cf_status cf_model_lay_out(cf_model *m, const cf_model_config *mc, const cf_optim_config *oc, int B, int T);
/* The bytes of each flat buffer (parameters, gradients, Adam's m and v; 4 when absent) and of
 * tokens and targets, as cf_model_create allocates them. */
typedef struct cf_model_flat_bytes { size_t params, grads, m1, m2, tokens, targets; } cf_model_flat_bytes;
cf_model_flat_bytes cf_model_flat_sizes(const cf_model *m);
/* Host-side layout freed (views and tables; the device buffers are cf_model_free's). */
void cf_model_lay_out_free(cf_model *m);
/* The plan of a laid-out model against dev (NULL: none), the largest fitting batch not searched. */
void cf_model_plan_of(const cf_model *m, const cf_device_info *dev, cf_memory_plan *plan);

/* The last step's loss on the device: the last forward's, or its parts' mean (model.c). */
cf_mem cf_model_step_loss_at(const cf_model *m);

/* The watch's state zeroed and its table of views uploaded; its pending reads waited for and
 * released (model/watch.c, called by create and free). */
cf_status cf_model_watch_setup(cf_model *m);
void cf_model_watch_release(cf_model *m);

#endif
