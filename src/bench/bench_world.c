/* `bench step` under mpirun (issue 18): how data-parallel training scales, measured in one job.
 *
 * Every rank builds the config's model with its own batch of data.batch_size sequences (the weak
 * scaling a run with more ranks does: each rank's share of a step stays the same). After `warmup`
 * data-parallel steps, two phases, each of `steps` steps timed one by one (wall clock, to the end of
 * the step on the device):
 *   alone  rank 0 trains alone (cf_train_step: no gradient exchange), the others waiting idle
 *          (cf_dist_barrier_idle: they poll every millisecond, taking no core from it): the one-rank
 *          baseline, on the same device and in the same job;
 *   world  every rank trains its share and the gradients are summed (cf_train_step_shared: each
 *          range read to the host as the backward finishes it, the fixed-order all-reduce while the
 *          device goes on, written back), as `train` does under mpirun.
 * Per rank: median [min, max] step, tokens/s (its B*T / median), and per step the milliseconds the
 * step waits for the exchange after its backward on the device (what the overlap left exposed) and
 * those inside MPI (the overlapped ones too, and waiting for the slowest rank). The world's
 * tokens/s is size * B*T / the slowest rank's median step; the scaling efficiency is that over size
 * times the alone tokens/s (1.0: perfect scaling). Rank 0
 * prints and reports; the JSON's "world" (cmd_bench.c documents it). Not here: the per-kernel
 * breakdown and --vs-torch, which are one process's (run `bench step` without mpirun). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/bench.h"
#include "clformer/dist.h"
#include "clformer/model.h"
#include "clformer/train.h"
#include "base/base.h"
#include "runtime/runtime.h"
#include "bench/bench_internal.h"

enum { NAME = 300 };  /* bytes of a rank's "host, device" text */
/* A rank's figures, gathered into world_bench.ranks (rank r's at r * FIGS): its median, fastest and
 * slowest step, and its median seconds a step inside MPI and in the whole exchange. */
enum { F_MEDIAN, F_MIN, F_MAX, F_MPI, F_XCHG, FIGS };

typedef struct world_bench {
  cf_context *ctx;
  const cf_config *cfg;
  FILE *out;
  int steps, warmup, N, step;
  cf_model *m;
  cl_mem acc;
  int *in, *tg;
  cf_grad_sync sync;
  int shared;                  /* 1: the steps exchange gradients (world phase); 0: rank 0 alone */
  double *t, *wait, *xchg;     /* per timed step: seconds, in MPI, in the whole exchange */
  cf_bench_stats alone;        /* rank 0's alone steps (seconds) */
  double *ranks;               /* per rank: FIGS figures */
  char *names;                 /* per rank: "host, device" */
} world_bench;

/* One step, without waiting for the device (a cf_bench_fn). */
static cf_status world_step(void *arg) {
  world_bench *w = arg;
  w->step++;
  return cf_train_step_shared(w->m, w->in, w->tg, 1, w->step, (float)w->cfg->optim.lr, cf_at(w->acc, 0),
                              w->shared ? &w->sync : NULL);
}

/* The model (this rank's share of each step), random tokens (per rank), the exchange's buffers. */
static cf_status world_setup(world_bench *w) {
  const cf_config *cfg = w->cfg;
  const cf_world *wd = cf_dist_world();
  w->in = malloc(sizeof(int) * (size_t)w->N);
  w->tg = malloc(sizeof(int) * (size_t)w->N);
  w->t = malloc(sizeof(double) * 3 * (size_t)w->steps);
  w->ranks = malloc(sizeof(double) * FIGS * (size_t)wd->size);
  w->names = malloc((size_t)NAME * (size_t)wd->size);
  if (!w->in || !w->tg || !w->t || !w->ranks || !w->names) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  w->wait = w->t + w->steps;
  w->xchg = w->wait + w->steps;
  unsigned long long x = 0x2545f4914f6cdd1dULL + (unsigned long long)wd->rank;
  for (int i = 0; i < w->N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w->in[i] = (int)(x & 255);
    w->tg[i] = (int)((x >> 8) & 255);
  }
  CF_TRY(cf_model_create(w->ctx, &cfg->model, &cfg->optim, cfg->seed, cfg->data.batch_size, cfg->data.seq_len, &w->m));
  CF_TRY(cf_model_init(w->m, cfg->seed));
  CF_TRY(cf_model_set_shard(w->m, wd->rank, wd->size));
  CF_TRY(cf_grad_sync_init(&w->sync, w->ctx, w->m));
  CF_TRY(cf_buffer_create(w->ctx, 4, &w->acc));
  float zero = 0;
  return cf_write(w->ctx, cf_at(w->acc, 0), &zero, 1);
}

