/* The training loop: forward, loss, backward, clip, optimizer step, schedule; validation on a
 * fixed set of batches; progress events; metrics.csv; checkpoints; resume; clean stops on
 * divergence and on the caller's request (after a checkpoint). No blocking read inside a step
 * except when a progress row, an evaluation or a checkpoint needs a number. */
#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/runtime.h"
#include "clformer/ops.h"
#include "clformer/train.h"
#include "clformer/dist.h"
#include "runtime/runtime.h"
#include "train/records.h"
#include "train/rundir.h"

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

cf_status cf_evaluate(cf_model *m, const cf_data *d, const cf_config *cfg, double *loss) {
  int B = cf_model_batch(m), T = cf_model_seq_len(m);
  int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  if (!in || !tg) { free(in); free(tg); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); }
  double sum = 0;
  cf_status st = CF_OK;
  for (int i = 0; i < cfg->train.eval_batches && st == CF_OK; i++) {
    cf_data_valid_batch(d, cfg->train.eval_batches, i, B, T, in, tg);  /* the same windows for every seed */
    float l = NAN;
    st = cf_model_forward(m, in, tg, 0, 0);
    if (st == CF_OK) st = cf_model_loss(m, &l);
    sum += l;
  }
  free(in);
  free(tg);
  *loss = sum / cfg->train.eval_batches;
  return st;
}

static cf_status write_text(const char *path, const cf_config *cfg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_config_write(cfg, f);
  fclose(f);
  cf_status st = cf_write_file_atomic(path, buf, len);
  free(buf);
  return st;
}

double cf_train_loss_limit(int vocab) { return 3 * log((double)vocab); }

cf_status cf_train_step(cf_model *m, const int *inputs, const int *targets, int step, float lr, cf_mem loss_acc) {
  return cf_train_step_accumulate(m, inputs, targets, 1, step, lr, loss_acc);
}

cf_status cf_train_step_accumulate(cf_model *m, const int *inputs, const int *targets, int parts, int step, float lr,
                                   cf_mem loss_acc) {
  return cf_train_step_shared(m, inputs, targets, parts, step, lr, loss_acc, NULL);
}

/* The exchange of a step in flight: the gradient ranges read to the host as the backward finishes
 * them (cf_model_on_grads_ready), a bucket each, reduced in the order they were read: the same
 * buckets on every rank, since every rank's model tells the same ranges. */
struct cf_grad_buckets {
  cl_command_queue queue;
  cl_mem grads;
  cf_mem loss;               /* the step loss on the device; it rides with the first bucket */
  int n, cap;
  struct grad_bucket { size_t from, to; cl_event read; } *b;
  size_t open_to;            /* ranges told final but not yet read: [from of the last, open_to) */
  size_t min;                /* floats a bucket gathers before it is read (min_bucket) */
  _Atomic double done_at;    /* when the last range's read completed (its event's callback) */
};
/* Ranges are read (and reduced) once they make at least 1 MiB, so that a small tensor's range (the
 * final LayerNorm's) does not pay an exchange's latency alone; $CLFORMER_GRAD_BUCKET (floats, the
 * same on every rank) changes it: tests use 1, a bucket per range, on models too small for two. */
static cf_status min_bucket(size_t *floats) {
  const char *s = getenv("CLFORMER_GRAD_BUCKET");
  char *end = NULL;
  *floats = CF_DIST_BUCKET_FLOATS / 4;
  if (!s || !*s) return CF_OK;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || v == 0 || s[0] == '-')
    return CF_FAIL(CF_ERR_CONFIG, "CLFORMER_GRAD_BUCKET=%s: needs a positive number of floats", s);
  *floats = (size_t)v;
  return CF_OK;
}

cf_status cf_grad_sync_init(cf_grad_sync *g, cf_context *ctx, cf_model *m) {
  memset(g, 0, sizeof *g);
  g->ctx = ctx;
  g->floats = cf_model_flat_floats(m) + 1;
  if (cf_dist_world()->size == 1) return CF_OK;
  g->host = malloc(g->floats * sizeof *g->host);
  g->buckets = calloc(1, sizeof *g->buckets);
  int cap = cf_model_num_views(m) + 2;  /* the model tells a range at most per stage */
  if (g->buckets) g->buckets->b = calloc((size_t)cap, sizeof *g->buckets->b);
  if (!g->host || !g->buckets || !g->buckets->b) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  g->buckets->cap = cap;
  g->buckets->queue = cf_context_queue(ctx);
  return min_bucket(&g->buckets->min);
}

/* The step's read events released (each waited for first: its read writes into host). */
static void release_buckets(struct cf_grad_buckets *gb) {
  for (int i = 0; i < gb->n; i++) {
    if (clWaitForEvents(1, &gb->b[i].read) != CL_SUCCESS) cf_log(1, "a gradient read failed (the step failed already)");
    CF_RELEASE(clReleaseEvent, gb->b[i].read);
  }
  gb->n = 0;
}

