/* clformer/train.h: training runs, their checkpoints (safetensors) and run-directory records. */
#ifndef CLFORMER_TRAIN_H
#define CLFORMER_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/data.h"
#include "clformer/model.h"

/* The safetensors file format (8-byte little-endian header length, JSON header, raw
 * little-endian data), so PyTorch and other tools read our checkpoints. F32 tensors and
 * string metadata only, which is all clformer writes. The limits below hold both ways: the
 * writer refuses what the reader would, and the reader refuses anything larger before
 * allocating for it. */
#define CF_ST_MAX_DIMS 4             /* dimensions of a tensor */
#define CF_ST_MAX_META 64            /* metadata entries in a file */
#define CF_ST_MAX_META_LEN 16384     /* bytes of a metadata key or value, its terminating NUL included */
#define CF_ST_MAX_HEADER (16 << 20)  /* bytes of the JSON header */

typedef struct cf_st_tensor {
  const char *name;
  const float *data;
  int ndim;
  int64_t shape[CF_ST_MAX_DIMS];
} cf_st_tensor;

/* Write atomically (temporary file, fsync, rename): an existing file at path stays intact
 * until the new one is complete. meta is n_meta (key, value) string pairs. */
cf_status cf_safetensors_write(const char *path, const cf_st_tensor *tensors, int n, const char *const (*meta)[2],
                               int n_meta);

typedef struct cf_st_entry {
  char name[160];
  int ndim;
  int64_t shape[CF_ST_MAX_DIMS];
  size_t numel;
  const float *data;   /* into the loaded file (may be unaligned: copy with memcpy) */
} cf_st_entry;

typedef struct cf_st_meta {
  const char *key, *value;
} cf_st_meta;

typedef struct cf_st_file {
  char *buf;           /* the whole file */
  size_t len;
  cf_st_entry *entries;
  int n;
  cf_st_meta *meta;    /* n_meta (key, value) pairs; their text lies in the same allocation */
  int n_meta;
} cf_st_file;

/* Read and check a file: header length, JSON syntax, dtypes, shapes against offsets, offsets
 * inside the data and covering it exactly once, the limits above. Anything wrong is
 * CF_ERR_CHECKPOINT with the reason. */
cf_status cf_safetensors_read(const char *path, cf_st_file *f);
void cf_safetensors_free(cf_st_file *f);
const cf_st_entry *cf_safetensors_find(const cf_st_file *f, const char *name);
const char *cf_safetensors_meta(const cf_st_file *f, const char *key);  /* NULL if absent */

/* Training: the loop (forward, loss, backward, clip, optimizer, schedule), validation, progress,
 * metrics.csv, checkpoints (safetensors) and resume. */
/* Everything besides the weights and moments that a resumed run needs. Data order and dropout
 * masks are keyed by (seed, step), so the step is the whole generator state and data cursor. */
typedef struct cf_train_state {
  int step;              /* optimizer steps done */
  double best_valid;     /* lowest validation loss so far (INFINITY if none) */
  int best_step;
  double wall_s;         /* training time so far, over all sessions */
  int diverged_step;     /* 0, or the step whose loss or gradient was not finite */
  int world_size;        /* ranks sharing each step (clformer/dist.h) when it was saved; 0 counts as 1 */
  unsigned long long vocab; /* an encoder-decoder's BPE (cf_bpe_checksum), 0: none recorded (a language
                               model, or a checkpoint older than the record) */
} cf_train_state;

/* Write model weights (one tensor per view, named as in cf_tensor_view), Adam's moments (flat),
 * the resolved config and the state, atomically; the previous file stays until the new one is
 * complete. */
cf_status cf_checkpoint_save(cf_model *m, const cf_config *cfg, const cf_train_state *st, const char *path);
/* Load into a model built from the same architecture; a truncated, corrupt or mismatched file,
 * or training state out of range (step beyond 10^8 or beyond the stored config's train.steps,
 * best_step beyond step, a best_valid of NaN or -inf, a wall_s not finite and >= 0, a nonzero
 * diverged_step: checkpoints are written only at healthy steps) is refused (CF_ERR_CHECKPOINT)
 * with the reason, before the model or *st is touched. cfg_yaml (optional) receives a malloc'd
 * copy of the config stored in the file. */