/* `steps` timed steps: each one's seconds, and its seconds in MPI and in the exchange. */
static cf_status timed(world_bench *w) {
  for (int i = 0; i < w->steps; i++) {
    double wait0 = w->sync.wait_s, xchg0 = w->sync.sync_s;
    CF_TRY(cf_bench_time_calls(w->ctx, world_step, w, 1, &w->t[i]));
    w->wait[i] = w->sync.wait_s - wait0;
    w->xchg[i] = w->sync.sync_s - xchg0;
  }
  return CF_OK;
}

/* This rank's figures of the world phase into every rank's w->ranks. */
static cf_status gather_figures(world_bench *w) {
  int size = cf_dist_world()->size;
  cf_bench_stats s = cf_bench_stats_of(w->t, w->steps);
  double mine[FIGS] = {[F_MEDIAN] = s.median, [F_MIN] = s.min, [F_MAX] = s.max,
                       [F_MPI] = cf_bench_stats_of(w->wait, w->steps).median,
                       [F_XCHG] = cf_bench_stats_of(w->xchg, w->steps).median};
  double *col = malloc(sizeof(double) * (size_t)size);
  cf_status st = col ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int k = 0; k < FIGS && st == CF_OK; k++) {
    st = cf_dist_gather_double(mine[k], col);
    for (int r = 0; st == CF_OK && r < size; r++) w->ranks[r * FIGS + k] = col[r];
  }
  free(col);
  return st;
}

/* Warm-up together, rank 0 alone, then all together; every rank's figures gathered. */
static cf_status world_phases(world_bench *w) {
  const cf_world *wd = cf_dist_world();
  w->shared = 1;
  for (int i = 0; i < w->warmup; i++) CF_TRY(cf_bench_time_calls(w->ctx, world_step, w, 1, &w->t[0]));
  w->shared = 0;
  if (wd->rank == 0) {
    CF_TRY(timed(w));
    w->alone = cf_bench_stats_of(w->t, w->steps);
  }
  CF_TRY(cf_dist_barrier_idle());
  CF_TRY(cf_dist_bcast(&w->alone, sizeof w->alone, 0));
  w->shared = 1;
  CF_TRY(timed(w));
  CF_TRY(gather_figures(w));
  const cf_device_info *d = cf_context_device(w->ctx);
  char name[NAME];
  snprintf(name, sizeof name, "%.100s, %.180s", wd->host, d->name);
  return cf_dist_gather_text(name, w->names, NAME);
}

/* The slowest rank's median step: the world's step, every rank waiting for it in the all-reduce. */
static double world_step_s(const world_bench *w) {
  double worst = 0;
  for (int r = 0; r < cf_dist_world()->size; r++)
    if (w->ranks[r * FIGS + F_MEDIAN] > worst) worst = w->ranks[r * FIGS + F_MEDIAN];
  return worst;
}

