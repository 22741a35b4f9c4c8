/* `bench gemm`: every GEMM shape the config's model issues, through CLBlast and through our own
 * kernels (and OpenBLAS's cblas_sgemm on the host when asked and present), plus the device's
 * fp32 FMA peak from a register-only kernel.
 *
 * Shapes, with N = batch_size * seq_len tokens, C = d_model, F = d_ff, V = 256, T = seq_len,
 * HS = C / heads, BNH = batch_size * heads: each linear layer x (N, in) -> y (N, out) with
 * W (out, in) issues forward y = x W^T (NT: N, out, in), dW += dy^T x (TN: out, in, N; beta 1)
 * and dx = dy W (NN: N, in, out), for qkv (3C, C), proj (C, C), fc1 (F, C), fc2 (C, F) and
 * logits (V, C). Attention issues BNH-batched q k^T (NT: T, T, HS) and att v (NN: T, HS, T);
 * its backward dv = att^T dy (TN: T, HS, T), datt = dy v^T (NT: T, T, HS), dq = datt k
 * (NN: T, HS, T) and dk = datt^T q (TN: T, HS, T).
 *
 * Timing: one sample is the wall-clock time of a run of calls (as many as make ~2 ms, the same
 * count for every implementation) between clFinish, divided by the count, after one untimed
 * call; samples of the implementations are interleaved (order rotating), so the machine's drift
 * hits all alike; we report the median and the extremes of `BENCH_GEMM_REPEAT` samples after
 * warm-up.
 *
 * OpenBLAS is loaded at run time (dlopen "libopenblas.so.0"), so no build dependency exists.
 * OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the environment while it loads (it
 * reads them then; they are put back after), so it picks its kernels for the real CPU. Its
 * idle threads spin for 2^28 cycles after each call by default, which would steal the cores from
 * the device runs that follow; the spin is cut to 2^20 cycles (a quarter millisecond, still
 * longer than the gap between the calls of one sample) through OPENBLAS_THREAD_TIMEOUT, unless
 * the caller set it. Batched shapes call cblas_sgemm once per matrix.
 *
 * CLBlast runs with whatever `clformer tune` stored for the device (every tuned parameter applied,
 * as in training); the header says which, and the JSON's "clblast_tuning" ({"applied", "file"}, or
 * null when untuned) records it. With a tuning file, CLBlast is first timed on every shape with its
 * own default parameters, the file held back (cf_gemm_tune_hold), then the file is applied: a
 * process cannot put CLBlast back to its defaults once tuned parameters are in, so the two cannot
 * take turns, and the "default clblast" column comes from a few seconds earlier than the others.
 *
 * JSON: the value of the caller's "gemm" key, documented at the top of app/cmd_bench.c. */
#include <dlfcn.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/model.h"
#include "clformer/check.h"
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "clformer/bench.h"
#include "gemm/loop_budget.h"
#include "runtime/runtime.h"
#include "bench/bench_internal.h"

#define BENCH_GEMM_REPEAT 11  /* samples per shape and implementation unless the caller asks for more */
#define BENCH_LEAD_S 0.005    /* untimed calls before each sample, for at least this long (see sample) */
#define BENCH_GEMM_MAX_SHAPES 32

typedef cf_gemm_shape gemm_shape;

enum { IMPL_CLBLAST, IMPL_OWN, IMPL_BLAS, NIMPL };
static const char *const impl_names[NIMPL] = {"clblast", "own", "openblas"};

/* ---------- OpenBLAS through dlopen ---------- */

typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                               const float *B, int ldb, float beta, float *C, int ldc);
typedef struct blas {
  void *lib;
  cblas_sgemm_fn sgemm;
  char core[64];
  int threads;
} blas;

static void restore_env(const char *name, const char *saved) {
  if (saved) setenv(name, saved, 1);
  else unsetenv(name);
}