cf_status cf_checkpoint_load(cf_model *m, const char *path, cf_train_state *st, char **cfg_yaml);

/* What a run tells its caller as it goes (the library never prints progress itself). */
typedef enum cf_train_event_kind {
  CF_TRAIN_STARTED,   /* model and data ready: the fields below marked (start) are set */
  CF_TRAIN_LOGGED,    /* a progress row (every train.log_every steps, at evaluations and the last step) */
  CF_TRAIN_TICK,      /* a step between rows (only when hooks.ticks is set): step and steps */
  CF_TRAIN_DIVERGED,  /* the run diverged at `step` (every step is watched): its own loss (train_loss)
                         was not finite or above loss_limit, or its gradient norm not finite; or
                         (in_validation) the validation loss was not finite */
  CF_TRAIN_STOPPED,   /* stopped on request after `step`, its checkpoint saved */
} cf_train_event_kind;

typedef struct cf_train_event {
  cf_train_event_kind kind;
  const char *label;                             /* cf_train_options.label, or NULL */
  const char *dir;                               /* the run directory */
  int step, steps;
  double lr, train_loss, valid_loss, grad_norm;  /* valid_loss NAN: not evaluated at this step */
  double bleu;                                   /* NAN: not measured (cf_train_options.bleu) */
  double tokens_per_s, elapsed_s, eta_s;
  int checkpoint_step;                           /* DIVERGED: the last good checkpoint's step, 0 if none */
  int in_validation;                             /* DIVERGED: at the evaluation, valid_loss not finite */
  double loss_limit;                             /* DIVERGED (not in_validation): cf_train_loss_limit */
  const char *tensor;                            /* DIVERGED: the tensor nearest the output whose gradient
                                                    was not finite; NULL: none was */
  int tensors, num_tensors;                      /* DIVERGED: how many tensors' gradients were not, of all */
  /* (start) */
  int resumed;                                   /* continuing after `step` */
  double params, device_bytes;
  const cf_memory_plan *plan;                    /* the model's, against the device */
  size_t train_bytes, valid_bytes;
  double unigram_entropy;
  size_t train_pairs, valid_pairs, left_out;     /* encoder-decoder: pairs, and training pairs over data.max_len */
  int epoch_steps;                               /* encoder-decoder: steps (batches) an epoch */
  const cf_config *cfg;
  const char *device_name;
} cf_train_event;

/* The caller's side of a run: progress and stop requests. All optional. */
typedef struct cf_train_hooks {
  void (*progress)(void *user, const cf_train_event *e);
  /* polled once per step; non-zero stops the run after that step with a checkpoint (SIGINT in the CLI) */
  int (*should_stop)(void *user);
  void *user;
  int ticks;                /* also send CF_TRAIN_TICK between rows (a live bar on a terminal) */
} cf_train_hooks;

typedef struct cf_train_options {
  const char *resume_dir;   /* continue the run in this directory (its checkpoint; none yet: from step 0) */
  const char *label;        /* this run's name in its events (a comparison's variant); NULL: none */
  long eta_extra_steps;     /* steps of other runs after this one (a comparison), for a combined ETA */
  cf_train_hooks hooks;
  /* An encoder-decoder's BLEU at each evaluation, computed by the caller (compare: greedy, on the
   * test set) from the model and its run directory (its bpe.merges): into the event and the bleu
   * column of metrics.csv. NULL: none. */
  cf_status (*bleu)(void *user, cf_model *m, const char *dir, double *bleu);
  void *bleu_user;
} cf_train_options;

typedef struct cf_train_result {
  cf_train_state state;
  double final_valid, final_train;
  double tokens_per_s;
  int interrupted;          /* stopped by hooks.should_stop after checkpointing */
} cf_train_result;

