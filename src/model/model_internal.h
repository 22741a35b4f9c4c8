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
  /* the decoder of an encoder-decoder: cross-attention and its LayerNorm (else SIZE_MAX) */
  size_t lnx_w, lnx_b, xq_w, xq_b, xkv_w, xkv_b, xproj_w, xproj_b;
} layer_params;

/* Activations saved for backward, per layer. A block is a run of sublayers F (self-attention,
 * cross-attention in a decoder that has an encoder, FFN), each with its LayerNorm (ln1, lnx, ln2)
 * and its saved residual sum and norm. Pre-LN: norm = LN(x), res = x + F(norm), the next sublayer
 * reads res (the block's output: the last res). Post-LN: res = x + F(x), norm = LN(res), the next
 * sublayer reads norm (the block's output: the last norm). */
typedef struct layer_acts {
  size_t norm1, mean1, rstd1, res1, norm2, mean2, rstd2, res2;
  size_t qkv, att, atty, h, a;
  size_t normx, meanx, rstdx, resx;  /* cross-attention's LayerNorm and sum */
  size_t xq, xkv, xlse, xatty;       /* its queries (N, C), keys | values of the memory (N_src, 2C),
                                        logsumexp (B, NH, T) and output (N, C) */
} layer_acts;

/* A stack of blocks over one sequence of embeddings: the language model's (the decoder), or the
 * encoder and the decoder of an encoder-decoder. Layout fixes the offsets; a forward sets the
 * batch's shape (B sequences of T positions: B*T rows) and masks. */
typedef struct block_stack {
  int L;                 /* blocks */
  int first_layer;       /* the dropout keys' number of block 0 (the decoder's follow the encoder's) */
  int emb_key;           /* which dropout key the embedding's mask takes */
  layer_params *lp;
  layer_acts *la;
  size_t emb;            /* the embedding: block 0's input (acts) */
  size_t lnf_w, lnf_b, lnf_out, lnf_mean, lnf_rstd;  /* the final LayerNorm, SIZE_MAX when absent */
  int B, T;              /* this forward's shape */
  int causal, cross;     /* the decoder's mask; cross-attention to the encoder's output */
  cf_mem key_len;        /* self-attention padding, int (B), or buf NULL */
  int decoding;          /* incremental decoding (seq2seq.c): T = 1, the new position of each row,
                            whose self-attention reads the model's key/value cache */
} block_stack;

/* Incremental decoding's state: each decoder block's keys | values of every position decoded so far,
 * (rows, len, 2C) a block, and the keys each row sees (int (rows)): made by cf_model_decode_start. */
typedef struct decode_cache {
  cl_mem kv, lens;
  cl_mem moved;          /* rows on their way to new places (cf_model_decode_reorder), as kv */
  size_t floats;         /* of kv as allocated */
  int rows, len, pos;    /* rows and positions laid out; the position being decoded */
} decode_cache;

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
  int B, T, C, NH, F, L, V;  /* encoder-decoder: B x T the rows of a side laid out, T the longest sequence */
  cf_activation act;
  int seq2seq;               /* an encoder-decoder (mc.arch) */
  block_stack dec, enc;      /* the language model is dec alone */
  int *stage;                /* encoder-decoder: a batch's ids padded to the rows laid out, for upload */
  decode_cache cache;        /* encoder-decoder: incremental decoding (seq2seq.c) */
  cf_tensor_view *views;
  int nviews, cap_views;
  size_t nparams;
  cl_mem params, grads, m1, m2;  /* m1/m2: Adam's moments (m1 is SGD's momentum) */
  size_t wte, wpe, out_w;   /* wpe unused (SIZE_MAX) when absent; out_w == wte when tied */
  cf_arena acts;           /* saved activations: a segment for each embedding, each layer, the output */
  size_t logits, dlogits, losses, loss, grad_norm;
  size_t watch_state, watch_flags, watch_table;  /* the divergence watch (model/watch.c) */
  cf_upload tokens, targets; /* int (B, T) each, uploaded per forward (model/transfer.c) */
  cf_upload sources, source_lens; /* encoder-decoder: the source ids (B, S) and lengths (B), int */
  cf_arena scratch;        /* workspaces: attention's, then backward's */
  size_t s_attn, s_branch, s_stream, s_res, s_wide, s_dqkv, s_datt, s_dmem, s_norm;
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