static int blas_open(blas *b) {
  memset(b, 0, sizeof *b);
  const char *names[] = {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_THREAD_TIMEOUT"};
  char *saved[3];
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
  }
  unsetenv(names[0]);
  unsetenv(names[1]);
  if (!saved[2]) setenv(names[2], "20", 1);
  b->lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  for (int i = 0; i < 3; i++) {
    restore_env(names[i], saved[i]);
    free(saved[i]);
  }
  if (!b->lib) return 0;
  b->sgemm = (cblas_sgemm_fn)(size_t)dlsym(b->lib, "cblas_sgemm");
  char *(*corename)(void) = (char *(*)(void))(size_t)dlsym(b->lib, "openblas_get_corename");
  int (*nthreads)(void) = (int (*)(void))(size_t)dlsym(b->lib, "openblas_get_num_threads");
  if (!b->sgemm) {
    dlclose(b->lib);
    b->lib = NULL;
    return 0;
  }
  snprintf(b->core, sizeof b->core, "%s", corename ? corename() : "unknown");
  b->threads = nthreads ? nthreads() : 0;
  return 1;
}

/* ---------- one shape's operands ---------- */

typedef struct operands {
  size_t na, nb, nc;        /* floats per batch of each */
  size_t lda, ldb, ldc;
  cl_mem A, B, C;
  float *hA, *hB, *hC;
} operands;

static void operands_free(operands *o) {
  cf_buffer_free(o->A);
  cf_buffer_free(o->B);
  cf_buffer_free(o->C);
  free(o->hA);
  free(o->hB);
  free(o->hC);
  memset(o, 0, sizeof *o);
}

static cf_status operands_make(cf_context *ctx, const gemm_shape *s, operands *o) {
  memset(o, 0, sizeof *o);
  o->lda = s->ta ? s->M : s->K;
  o->ldb = s->tb ? s->K : s->N;
  o->ldc = s->N;
  o->na = s->M * s->K;
  o->nb = s->K * s->N;
  o->nc = s->M * s->N;
  size_t n[3] = {o->na * s->batch, o->nb * s->batch, o->nc * s->batch};
  float **h[3] = {&o->hA, &o->hB, &o->hC};
  cl_mem *d[3] = {&o->A, &o->B, &o->C};
  unsigned long long x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 3; i++) {
    *h[i] = malloc(n[i] * sizeof(float));
    if (!*h[i]) { operands_free(o); return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory"); }
    for (size_t j = 0; j < n[i]; j++) {  /* small values: dW accumulates over every call */
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      (*h[i])[j] = (float)((double)(x >> 40) / (double)(1ULL << 24) - 0.5) * 0.01f;
    }
    cf_status st = cf_buffer_create(ctx, n[i] * sizeof(float), d[i]);
    if (st == CF_OK) st = cf_write(ctx, cf_at(*d[i], 0), *h[i], n[i]);
    if (st != CF_OK) { operands_free(o); return st; }
  }
  return CF_OK;
}

/* One implementation's call on one shape's operands. */
typedef struct gemm_call {
  cf_context *ctx;
  int impl;
  const gemm_shape *s;
  operands *o;
  const blas *bl;
} gemm_call;

static cf_status run_once(void *arg) {
  const gemm_call *c = arg;
  const gemm_shape *s = c->s;
  operands *o = c->o;
  if (c->impl == IMPL_BLAS) {
    for (size_t i = 0; i < s->batch; i++)
      c->bl->sgemm(101 /* CblasRowMajor */, s->ta ? 112 : 111, s->tb ? 112 : 111, (int)s->M, (int)s->N, (int)s->K,
                   1.0f, o->hA + i * o->na, (int)o->lda, o->hB + i * o->nb, (int)o->ldb, s->beta, o->hC + i * o->nc,
                   (int)o->ldc);
    return CF_OK;
  }
  cf_gemm_impl use = c->impl == IMPL_OWN ? CF_GEMM_OWN : CF_GEMM_CLBLAST;
  return cf_gemm_batched_nested_with(c->ctx, use, s->ta, s->tb, s->M, s->N, s->K, 1.0f, cf_at(o->A, 0), o->lda, o->na,
                                     0, cf_at(o->B, 0), o->ldb, o->nb, 0, s->beta, cf_at(o->C, 0), o->ldc, o->nc, 0,
                                     s->batch, 1, s->tri);
}