/* Run (or resume) training as the config says, into cfg->train.out. A diverged run is not an
 * error: it returns CF_OK with state.diverged_step set and the last good checkpoint kept. The run
 * directory is locked (its run.lock) for the call: one that another process is using is refused
 * at once (CF_ERR_CONFIG, naming that process). Temporaries a killed run's writes left there are
 * removed. A resume of a run that stopped before its first checkpoint starts it again from step 0
 * if its config.yaml is this config. */
cf_status cf_train(cf_context *ctx, const cf_config *cfg, const cf_train_options *opts, cf_train_result *res);

/* One optimizer step on one batch (B*T inputs and targets): forward with dropout, backward, the
 * gradient norm, the divergence watch (cf_model_watch, at cf_train_loss_limit), the update at
 * learning rate lr, and the batch's loss added into loss_acc (one device float). The same step for
 * `train` and `bench step`. */
cf_status cf_train_step(cf_model *m, const int *inputs, const int *targets, int step, float lr, cf_mem loss_acc);
/* The same step over `parts` micro-batches (train.accumulate): inputs and targets hold parts x B x T
 * ints, micro-batch k being rows k*B .. k*B+B-1; their gradients are summed (each loss scaled by
 * 1/parts) before the norm, the watch (on the parts' mean loss) and the update, and that mean loss
 * is added into loss_acc. */
cf_status cf_train_step_accumulate(cf_model *m, const int *inputs, const int *targets, int parts, int step, float lr,
                                   cf_mem loss_acc);
/* Data parallelism (clformer/dist.h): a step whose gradients are summed over the world's ranks
 * before the norm, the watch and the update, overlapping the backward: each range of gradients the
 * last micro-batch's backward finishes (cf_model_on_grads_ready) goes to the host by a non-blocking
 * read while the device goes on, and is all-reduced there and written back as the device works on
 * the layers before. host: room for the flat gradients and the loss (NULL in a world of one: nothing
 * to share); wait_s: seconds inside MPI's collectives (those overlapping the backward included),
 * sync_s: what a step waits for the exchange after its backward (from the device's last gradient
 * read to the world's gradients back on the device), both summed over steps. */
typedef struct cf_grad_sync {
  cf_context *ctx;  /* the model's */
  float *host;
  size_t floats;
  double wait_s, sync_s;
  struct cf_grad_buckets *buckets;  /* the step's buckets in flight (train.c) */
} cf_grad_sync;
#define CF_DIST_BUCKET_FLOATS ((size_t)1 << 20)  /* at most 4 MiB an all-reduce call (MPI's counts are ints) */
cf_status cf_grad_sync_init(cf_grad_sync *g, cf_context *ctx, cf_model *m);
void cf_grad_sync_free(cf_grad_sync *g);
/* cf_train_step_accumulate on this rank's share of the step (cf_model_set_shard), with the world's
 * gradients and mean loss put in place of its own before the norm (so the clipping norm, the watch
 * and the update are the world's: the same on every rank). sync NULL or sync->host NULL: one process. */
cf_status cf_train_step_shared(cf_model *m, const int *inputs, const int *targets, int parts, int step, float lr,
                               cf_mem loss_acc, cf_grad_sync *sync);
/* A step's loss above this, three times that of guessing uniformly among vocab (16.6 nats for
 * bytes), counts as divergence: no learning run comes back from it in practice. */
double cf_train_loss_limit(int vocab);

/* Mean validation loss over the config's fixed validation batches. */
cf_status cf_evaluate(cf_model *m, const cf_data *d, const cf_config *cfg, double *loss);

/* ---- The encoder-decoder ---- */
/* Its run directory's subword vocabulary (cf_bpe_save's file), beside the checkpoint. */
#define CF_TRAIN_MERGES_FILE "bpe.merges"
/* A batch of pairs as the model takes it. */
cf_pair_input cf_pair_input_of(const cf_pair_batch *b);
/* cf_train_step on a batch of pairs (one process, no accumulation). */
cf_status cf_train_step_pairs(cf_model *m, const cf_pair_input *in, int step, float lr, cf_mem loss_acc);
/* The validation loss: the mean over every target token of the validation pairs. */
cf_status cf_evaluate_pairs(cf_model *m, cf_translation *t, double *loss);

#endif