void cf_grad_sync_free(cf_grad_sync *g) {
  if (g->buckets) {
    release_buckets(g->buckets);
    if (g->host && cf_context_finish(g->ctx) != CF_OK) cf_log(1, "the gradient write-back failed (already said)");
    free(g->buckets->b);
  }
  free(g->buckets);
  free(g->host);
  g->buckets = NULL;
  g->host = NULL;
}

static void CL_CALLBACK last_read_done(cl_event ev, cl_int status, void *user) {
  (void)ev;
  (void)status;
  atomic_store(&((struct cf_grad_buckets *)user)->done_at, cf_now());
}

/* cf_model_on_grads_ready's hook: the range joins the open one; once that is gb->min floats or
 * reaches the start, a non-blocking read brings it to the host (the first with the step loss). */
static cf_status grads_ready(void *user, const cf_grads_ready *r) {
  cf_grad_sync *g = user;
  struct cf_grad_buckets *gb = g->buckets;
  if (gb->open_to == SIZE_MAX) gb->open_to = r->to;
  if (gb->open_to - r->from < gb->min && r->from > 0) return CF_OK;
  if (gb->n == gb->cap) return CF_FAIL(CF_ERR_INVALID_ARG, "more gradient ranges than the model has stages");
  struct grad_bucket *b = &gb->b[gb->n];
  if (gb->n == 0)
    CF_CHECK(clEnqueueReadBuffer(gb->queue, r->step_loss.buf, CL_FALSE, r->step_loss.off * 4, 4, &g->host[g->floats - 1],
                                 0, NULL, NULL));
  CF_CHECK(clEnqueueReadBuffer(gb->queue, r->grads, CL_FALSE, r->from * 4, (gb->open_to - r->from) * 4,
                               g->host + r->from, 0, NULL, &b->read));
  b->from = r->from;
  b->to = gb->open_to;
  gb->n++;
  gb->open_to = SIZE_MAX;
  gb->loss = r->step_loss;
  gb->grads = r->grads;
  if (r->from == 0) CF_CHECK(clSetEventCallback(b->read, CL_COMPLETE, last_read_done, gb));
  CF_CHECK(clFlush(gb->queue));  /* the device gets the read now, not at the next wait */
  return CF_OK;
}

/* Every rank's gradients summed (each already scaled to its share of the step: cf_model_set_shard)
 * and its loss averaged, bucket by bucket as the backward brought them to the host, in one fixed
 * order (cf_dist_allreduce_sum: per element, rank 0's + rank 1's + ...); each sum written back
 * behind the backward. The device's gradients and step loss become the world's, the same bits on
 * every rank. sync_s counts what the step waits for after its backward on the device. */
static cf_status sync_grads(cf_grad_sync *g) {
  struct cf_grad_buckets *gb = g->buckets;
  if (gb->n == 0 || gb->b[gb->n - 1].from != 0 || gb->b[0].to != g->floats - 1)
    return CF_FAIL(CF_ERR_INVALID_ARG, "the backward told %s of the gradients final", gb->n ? "part" : "none");
  double seen = 0;
  for (int i = 0; i < gb->n; i++) {
    struct grad_bucket *b = &gb->b[i];
    CF_CHECK(clWaitForEvents(1, &b->read));
    seen = cf_now();
    size_t len = b->to - b->from + (i == 0);  /* the loss, after the first bucket's gradients */
    CF_TRY(cf_dist_allreduce_sum(g->host + b->from, len, CF_DIST_BUCKET_FLOATS, &g->wait_s));
    CF_CHECK(clEnqueueWriteBuffer(gb->queue, gb->grads, CL_FALSE, b->from * 4, (b->to - b->from) * 4, g->host + b->from,
                                  0, NULL, NULL));
  }
  float *loss = &g->host[g->floats - 1];
  *loss *= 1.0f / (float)cf_dist_world()->size;
  CF_CHECK(clEnqueueWriteBuffer(gb->queue, gb->loss.buf, CL_FALSE, gb->loss.off * 4, 4, loss, 0, NULL, NULL));
  CF_TRY(cf_context_finish(g->ctx));  /* the writes done: host may be refilled by the next step's reads */
  double done = atomic_load(&gb->done_at);
  g->sync_s += cf_now() - (done > 0 && done < seen ? done : seen);
  return CF_OK;
}