/* Seconds per call over a run of `calls` calls, after untimed calls of the same implementation for
 * at least BENCH_LEAD_S (and at least one). The run before may have been another implementation's:
 * its threads may still spin (OpenBLAS, for a quarter millisecond) or have gone to sleep (PoCL's
 * wake after an idle gap), or its aftermath slows the next calls for a while (after a CLBlast call
 * our next 0.5 ms call ran 15-35% slower and the third at full speed, timed call by call in one
 * process). The lead-in absorbs these the same way for every implementation. (With --vs-blas,
 * whichever implementation followed OpenBLAS in the rotation, ours two times in three, ran in its
 * spin: a one-call lead-in raised our median 3-4% there, OpenBLAS's 0-6%.) */
static cf_status sample(gemm_call *c, int calls, double *sec) {
  double lead0 = cf_now();
  do {
    CF_TRY(run_once(c));
    CF_TRY(cf_context_finish(c->ctx));
  } while (cf_now() - lead0 < BENCH_LEAD_S);
  return cf_bench_time_calls(c->ctx, run_once, c, calls, sec);
}

/* The calls in one sample: a warm-up of each implementation (builds kernels, touches memory), then
 * as many calls as make ~2 ms of the slowest. */
static cf_status calls_per_sample(gemm_call *c, const int *impls, int n, int *calls) {
  double slow = 0;
  for (int j = 0; j < n; j++) {
    double t = 0;
    c->impl = impls[j];
    CF_TRY(sample(c, 1, &t));
    CF_TRY(sample(c, 2, &t));
    if (t > slow) slow = t;
  }
  *calls = cf_bench_calls_per_sample(slow, 1e-7, 200);
  return CF_OK;
}

/* `repeat` samples of each of impls[0..n-1] on c's shape, taking turns (the order rotating), in
 * GFLOP/s: v[j * repeat + r] is impls[j]'s sample r. */
static cf_status interleaved_samples(gemm_call *c, const int *impls, int n, int repeat, int calls, double *v) {
  const gemm_shape *s = c->s;
  double flops = cf_gemm_shape_flops(s);
  for (int r = 0; r < repeat; r++)
    for (int i = 0; i < n; i++) {
      int j = (i + r) % n;
      double t = 0;
      c->impl = impls[j];
      CF_TRY(sample(c, calls, &t));
      v[j * repeat + r] = flops / t * 1e-9;
    }
  return CF_OK;
}

/* Times the implementations impls[0..n-1] on one shape: a warm-up (builds kernels, touches memory),
 * then `repeat` samples of each, taking turns, each a run of calls sized to ~2 ms of the slowest.
 * stats[j] = GFLOP/s of impls[j]. */
static cf_status time_shape(cf_context *ctx, const gemm_shape *s, const blas *bl, const int *impls, int n, int repeat,
                            cf_bench_stats *stats) {
  operands o;
  CF_TRY(operands_make(ctx, s, &o));
  gemm_call c = {ctx, impls[0], s, &o, bl};
  int calls = 0;
  cf_status st = calls_per_sample(&c, impls, n, &calls);
  double *v = st == CF_OK ? malloc(sizeof(double) * (size_t)n * (size_t)repeat) : NULL;
  if (st == CF_OK && !v) st = CF_FAIL(CF_ERR_NO_MEMORY, "bench gemm: %d samples", repeat);
  if (st == CF_OK) st = interleaved_samples(&c, impls, n, repeat, calls, v);
  operands_free(&o);
  for (int j = 0; j < n && st == CF_OK; j++) stats[j] = cf_bench_stats_of(v + j * repeat, repeat);
  free(v);
  return st;
}