static void world_print(const world_bench *w) {
  int size = cf_dist_world()->size;
  double tps1 = w->N / w->alone.median, tps = size * w->N / world_step_s(w);
  fprintf(w->out, "model: %d layers, d_model %d; batch %d x %d = %d tokens a rank; %d timed steps a phase after %d "
          "warm-up\n", w->cfg->model.layers, w->cfg->model.d_model, w->cfg->data.batch_size, w->cfg->data.seq_len, w->N,
          w->steps, w->warmup);
  fprintf(w->out, "1 rank (rank 0 alone, the others idle): step median %.2f ms [min %.2f, max %.2f], %.0f tokens/s\n",
          w->alone.median * 1e3, w->alone.min * 1e3, w->alone.max * 1e3, tps1);
  fprintf(w->out, "%d ranks, data parallel (gradients summed through the host every step):\n", size);
  fprintf(w->out, "  %-4s %-44s %24s %10s %12s %10s\n", "rank", "host, device", "step ms median [min, max]",
          "tokens/s", "exchange ms", "in MPI ms");
  for (int r = 0; r < size; r++) {
    const double *f = w->ranks + r * FIGS;
    char range[64];
    snprintf(range, sizeof range, "%.2f [%.2f, %.2f]", f[F_MEDIAN] * 1e3, f[F_MIN] * 1e3, f[F_MAX] * 1e3);
    fprintf(w->out, "  %-4d %-44.44s %24s %10.0f %12.2f %10.2f\n", r, w->names + (size_t)r * NAME, range,
            w->N / f[F_MEDIAN], f[F_XCHG] * 1e3, f[F_MPI] * 1e3);
  }
  fprintf(w->out, "  (exchange: a step's wait after its backward on the device; in MPI: all its MPI time, that "
          "overlapping the backward too)\n");
  fprintf(w->out, "world: %.0f tokens/s (%d x %d tokens / the slowest rank's median step %.2f ms); scaling efficiency "
          "%.2f (%.0f / (%d x %.0f))\n", tps, size, w->N, world_step_s(w) * 1e3, tps / (size * tps1), tps, size, tps1);
  fflush(w->out);
}

static json_t *world_json(const world_bench *w) {
  const cf_world *wd = cf_dist_world();
  double tps1 = w->N / w->alone.median, tps = wd->size * w->N / world_step_s(w);
  json_t *rows = json_array();
  for (int r = 0; rows && r < wd->size; r++) {
    const double *f = w->ranks + r * FIGS;
    cf_bench_stats s = {f[F_MEDIAN], f[F_MIN], f[F_MAX]};
    json_t *row = json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "rank", r, "host_device", w->names + (size_t)r * NAME,
                            "step_ms", cf_bench_stats_json(s, 1e3, "%.4f"), "tokens_per_s",
                            cf_json_num(w->N / f[F_MEDIAN], "%.1f"), "exchange_ms",
                            cf_json_num(f[F_XCHG] * 1e3, "%.4f"), "mpi_ms", cf_json_num(f[F_MPI] * 1e3, "%.4f"));
    if (json_array_append_new(rows, row)) {
      json_decref(rows);
      rows = NULL;
    }
  }
  if (!rows) return NULL;
  return json_pack("{s:i, s:i, s:i, s:i, s:{s:o, s:o}, s:o, s:o, s:o}", "ranks", wd->size, "tokens_per_rank", w->N,
                   "warmup", w->warmup, "steps", w->steps, "alone", "step_ms",
                   cf_bench_stats_json(w->alone, 1e3, "%.4f"), "tokens_per_s", cf_json_num(tps1, "%.1f"), "per_rank",
                   rows, "tokens_per_s", cf_json_num(tps, "%.1f"), "efficiency",
                   cf_json_num(tps / (wd->size * tps1), "%.4f"));
}

cf_status cf_bench_step_world(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *o, FILE *out,
                              struct json_t *report) {
  if (cfg->model.arch == CF_ARCH_ENCODER_DECODER)
    return CF_FAIL(CF_ERR_CONFIG, "bench step under mpirun measures the language model (model.arch decoder): an "
                   "encoder-decoder trains on one process so far");
  world_bench w;
  memset(&w, 0, sizeof w);
  w.ctx = ctx;
  w.cfg = cfg;
  w.out = out;
  w.steps = o->steps > 0 ? o->steps : 20;
  w.warmup = o->warmup >= 1 ? o->warmup : 1;
  w.N = cfg->data.batch_size * cfg->data.seq_len;
  cf_status st = cf_dist_agree(world_setup(&w));
  if (st == CF_OK) st = world_phases(&w);
  if (st == CF_OK && cf_dist_world()->rank == 0) {
    world_print(&w);
    if (report) st = cf_json_set(report, "world", world_json(&w));
  }
  cf_grad_sync_free(&w.sync);
  if (w.acc) cf_buffer_free(w.acc);
  cf_model_free(w.m);
  free(w.in);
  free(w.tg);
  free(w.t);
  free(w.ranks);
  free(w.names);
  return st;
}