/* The dropout masks' tensor numbers within a block (and the embeddings'), cf_block_dropout. */
enum { DROP_EMB = 0, DROP_ATT_PROBS, DROP_ATT_OUT, DROP_FFN_ACT, DROP_FFN_OUT, DROP_SRC_EMB, DROP_CROSS_PROBS,
       DROP_CROSS_OUT };

/* ---- block.c: linear layers, blocks and stacks, forward and backward ---- */
/* y (N, out) = x (N, in) W^T + b (b SIZE_MAX: none); W and b offsets in the parameters. */
cf_status cf_linear_forward(cf_model *m, int N, cf_mem y, cf_mem x, size_t w, size_t b, int in, int out);
/* dW += dy^T x, db += colsum(dy), dx = dy W (+ dx when accumulate; dx.buf NULL: not wanted). */
cf_status cf_linear_backward(cf_model *m, int N, cf_mem dx, size_t w, size_t b, cf_mem dy, cf_mem x, int in, int out,
                             int accumulate);
/* The mask of tensor `which` of block `layer` of stack s (layer -1: the embedding), p when training. */
cf_dropout cf_block_dropout(const cf_model *m, const block_stack *s, int layer, int which, double p);
/* Whether stack s's masks over a step of `total` micro-batches are numbered within 32 bits. */
cf_status cf_block_dropout_fits(const cf_model *m, const block_stack *s, int total);
/* The stack's blocks and final LayerNorm on its embedding (s->emb), for its forward's shape. */
cf_status cf_stack_forward(cf_model *m, const block_stack *s);
/* Its output: the final LayerNorm's, or the last block's. */
cf_mem cf_stack_output(const cf_model *m, const block_stack *s);
/* The decoder's keys | values of the encoder's output, every block (after the encoder's forward). */
cf_status cf_cross_memory(cf_model *m);
/* Back through the stack: d(stack output) in s_res when it has a final LayerNorm, else in s_stream;
 * on return s_stream holds d(embedding). The decoder's cross-attention leaves d(encoder output) in
 * s_dmem. Tells cf_tell_grads_ready after each block. */
cf_status cf_stack_backward(cf_model *m, const block_stack *s);
/* ---- model.c, for seq2seq.c ---- */
/* What token embeddings are multiplied by: sqrt(C) with model.scale_embeddings, else 1. */
float cf_model_token_scale(const cf_model *m);
/* A stack's embedding of the ids last uploaded to `ids`, with its dropout. */
cf_status cf_model_embed(cf_model *m, const block_stack *s, const cf_upload *ids);
/* A forward's bookkeeping: micro-batch `part` of `parts` at `step`; the step's micro-batches over
 * all ranks into *total. */
cf_status cf_model_begin_forward(cf_model *m, uint32_t step, int part, int parts, int train, int *total);
/* n ids into upload u: straight when they fill it, else through the staging array, padded with 0. */
cf_status cf_model_upload_ids(cf_model *m, cf_upload *u, const int *ids, size_t n);
/* The logits of the decoder's output and, with targets, the loss and in the same pass over the
 * logits their gradient for a backward that may follow (over `total` micro-batches of equal
 * count: the step's mean is the mean of their means). Targets equal to ignore count for nothing. */
cf_status cf_model_output_and_loss(cf_model *m, const int *targets, int ignore, int total);
/* The grads-ready hook told that the gradients from `from` to the end are final (model.c). */
cf_status cf_tell_grads_ready(cf_model *m, size_t from);

/* Fill in m's sizes from mc, oc, B and T, and lay out its parameters (views), activations and
 * workspaces, without touching a device: what cf_model_create allocates and cf_model_plan counts. */
cf_status cf_model_lay_out(cf_model *m, const cf_model_config *mc, const cf_optim_config *oc, int B, int T);
/* The bytes of each flat buffer (parameters, gradients, Adam's m and v; 4 when absent) and of
 * tokens and targets (and an encoder-decoder's source ids and lengths: 0 else), as cf_model_create
 * allocates them. */
typedef struct cf_model_flat_bytes { size_t params, grads, m1, m2, tokens, targets, sources, source_lens; } cf_model_flat_bytes;
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