/* ---------- the device's FMA peak ---------- */

/* Rounds of an item's loop, doubled until a run lasts ~50 ms, but never past half the device's loop
 * budget (gemm/loop_budget.h): llvmpipe would stop the loop early and the peak would read high. */
cf_status cf_bench_fma_peak(cf_context *ctx, double *gflops) {
  const cf_device_info *d = cf_context_device(ctx);
  size_t items = (size_t)(d->compute_units ? d->compute_units : 1) * 8, local = 1, budget = 0;
  CF_TRY(cf_gemm_loop_budget(ctx, &budget));
  unsigned iters = 1u << 14, most = budget ? (unsigned)(budget / 2) : 1u << 30;
  if (iters > most) iters = most;
  cl_mem out;
  CF_TRY(cf_buffer_create(ctx, items * sizeof(float), &out));
  cf_status st = CF_OK;
  double v[7];
  int nv = 0;
  for (int r = 0; r < 9 && st == CF_OK; r++) {
    cf_launch L;
    cf_launch_begin(&L, ctx, "gemm", "gemm_fma_peak");
    cf_arg_mem(&L, cf_at(out, 0));
    cf_arg_uint(&L, iters);
    cf_arg_float(&L, 0.999f);
    double t0 = cf_now();
    st = cf_launch_run(&L, 1, &items, &local);
    if (st == CF_OK) st = cf_context_finish(ctx);
    double t = cf_now() - t0;
    if (st != CF_OK) break;
    if (r < 2) {  /* warm-up, then size a run to ~50 ms */
      while (t < 0.05 && 2 * iters <= most) { iters *= 2; t *= 2; }
      continue;
    }
    double g = (double)items * iters * 16 * 16 * 2 / t * 1e-9;
    v[nv++] = g;
  }
  cf_buffer_free(out);
  *gflops = nv ? cf_median(v, nv) : 0;
  return st;
}

/* One run of `bench gemm`: what it found, then what the shapes measured, for the summary. */
typedef struct gemm_bench {
  cf_context *ctx;
  FILE *out;
  int repeat, nsh, nimpl;
  int have_blas, dflt, tuned;  /* OpenBLAS loaded; CLBlast's defaults timed first; tuned parameters in force */
  gemm_shape sh[BENCH_GEMM_MAX_SHAPES];
  blas bl;
  double peak;                                   /* the FMA peak, GFLOP/s */
  cf_bench_stats dstats[BENCH_GEMM_MAX_SHAPES];  /* CLBlast with its defaults, when a tuning file was held */
  json_t *g;  /* the report's "gemm" (borrowed from it), filled as the shapes are timed; NULL: no report */
  /* per shape: each implementation's median GFLOP/s, own/clblast, own/openblas, CLBlast's default median and
   * tuned/default, and the most own/clblast could be (a kernel at the FMA peak against this run's clblast) */
  double med[NIMPL][BENCH_GEMM_MAX_SHAPES], ratio_clb[BENCH_GEMM_MAX_SHAPES], ratio_blas[BENCH_GEMM_MAX_SHAPES];
  double med_dflt[BENCH_GEMM_MAX_SHAPES], ratio_tuning[BENCH_GEMM_MAX_SHAPES], ceiling_clb[BENCH_GEMM_MAX_SHAPES];
  double step_ms[NIMPL], step_gflop, dflt_ms;  /* one training step's products: each shape times its calls */
} gemm_bench;

/* Medians over the shapes, NaN for what was not timed (cf_median sorts: they come after every
 * per-shape use). */
typedef struct gemm_medians {
  double impl[NIMPL], own_vs_clb, own_vs_blas, ceiling, dflt, tuned_vs_dflt;
} gemm_medians;