cf_status cf_train_step_shared(cf_model *m, const int *inputs, const int *targets, int parts, int step, float lr,
                               cf_mem loss_acc, cf_grad_sync *sync) {
  size_t n = (size_t)cf_model_batch(m) * (size_t)cf_model_seq_len(m);
  int shared = sync && sync->host;
  cf_status st = cf_model_zero_grads(m);
  if (shared) {
    sync->buckets->open_to = SIZE_MAX;
    atomic_store(&sync->buckets->done_at, 0.0);
    cf_model_on_grads_ready(m, grads_ready, sync);  /* in the last part's backward */
  }
  for (int k = 0; k < parts && st == CF_OK; k++) {
    st = cf_model_forward_part(m, inputs + k * n, targets + k * n, (uint32_t)step, k, parts, 1);
    if (st == CF_OK) st = cf_model_backward_add(m);
  }
  if (shared) {
    cf_model_on_grads_ready(m, NULL, NULL);
    if (st == CF_OK) st = sync_grads(sync);
    release_buckets(sync->buckets);
  }
  CF_TRY(st);
  CF_TRY(cf_model_global_grad_norm(m));
  CF_TRY(cf_model_watch(m, step, (float)cf_train_loss_limit(cf_model_vocab(m))));
  CF_TRY(cf_model_update(m, lr, step));
  return cf_model_add_loss(m, loss_acc);
}

cf_status cf_train_step_pairs(cf_model *m, const cf_pair_input *in, int step, float lr, cf_mem loss_acc) {
  CF_TRY(cf_model_forward_pairs(m, in, (uint32_t)step, 0, 1, 1));
  CF_TRY(cf_model_backward(m));
  CF_TRY(cf_model_global_grad_norm(m));
  CF_TRY(cf_model_watch(m, step, (float)cf_train_loss_limit(cf_model_vocab(m))));
  CF_TRY(cf_model_update(m, lr, step));
  return cf_model_add_loss(m, loss_acc);
}

cf_pair_input cf_pair_input_of(const cf_pair_batch *b) {
  cf_pair_input in = {b->B, b->S, b->T, b->src, b->src_len, b->tgt_in, b->tgt_out};
  return in;
}

/* Target tokens of a batch (eos included): what its loss is the mean over. */
static size_t batch_tokens(const cf_pair_batch *b) {
  size_t n = 0;
  for (int i = 0; i < b->B; i++) n += (size_t)b->tgt_len[i];
  return n;
}

cf_status cf_evaluate_pairs(cf_model *m, cf_translation *t, double *loss) {
  cf_pair_batch b;
  memset(&b, 0, sizeof b);
  double sum = 0;
  size_t tokens = 0, n = cf_translation_valid_count(t);
  cf_status st = n ? CF_OK : CF_FAIL(CF_ERR_DATA, "no validation pairs (data.valid)");
  for (size_t k = 0; k < n && st == CF_OK; k++) {
    float l = NAN;
    st = cf_translation_valid_batch(t, k, &b);
    cf_pair_input in = cf_pair_input_of(&b);
    if (st == CF_OK) st = cf_model_forward_pairs(m, &in, 0, 0, 1, 0);
    if (st == CF_OK) st = cf_model_loss(m, &l);
    sum += (double)l * (double)batch_tokens(&b);
    tokens += batch_tokens(&b);
  }
  cf_pair_batch_free(&b);
  *loss = tokens ? sum / (double)tokens : NAN;
  return st;
}

/* The first key in which the run's saved config differs from cfg, as an error (only train.steps
 * and the train.*_every/eval_batches/out keys may change). */
static cf_status same_config(const char *dir, const cf_config *saved, const cf_config *cfg) {
  char key[64], was[1100], now[1100];
  if (cf_config_first_difference(saved, cfg, key, was, now))
    return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: %s was %s in this run and is %s now; a resumed run keeps its "
                   "config (only train.steps and the train.*_every/eval_batches/out keys may change)", dir, key, was, now);
  return CF_OK;
}

/* --resume of a run that stopped before its first checkpoint: it starts again from step 0 when its
 * config.yaml is this run's config and its metrics.csv, if any, is ours (nothing else is rewritten). */
static cf_status check_restart(const char *dir, const cf_config *cfg) {
  char path[2100];
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  cf_config saved;
  cf_config_defaults(&saved);
  cf_metrics_row *rows = NULL;
  int n = 0, v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status ps = cf_config_load(&saved, path);
  if (ps == CF_OK) ps = cf_config_validate(&saved);
  snprintf(path, sizeof path, "%s/metrics.csv", dir);
  struct stat sb;  /* an empty one holds nothing to lose (a run killed before it wrote the header) */
  cf_status ms = stat(path, &sb) == 0 && sb.st_size > 0 ? cf_metrics_read(dir, &rows, &n) : CF_OK;
  free(rows);
  cf_set_verbosity(v);
  cf_clear_error();
  if (ps != CF_OK)
    return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: no checkpoint.safetensors there, and its config.yaml is not a "
                   "clformer config", dir);
  CF_TRY(same_config(dir, &saved, cfg));
  if (ms != CF_OK)
    return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: no checkpoint.safetensors there, and its metrics.csv is not a "
                   "clformer metrics file (move it away to start this run again)", dir);
  return CF_OK;
}