/* {"median", "min", "max"} GFLOP/s, or null for an implementation not timed */
static json_t *stats_json(const cf_bench_stats *v, int ok) {
  return ok ? cf_bench_stats_json(*v, 1.0, "%.3f") : json_null();
}

/* {"k0": v0, "k1": v1, ...} at 4 decimals, null where NaN (an implementation not timed) */
static json_t *nums_json(const char *const *keys, const double *v, size_t n) {
  json_t *o = json_object();
  for (size_t i = 0; o && i < n; i++)
    if (json_object_set_new(o, keys[i], cf_json_num(v[i], "%.4f"))) {
      json_decref(o);
      o = NULL;
    }
  return o;
}

/* The report's "gemm" object up to its (still empty) shapes; what it says of OpenBLAS and tuning. */
static json_t *gemm_json(const gemm_bench *b, const char *tuning, const char *tpath) {
  json_t *ob = b->have_blas ? json_pack("{s:s, s:i}", "core", b->bl.core, "threads", b->bl.threads) : json_null();
  json_t *tu = b->tuned ? json_pack("{s:o, s:o}", "applied", cf_json_str(tuning), "file", cf_json_str(tpath))
                        : json_null();
  return json_pack("{s:o, s:o, s:o, s:o, s:i, s:[]}", "device", cf_json_str(cf_context_device(b->ctx)->name),
                   "peak_gflops", cf_json_num(b->peak, "%.4f"), "openblas", ob, "clblast_tuning", tu, "repeat",
                   b->repeat, "shapes");
}

/* One row of "shapes": the shape si, each implementation's GFLOP/s, and the ratios. */
static json_t *shape_json(const gemm_bench *b, int si, double flops, const cf_bench_stats *stats) {
  const gemm_shape *s = &b->sh[si];
  char op[3] = {s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', 0};
  return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:I, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "name", s->name,
                   "op", op, "M", (json_int_t)s->M, "N", (json_int_t)s->N, "K", (json_int_t)s->K, "batch",
                   (json_int_t)s->batch, "tri", cf_gemm_tri_name(s->tri), "flops", (json_int_t)llround(flops), "per_step", s->per_step, impl_names[0],
                   stats_json(&stats[0], b->nimpl > 0), impl_names[1], stats_json(&stats[1], b->nimpl > 1),
                   impl_names[2], stats_json(&stats[2], b->nimpl > 2), "clblast_default",
                   stats_json(&b->dstats[si], b->dflt), "own_vs_clblast", cf_json_num(b->ratio_clb[si], "%.4f"),
                   "own_vs_openblas", cf_json_num(b->ratio_blas[si], "%.4f"), "peak_vs_clblast",
                   cf_json_num(b->ceiling_clb[si], "%.4f"));
}

/* The report's "median" and "per_step" (absent implementations' entries are NaN here, null in the JSON). */
static cf_status summary_json(const gemm_bench *b, const gemm_medians *m) {
  const double *ms = b->step_ms;
  const char *mk[] = {impl_names[0], impl_names[1], impl_names[2], "clblast_default", "own_vs_clblast",
                      "own_vs_openblas", "peak_vs_clblast", "tuned_vs_default"};
  double mv[] = {m->impl[0], m->impl[1], m->impl[2], m->dflt, m->own_vs_clb, m->own_vs_blas, m->ceiling,
                 m->tuned_vs_dflt};
  const char *sk[] = {"gflop", "clblast_ms", "own_ms", "openblas_ms", "clblast_default_ms", "own_vs_clblast",
                      "own_vs_openblas"};
  double sv[] = {b->step_gflop, ms[IMPL_CLBLAST], ms[IMPL_OWN], b->have_blas ? ms[IMPL_BLAS] : NAN,
                 b->dflt ? b->dflt_ms : NAN, ms[IMPL_CLBLAST] / ms[IMPL_OWN],
                 b->have_blas ? ms[IMPL_BLAS] / ms[IMPL_OWN] : NAN};
  CF_TRY(cf_json_set(b->g, "median", nums_json(mk, mv, sizeof mv / sizeof *mv)));
  return cf_json_set(b->g, "per_step", nums_json(sk, sv, sizeof sv / sizeof *sv));
}

/* ---------- the report ---------- */

/* The header's first lines: the device and its FMA peak, OpenBLAS. */
static void print_setup(const gemm_bench *b, int vs_blas) {
  const cf_device_info *d = cf_context_device(b->ctx);
  fprintf(b->out, "device: %s (%s)\nfp32 FMA peak (a kernel of register-only FMAs on float16 vectors, 16 x fp32): "
          "%.1f GFLOP/s\n", d->name, d->platform_name, b->peak);
  if (vs_blas && !b->have_blas) fprintf(b->out, "OpenBLAS not found (dlopen libopenblas.so.0 with cblas_sgemm)\n");
  if (b->have_blas) fprintf(b->out, "OpenBLAS: core %s, %d threads (on the host)\n", b->bl.core, b->bl.threads);
}

/* What CLBlast runs with: the tuned parameters and their file, or why there are none. tpath gets
 * the tuning file's path, "(caching off)" when there is none. */
static void print_tuning(const gemm_bench *b, const char *tuning, char *tpath, size_t n) {
  FILE *out = b->out;
  if (!cf_gemm_tune_path(b->ctx, tpath, n)) snprintf(tpath, n, "(caching off)");
  if (b->tuned) {
    fprintf(out, "CLBlast: tuned, from %s: %s\n", tpath, tuning);
    return;
  }
  const char *off = getenv("CLFORMER_TUNE");
  if (off && (!strcmp(off, "off") || !strcmp(off, "0")))
    fprintf(out, "CLBlast: untuned defaults (CLFORMER_TUNE=%s: the tuning file is ignored)\n", off);
  else if (!cf_gemm_tune_path(b->ctx, tpath, n))
    fprintf(out, "CLBlast: untuned defaults (caching is off, so there is no tuning file)\n");
  else fprintf(out, "CLBlast: untuned defaults (no tuned parameters in %s; run clformer tune)\n", tpath);
}

/* The timing method, then the table's column heads. */
static void print_table_head(const gemm_bench *b) {
  FILE *out = b->out;
  fprintf(out, "timing: wall-clock around runs of calls between clFinish, each after at least %.0f ms of untimed calls; "
          "GFLOP/s median [min-max] of %d samples\n\n", BENCH_LEAD_S * 1e3, b->repeat);
  fprintf(out, "%-14s %-2s %5s %5s %5s %4s", "shape", "op", "M", "N", "K", "bat");
  if (b->dflt) fprintf(out, "  %-22s", "default clblast GFLOP/s");
  fprintf(out, "  %-22s %-22s %7s", b->tuned ? "tuned clblast GFLOP/s" : "clblast GFLOP/s", "own GFLOP/s", "own/clb");
  if (b->have_blas) fprintf(out, "  %-22s %7s", "openblas GFLOP/s", "own/obl");
  fprintf(out, "\n");
}

/* "median [min-max]" GFLOP/s, one decimal */
static const char *stats_cell(const cf_bench_stats *v, char *buf, size_t n) {
  snprintf(buf, n, "%.1f [%.1f-%.1f]", v->median, v->min, v->max);
  return buf;
}