/* Whether dir may take this run: a resume needs a run that did not diverge, with a checkpoint or
 * (*restart set: it starts again from step 0) stopped before its first one, which it shows by
 * having config.yaml but neither a checkpoint nor run.json (a run that ended wrote both); a fresh
 * run never overwrites one. */
static cf_status check_run_dir(const char *dir, const cf_config *cfg, int resume, int *restart) {
  char ckpt[2100], cfg_path[2100];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
  cf_run_record rec;
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* an unreadable run.json says nothing against a resume: its checkpoint decides */
  cf_status rs = resume ? cf_run_record_read(dir, &rec) : CF_ERR_NOT_FOUND;
  int diverged_before = rs == CF_OK && !strcmp(rec.status, "diverged");
  cf_set_verbosity(v);
  cf_clear_error();
  *restart = resume && !file_exists(ckpt) && file_exists(cfg_path) && rs == CF_ERR_NOT_FOUND;
  if (diverged_before) return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: this run diverged; there is nothing to resume", dir);
  if (*restart) return check_restart(dir, cfg);
  if (resume && !file_exists(ckpt))
    return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: no checkpoint.safetensors there to resume from", dir);
  if (!resume && (file_exists(ckpt) || file_exists(cfg_path)))
    return CF_FAIL(CF_ERR_CONFIG, "train.out '%s' already holds a run: continue it with --resume %s, or choose another "
                   "train.out (clformer never overwrites a run)", dir, dir);
  return CF_OK;
}

/* Load the checkpoint into m and *ts; the run must be the same run (only its length and
 * bookkeeping may change) and have steps left. */
/* Whether dir's run.json says the run finished (a missing or unreadable one says nothing). */
static int recorded_finished(const char *dir) {
  cf_run_record rec;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  int finished = cf_run_record_read(dir, &rec) == CF_OK && !strcmp(rec.status, "finished");
  cf_set_verbosity(v);
  cf_clear_error();
  return finished;
}

/* *complete: the checkpoint is of the run's last step but its end was never recorded (a kill
 * between the last checkpoint and run.json): nothing is left to train, only the record to write. */
static cf_status resume_from(cf_model *m, const cf_config *cfg, const char *dir, const char *ckpt, cf_train_state *ts,
                             int *complete) {
  char *saved_yaml = NULL;
  CF_TRY(cf_checkpoint_load(m, ckpt, ts, &saved_yaml));
  cf_config saved;
  cf_config_defaults(&saved);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status ps = saved_yaml ? cf_config_load_string(&saved, saved_yaml, ckpt) : CF_ERR_CHECKPOINT;
  cf_set_verbosity(v);
  cf_clear_error();
  free(saved_yaml);
  if (ps == CF_OK) ps = cf_config_validate(&saved);
  if (ps != CF_OK) return CF_FAIL(CF_ERR_CHECKPOINT, "%s: the config stored in it is unreadable", ckpt);
  /* another world size may continue the run when it keeps the step's micro-batches (ranks x
   * train.accumulate): the same global batches, masks and update */
  int was = saved.train.accumulate * (ts->world_size > 0 ? ts->world_size : 1);
  if (saved.train.accumulate != cfg->train.accumulate && was == cfg->train.accumulate * cf_dist_world()->size)
    saved.train.accumulate = cfg->train.accumulate;
  CF_TRY(same_config(dir, &saved, cfg));
  *complete = ts->step == cfg->train.steps && !recorded_finished(dir);
  if (*complete) cf_log(1, "note: %s holds the run's last step (%d) but not its end: recorded as finished", dir, ts->step);
  else if (ts->step >= cfg->train.steps)
    return CF_FAIL(CF_ERR_CONFIG, "--resume %s: the run already has %d steps; raise train.steps (now %d) to continue it",
                   dir, ts->step, cfg->train.steps);
  return CF_OK;
}

/* One run's moving parts, so the loop's pieces can be functions of their own. */
typedef struct run {
  cf_context *ctx;
  const cf_config *cfg;
  const cf_train_options *opts;
  const char *dir;
  char ckpt[2100], merges[2100];
  cf_model *m;
  cf_data data;
  int *in, *tg;
  cl_mem acc;              /* device-side sum of train losses since the last row */
  FILE *metrics;
  cf_train_state ts;
  double t_start, t_last, wall0;
  int last_row_step, start_step;
  int lock_fd;             /* the run directory's lock (rundir.h), -1 when not held */
  int from_checkpoint;     /* a resume that loads a checkpoint (not one restarting from step 0) */
  int complete;            /* the checkpoint is the last step's: only the run's end is left to record */
  int writer;              /* rank 0 (or the only process): the one that writes the run directory */
  cf_grad_sync sync;       /* the gradient all-reduce of a world of several ranks */
  cf_train_result *res;
  int seq2seq;             /* an encoder-decoder: sentence pairs, not byte windows */
  cf_translation tr;       /* its data, and the batch in hand */
  cf_pair_batch pb;
  size_t tokens;           /* its target tokens trained on since the last row */
} run;