/* Shape si's row of the table. */
static void print_shape(const gemm_bench *b, int si, const cf_bench_stats *stats) {
  const gemm_shape *s = &b->sh[si];
  FILE *out = b->out;
  char op[3] = {s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', 0}, cell[64];
  fprintf(out, "%-14s %-2s %5zu %5zu %5zu %4zu", s->name, op, s->M, s->N, s->K, s->batch);
  if (b->dflt) fprintf(out, "  %-22s", stats_cell(&b->dstats[si], cell, sizeof cell));
  for (int impl = 0; impl < b->nimpl; impl++) {
    fprintf(out, "  %-22s", stats_cell(&stats[impl], cell, sizeof cell));
    if (impl == IMPL_OWN) fprintf(out, " %6.2fx", b->ratio_clb[si]);
  }
  if (b->have_blas) fprintf(out, " %6.2fx", b->ratio_blas[si]);
  fprintf(out, "\n");
  fflush(out);
}

/* The lines under the table: medians over the shapes, the ceiling, one step's products, what
 * tuning gave. */
static void print_summary(const gemm_bench *b, const gemm_medians *m) {
  FILE *out = b->out;
  const char *clb = b->tuned ? "tuned clblast" : "untuned clblast";
  const double *ms = b->step_ms;
  char words[48];
  fprintf(out, "\nmedian over %d shapes: %s %.1f, own %.1f GFLOP/s (%.0f%% of peak; %.2fx); median of the shapes' "
          "own/%s: %.2fx", b->nsh, clb, m->impl[IMPL_CLBLAST], m->impl[IMPL_OWN], 100 * m->impl[IMPL_OWN] / b->peak,
          m->impl[IMPL_OWN] / m->impl[IMPL_CLBLAST], clb, m->own_vs_clb);
  if (b->have_blas)
    fprintf(out, "; openblas %.1f GFLOP/s, median of own/openblas: %.2fx", m->impl[IMPL_BLAS], m->own_vs_blas);
  fprintf(out, "\nupper bound: with every shape at the FMA peak, the median of own/%s would be %.2fx", clb,
          m->ceiling);
  fprintf(out, "\none training step's products (%.3g GFLOP: each shape's median time times its calls per step): "
          "%s %.3g ms, own %.3g ms (own %s)", b->step_gflop, clb, ms[IMPL_CLBLAST], ms[IMPL_OWN],
          cf_bench_speed_words(ms[IMPL_CLBLAST] / ms[IMPL_OWN], words, sizeof words));
  if (b->have_blas)
    fprintf(out, "; openblas %.3g ms (own %s)", ms[IMPL_BLAS],
            cf_bench_speed_words(ms[IMPL_BLAS] / ms[IMPL_OWN], words, sizeof words));
  if (b->dflt)
    fprintf(out, "\nwhat tuning gave CLBlast: default clblast %.1f GFLOP/s median over the shapes, median of the "
            "shapes' tuned/default %.2fx; one step's products %.1f ms with its defaults", m->dflt, m->tuned_vs_dflt,
            b->dflt_ms);
  fprintf(out, "\n");
}

/* ---------- the shapes ---------- */

/* Adds shape si's medians to the run: the ratios, the ceiling, one step's products. */
static void add_shape(gemm_bench *b, int si, double flops, const cf_bench_stats *stats) {
  const gemm_shape *s = &b->sh[si];
  for (int impl = 0; impl < b->nimpl; impl++) b->med[impl][si] = stats[impl].median;
  if (b->dflt) {
    b->med_dflt[si] = b->dstats[si].median;
    b->ratio_tuning[si] = b->med[IMPL_CLBLAST][si] / b->med_dflt[si];
    b->dflt_ms += s->per_step * flops / b->med_dflt[si] * 1e-6;
  }
  b->ratio_clb[si] = b->med[IMPL_OWN][si] / b->med[IMPL_CLBLAST][si];
  b->ceiling_clb[si] = b->peak / b->med[IMPL_CLBLAST][si];
  b->step_gflop += s->per_step * flops * 1e-9;
  for (int impl = 0; impl < b->nimpl; impl++) b->step_ms[impl] += s->per_step * flops / b->med[impl][si] * 1e-6;
  b->ratio_blas[si] = b->have_blas ? b->med[IMPL_OWN][si] / b->med[IMPL_BLAS][si] : NAN;
}

/* Times shape si with every implementation, then adds it to the run, the table and the JSON. */
static cf_status bench_shape(gemm_bench *b, int si) {
  const gemm_shape *s = &b->sh[si];
  double flops = cf_gemm_shape_flops(s);
  int impls[NIMPL] = {IMPL_CLBLAST, IMPL_OWN, IMPL_BLAS};
  cf_bench_stats stats[NIMPL];
  CF_TRY(time_shape(b->ctx, s, &b->bl, impls, b->nimpl, b->repeat, stats));
  add_shape(b, si, flops, stats);
  print_shape(b, si, stats);
  if (!b->g) return CF_OK;
  return cf_bench_json_append(json_object_get(b->g, "shapes"), shape_json(b, si, flops, stats));
}

/* After the shapes: the medians over them, printed and into the JSON. */
static cf_status summarize(gemm_bench *b) {
  gemm_medians m;
  int n = b->nsh;
  for (int impl = 0; impl < NIMPL; impl++) m.impl[impl] = impl < b->nimpl ? cf_median(b->med[impl], n) : NAN;
  m.own_vs_clb = cf_median(b->ratio_clb, n);
  m.own_vs_blas = b->have_blas ? cf_median(b->ratio_blas, n) : NAN;
  m.ceiling = cf_median(b->ceiling_clb, n);
  m.dflt = b->dflt ? cf_median(b->med_dflt, n) : NAN;
  m.tuned_vs_dflt = b->dflt ? cf_median(b->ratio_tuning, n) : NAN;
  print_summary(b, &m);
  return b->g ? summary_json(b, &m) : CF_OK;
}

cf_status cf_bench_gemm(cf_context *ctx, const cf_config *cfg, int vs_blas, int repeat, FILE *out, json_t *report) {
  gemm_bench b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx;
  b.out = out;
  b.repeat = repeat > 0 ? repeat : BENCH_GEMM_REPEAT;
  b.nsh = cf_model_gemm_shapes(cfg, b.sh);
  b.have_blas = vs_blas && blas_open(&b.bl);
  b.nimpl = b.have_blas ? 3 : 2;
  CF_TRY(cf_bench_fma_peak(ctx, &b.peak));
  /* CLBlast's defaults are timed first, while the tuning file is held back: once its parameters are
   * applied CLBlast cannot be put back to its defaults in this process */
  int dflt = cf_gemm_tune_hold(ctx);
  print_setup(&b, vs_blas);
  if (dflt) {
    fprintf(out, "CLBlast with its default parameters first (the tuned ones are applied after): ");
    fflush(out);
    int clb = IMPL_CLBLAST;
    for (int si = 0; si < b.nsh; si++) {
      cf_status st = time_shape(ctx, &b.sh[si], &b.bl, &clb, 1, b.repeat, &b.dstats[si]);
      if (st != CF_OK) {
        fprintf(out, "\n");
        cf_gemm_tune_reload(ctx);
        return st;
      }
      fprintf(out, ".");
      fflush(out);
    }
    fprintf(out, " done\n");
    fflush(out);
    cf_gemm_tune_reload(ctx);
  }
  char tuning[512], tpath[4200] = "";
  int tuned = cf_gemm_tune_summary(ctx, tuning, sizeof tuning);
  if (!tuned) dflt = 0;  /* a file CLBlast took nothing from: both columns would be its defaults */
  b.dflt = dflt;
  b.tuned = tuned;
  print_tuning(&b, tuning, tpath, sizeof tpath);
  print_table_head(&b);
  if (report) {
    CF_TRY(cf_json_set(report, "gemm", gemm_json(&b, tuning, tpath)));
    b.g = json_object_get(report, "gemm");
  }
  cf_status st = CF_OK;
  for (int si = 0; si < b.nsh && st == CF_OK; si++) st = bench_shape(&b, si);
  if (st == CF_OK) st = summarize(&b);
  /* OpenBLAS stays loaded: unloading a library with live worker threads is not worth the risk */
  return st;
}