static void emit(const run *r, cf_train_event *e) {
  e->label = r->opts->label;
  e->dir = r->dir;
  e->steps = r->cfg->train.steps;
  if (r->opts->hooks.progress) r->opts->hooks.progress(r->opts->hooks.user, e);
}

static void emit_started(const run *r) {
  const cf_config *cfg = r->cfg;
  cf_train_event e = {.kind = CF_TRAIN_STARTED, .step = r->ts.step, .resumed = r->from_checkpoint,
                      .params = (double)cf_model_num_params(r->m), .device_bytes = (double)cf_model_device_bytes(r->m),
                      .plan = cf_model_memory_plan(r->m),
                      .train_bytes = r->data.n_train, .valid_bytes = r->data.n_valid,
                      .train_pairs = r->seq2seq ? cf_pairs_count(r->tr.train) : 0,
                      .valid_pairs = r->tr.valid ? cf_pairs_count(r->tr.valid) : 0,
                      .left_out = r->seq2seq ? cf_pairs_left_out(r->tr.train) : 0,
                      .epoch_steps = r->seq2seq ? (int)cf_translation_epoch_batches(&r->tr) : 0,
                      .unigram_entropy = r->data.unigram_entropy, .cfg = cfg,
                      .device_name = cf_context_device(r->ctx)->name};
  emit(r, &e);
}

/* A row after `step` (the watch has passed it): the mean train loss since the last row, an
 * evaluation when due, metrics.csv, the event, a checkpoint when due. *stop is set when the
 * validation loss is not finite. */
static cf_status row(run *r, int step, float lr, int do_eval, int do_ckpt, int do_log, int *stop) {
  const cf_config *cfg = r->cfg;
  float sum, gnorm, zero = 0;
  CF_TRY(cf_read(r->ctx, cf_at(r->acc, 0), &sum, 1));
  CF_TRY(cf_model_read_global_grad_norm(r->m, &gnorm));
  CF_TRY(cf_write(r->ctx, cf_at(r->acc, 0), &zero, 1));
  double now = cf_now(), elapsed = r->wall0 + now - r->t_start, train_loss = sum / (step - r->last_row_step);
  cf_train_event e = {.kind = CF_TRAIN_LOGGED, .step = step, .lr = lr, .train_loss = train_loss, .valid_loss = NAN,
                      .bleu = NAN, .grad_norm = gnorm, .elapsed_s = elapsed, .checkpoint_step = file_exists(r->ckpt) ? r->ts.step : 0};
  r->res->final_train = train_loss;
  if (do_eval) {
    if (r->seq2seq) CF_TRY(cf_evaluate_pairs(r->m, &r->tr, &e.valid_loss));
    else CF_TRY(cf_evaluate(r->m, &r->data, cfg, &e.valid_loss));
    r->res->final_valid = e.valid_loss;
    if (!isfinite(e.valid_loss)) {
      r->ts.diverged_step = step;
      e.kind = CF_TRAIN_DIVERGED;
      e.in_validation = 1;
      emit(r, &e);
      *stop = 1;
      return CF_OK;
    }
    if (e.valid_loss < r->ts.best_valid) { r->ts.best_valid = e.valid_loss; r->ts.best_step = step; }
    if (r->opts->bleu) CF_TRY(r->opts->bleu(r->opts->bleu_user, r->m, r->dir, &e.bleu));
  }
  now = cf_now();
  elapsed = r->wall0 + now - r->t_start;
  e.elapsed_s = elapsed;
  double tokens = r->seq2seq ? (double)r->tokens
                              : (double)(step - r->last_row_step) * cfg->train.accumulate * cfg->data.batch_size *
                                    cfg->data.seq_len * cf_dist_world()->size;
  e.tokens_per_s = tokens / (now - r->t_last);
  r->tokens = 0;
  e.eta_s = (now - r->t_start) / (step - r->start_step) * (double)(cfg->train.steps - step + r->opts->eta_extra_steps);
  if (r->metrics)
    cf_metrics_append(r->metrics, &(cf_metrics_row){step, lr, train_loss, e.valid_loss, gnorm, e.tokens_per_s, elapsed,
                                                    e.bleu}, r->seq2seq);
  if (do_log || do_eval) emit(r, &e);
  r->res->tokens_per_s = e.tokens_per_s;
  r->last_row_step = step;
  r->t_last = now;
  if (do_ckpt) {
    r->ts.step = step;
    r->ts.wall_s = elapsed;
    if (r->writer) CF_TRY(cf_checkpoint_save(r->m, cfg, &r->ts, r->ckpt));
  }
  return CF_OK;
}

/* The watch found a step that diverged (the loop is at most one step past it): its metrics row,
 * the event naming the tensor, and the end of the run. */
static cf_status nonfinite(run *r, const cf_divergence *bad) {
  const cf_config *cfg = r->cfg;
  double elapsed = r->wall0 + cf_now() - r->t_start;
  float lr = (float)cf_config_lr(cfg, bad->step);
  r->ts.diverged_step = bad->step;
  r->res->final_train = bad->loss;
  if (r->metrics)
    cf_metrics_append(r->metrics, &(cf_metrics_row){bad->step, lr, bad->loss, NAN, bad->grad_norm, NAN, elapsed, NAN},
                      r->seq2seq);
  cf_train_event e = {.kind = CF_TRAIN_DIVERGED, .step = bad->step, .lr = lr, .train_loss = bad->loss,
                      .valid_loss = NAN, .bleu = NAN, .grad_norm = bad->grad_norm, .elapsed_s = elapsed,
                      .checkpoint_step = file_exists(r->ckpt) ? r->ts.step : 0,
                      .loss_limit = cf_train_loss_limit(cfg->model.vocab),
                      .tensor = bad->tensor >= 0 ? cf_model_view(r->m, bad->tensor)->name : NULL,
                      .tensors = bad->tensors, .num_tensors = cf_model_num_views(r->m)};
  emit(r, &e);
  return CF_OK;
}

/* Whether this run stops after the step: asked on any rank stops every rank (none is left waiting). */
static cf_status stop_asked(const run *r, int *stop) {
  const cf_train_hooks *h = &r->opts->hooks;
  *stop = h->should_stop && h->should_stop(h->user);
  return cf_dist_any(stop);
}

/* One optimizer step on the encoder-decoder: the step's batch of pairs. */
static cf_status pairs_step(run *r, int step, float lr) {
  CF_TRY(cf_translation_train_batch(&r->tr, step, &r->pb, NULL));
  r->tokens += batch_tokens(&r->pb);
  cf_pair_input in = cf_pair_input_of(&r->pb);
  return cf_train_step_pairs(r->m, &in, step, lr, cf_at(r->acc, 0));
}

/* The steps after r->ts.step up to train.steps, or until a divergence or a stop request. */
static cf_status loop(run *r) {
  const cf_config *cfg = r->cfg;
  int parts = cfg->train.accumulate, T = cfg->data.seq_len, steps = cfg->train.steps, ticks = r->opts->hooks.ticks;
  float zero = 0;
  CF_TRY(cf_write(r->ctx, cf_at(r->acc, 0), &zero, 1));
  int rows = parts * cfg->data.batch_size, first = cf_dist_world()->rank * rows;
  for (int step = r->ts.step + 1; step <= steps; step++) {
    /* this rank's rows of the step's whole batch (world size x parts x batch_size rows): the
     * micro-batches are its slices, so a step sees the same sequences as one batch that large,
     * whatever the world size */
    float lr = (float)cf_config_lr(cfg, step);
    if (r->seq2seq) {
      CF_TRY(pairs_step(r, step, lr));
    } else {
      cf_data_batch_rows(&r->data, CF_SPLIT_TRAIN, cfg->seed, (uint64_t)(step - 1), first, rows, T, r->in, r->tg);
      CF_TRY(cf_train_step_shared(r->m, r->in, r->tg, parts, step, lr, cf_at(r->acc, 0), &r->sync));
    }
    int stop;  /* asked once: the checkpoint and the exit must agree */
    CF_TRY(stop_asked(r, &stop));
    int last = step == steps || stop;
    int do_log = step % cfg->train.log_every == 0 || last;
    int do_eval = (cfg->train.eval_every && step % cfg->train.eval_every == 0) || last;
    int do_ckpt = (cfg->train.checkpoint_every && step % cfg->train.checkpoint_every == 0) || last;
    cf_divergence bad;  /* a row waits for this step's verdict: no checkpoint after a bad step */
    CF_TRY(cf_model_watch_poll(r->m, do_log || do_eval || do_ckpt, &bad));
    if (bad.step) return nonfinite(r, &bad);
    if (do_log || do_eval || do_ckpt) {
      int div = 0;
      CF_TRY(row(r, step, lr, do_eval, do_ckpt, do_log, &div));
      if (div) return CF_OK;
    } else if (ticks) {
      emit(r, &(cf_train_event){.kind = CF_TRAIN_TICK, .step = step});
    }
    if (stop) {
      r->res->interrupted = 1;
      emit(r, &(cf_train_event){.kind = CF_TRAIN_STOPPED, .step = step});
      return CF_OK;
    }
  }
  return CF_OK;
}

/* run.json: how the run ended, for people and for `compare` (the checkpoint is untouched on
 * divergence: it holds the last good weights). */
static cf_status record_end(const run *r) {
  const cf_train_state *ts = &r->ts;
  cf_run_record rec = {.steps_done = ts->diverged_step ? ts->diverged_step - 1 : ts->step, .steps = r->cfg->train.steps,
                       .diverged_step = ts->diverged_step, .best_step = ts->best_step, .best_valid = ts->best_valid,
                       .wall_s = r->wall0 + cf_now() - r->t_start, .tokens_per_s = r->res->tokens_per_s,
                       .ranks = cf_dist_world()->size};
  snprintf(rec.status, sizeof rec.status, "%s",
           ts->diverged_step ? "diverged" : r->res->interrupted ? "interrupted" : "finished");
  return cf_run_record_write(r->dir, &rec);
}

/* An encoder-decoder's checkpoint records its BPE's checksum: a resume must find that vocabulary
 * in the run directory (not another run's copied there), and the checkpoints it writes record it. */
static cf_status check_vocabulary(run *r) {
  unsigned long long mine = cf_bpe_checksum(r->tr.bpe);
  if (r->ts.vocab && r->ts.vocab != mine)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s is not the vocabulary %s was trained with (checksum %016llx, the checkpoint "
                   "records %016llx): put the run's own bpe.merges back", r->merges, r->ckpt, mine, r->ts.vocab);
  r->ts.vocab = mine;
  return CF_OK;
}

/* Model, buffers, state (fresh or resumed), config.yaml and metrics.csv. */
static cf_status prepare(run *r) {
  const cf_config *cfg = r->cfg;
  size_t N = r->seq2seq ? 1 : (size_t)cfg->train.accumulate * (size_t)cfg->data.batch_size * (size_t)cfg->data.seq_len;
  r->in = malloc(N * sizeof *r->in);
  r->tg = malloc(N * sizeof *r->tg);
  if (!r->in || !r->tg) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  int B, T;
  cf_model_shape(cfg, &B, &T);
  CF_TRY(cf_model_create(r->ctx, &cfg->model, &cfg->optim, cfg->seed, B, T, &r->m));
  CF_TRY(cf_buffer_create(r->ctx, 4, &r->acc));
  const cf_world *w = cf_dist_world();
  CF_TRY(cf_model_set_shard(r->m, w->rank * cfg->train.accumulate, w->size * cfg->train.accumulate));
  CF_TRY(cf_grad_sync_init(&r->sync, r->ctx, r->m));
  r->ts = (cf_train_state){.best_valid = INFINITY};
  /* a resume: rank 0 reads the checkpoint and hands it to the others (share_state) */
  if (r->from_checkpoint && r->writer) CF_TRY(resume_from(r->m, cfg, r->dir, r->ckpt, &r->ts, &r->complete));
  else CF_TRY(cf_model_init(r->m, cfg->seed));
  if (r->seq2seq) CF_TRY(check_vocabulary(r));  /* before the run directory is written to */
  r->ts.world_size = w->size;  /* the checkpoints this session writes */
  if (!r->writer) return CF_OK;
  char cfg_path[2100];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", r->dir);
  CF_TRY(write_text(cfg_path, cfg));
  if (!(r->metrics = cf_metrics_open(r->dir, r->ts.step, r->seq2seq)))
    return CF_FAIL(CF_ERR_IO, "cannot write %s/metrics.csv: %s", r->dir, strerror(errno));
  return CF_OK;
}

static cf_status open_run_dir(run *r);

/* A resumed run's weights, moments and state from rank 0 to every other rank (no shared file
 * system needed). */
static cf_status share_state(run *r) {
  if (cf_dist_world()->size == 1 || !r->from_checkpoint) return CF_OK;
  size_t n = cf_model_flat_floats(r->m);
  float *host = malloc(n * sizeof *host);
  if (!host) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = cf_dist_bcast(&r->ts, sizeof r->ts, 0);
  if (st == CF_OK) st = cf_dist_bcast(&r->complete, sizeof r->complete, 0);
  for (int which = 0; which < 4 && st == CF_OK; which++) {
    if (r->writer) st = cf_model_read(r->m, which, host);
    if (st == CF_OK) st = cf_dist_bcast(host, n * sizeof *host, 0);
    if (st == CF_OK && !r->writer) st = cf_model_write(r->m, which, host);
  }
  free(host);
  return st;
}

/* Everything before the first step, on every rank: the data, the memory plan, the run directory
 * (rank 0's alone), the model and its state. Failures are agreed (cf_dist_agree), so no rank is left
 * waiting for one that stopped. */
static cf_status start(run *r) {
  const cf_config *cfg = r->cfg;
  cf_status st = r->seq2seq ? CF_OK : cf_data_open(&r->data, cfg);
  if (r->seq2seq && cf_dist_world()->size > 1)
    st = CF_FAIL(CF_ERR_CONFIG, "model.arch encoder_decoder trains in one process (not under mpirun) so far");
  /* a model the device cannot hold is refused before the run directory is touched */
  cf_memory_plan plan;
  int B, T;
  cf_model_shape(cfg, &B, &T);
  if (st == CF_OK) st = cf_model_plan(&cfg->model, &cfg->optim, B, T, cf_context_device(r->ctx), &plan);
  if (st == CF_OK) st = cf_model_fits(&plan);
  if (st == CF_OK && r->writer) st = open_run_dir(r);
  /* the subword vocabulary lives in the run directory: learned by a run from step 0 (again, when one
   * that stopped before its first checkpoint left its file: that may be another config's), read back
   * by a resume */
  if (st == CF_OK && r->seq2seq && !r->from_checkpoint && unlink(r->merges) != 0 && errno != ENOENT)
    st = CF_FAIL(CF_ERR_IO, "cannot replace %s: %s", r->merges, strerror(errno));
  if (st == CF_OK && r->seq2seq) st = cf_translation_open(&r->tr, cfg, r->merges);
  CF_TRY(cf_dist_agree(st));
  CF_TRY(cf_dist_bcast(&r->from_checkpoint, sizeof r->from_checkpoint, 0));
  CF_TRY(cf_dist_agree(prepare(r)));
  return share_state(r);
}

/* The run directory, created for a fresh run and locked for this one (another process holding it
 * is refused at once); checked; cleared of the temporaries a killed run's writes left. */
static cf_status open_run_dir(run *r) {
  int resume = r->opts->resume_dir != NULL, restart = 0;
  char cfg_path[2100];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", r->dir);
  if (!resume && cf_mkdirs(r->dir) != CF_OK) return CF_FAIL(CF_ERR_CONFIG, "train.out: %s", cf_last_error());
  /* a resume of a directory that holds no run is refused below without leaving a lock file there */
  if (!resume || file_exists(r->ckpt) || file_exists(cfg_path)) CF_TRY(cf_run_dir_lock(r->dir, &r->lock_fd));
  CF_TRY(check_run_dir(r->dir, r->cfg, resume, &restart));
  r->from_checkpoint = resume && !restart;
  if (restart)
    cf_log(1, "%s holds no checkpoint: its run stopped before the first one; starting it again from step 0", r->dir);
  int n = cf_run_dir_remove_stale(r->dir);
  if (n) cf_log(1, "%s: removed %d stale temporar%s left by a killed run", r->dir, n, n == 1 ? "y" : "ies");
  return CF_OK;
}

cf_status cf_train(cf_context *ctx, const cf_config *cfg, const cf_train_options *opts_in, cf_train_result *res) {
  cf_train_options opts = opts_in ? *opts_in : (cf_train_options){0};
  memset(res, 0, sizeof *res);
  res->final_valid = res->final_train = NAN;
  run r = {.ctx = ctx, .cfg = cfg, .opts = &opts, .res = res, .lock_fd = -1, .writer = cf_dist_world()->rank == 0,
           .seq2seq = cfg->model.arch == CF_ARCH_ENCODER_DECODER};
  r.dir = opts.resume_dir ? opts.resume_dir : cfg->train.out;
  snprintf(r.ckpt, sizeof r.ckpt, "%s/checkpoint.safetensors", r.dir);
  snprintf(r.merges, sizeof r.merges, "%s/%s", r.dir, CF_TRAIN_MERGES_FILE);
  cf_status st = start(&r);
  if (st == CF_OK) {
    emit_started(&r);
    r.t_start = r.t_last = cf_now();
    r.wall0 = r.ts.wall_s;
    r.last_row_step = r.start_step = r.ts.step;
    if (!r.complete) st = loop(&r);
  }
  if (st == CF_OK && r.writer) st = record_end(&r);
  res->state = r.ts;
  cf_grad_sync_free(&r.sync);
  if (r.metrics) fclose(r.metrics);
  cf_buffer_free(r.acc);
  cf_model_free(r.m);
  cf_data_close(&r.data);
  cf_translation_close(&r.tr);
  cf_pair_batch_free(&r.pb);
  free(r.in);
  free(r.tg);
  cf_run_dir_unlock(r.lock_fd);
  return st;
}
