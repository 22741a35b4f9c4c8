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
 * JSON: the value of the caller's "gemm" key, documented at the top of src/cmd_bench.c. */
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
#include "runtime/runtime.h"

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

static cf_status run_once(cf_context *ctx, int impl, const gemm_shape *s, operands *o, const blas *bl) {
  if (impl == IMPL_BLAS) {
    for (size_t i = 0; i < s->batch; i++)
      bl->sgemm(101 /* CblasRowMajor */, s->ta ? 112 : 111, s->tb ? 112 : 111, (int)s->M, (int)s->N, (int)s->K, 1.0f,
                o->hA + i * o->na, (int)o->lda, o->hB + i * o->nb, (int)o->ldb, s->beta, o->hC + i * o->nc,
                (int)o->ldc);
    return CF_OK;
  }
  cf_gemm_impl use = impl == IMPL_OWN ? CF_GEMM_OWN : CF_GEMM_CLBLAST;
  return cf_gemm_batched_with(ctx, use, s->ta, s->tb, s->M, s->N, s->K, 1.0f, cf_at(o->A, 0), o->lda, o->na,
                              cf_at(o->B, 0), o->ldb, o->nb, s->beta, cf_at(o->C, 0), o->ldc, o->nc, s->batch);
}

/* Seconds per call over a run of `calls` calls, after untimed calls of the same implementation for
 * at least BENCH_LEAD_S (and at least one). The run before may have been another implementation's:
 * its threads may still spin (OpenBLAS, for a quarter millisecond) or have gone to sleep (PoCL's
 * wake after an idle gap), or its aftermath slows the next calls for a while (after a CLBlast call
 * our next 0.5 ms call ran 15-35% slower and the third at full speed, timed call by call in one
 * process). The lead-in absorbs these the same way for every implementation. (With --vs-blas,
 * whichever implementation followed OpenBLAS in the rotation, ours two times in three, ran in its
 * spin: a one-call lead-in raised our median 3-4% there, OpenBLAS's 0-6%.) */
static cf_status sample(cf_context *ctx, int impl, const gemm_shape *s, operands *o, const blas *bl, int calls,
                        double *sec) {
  double lead0 = cf_now();
  do {
    CF_TRY(run_once(ctx, impl, s, o, bl));
    CF_TRY(cf_context_finish(ctx));
  } while (cf_now() - lead0 < BENCH_LEAD_S);
  double t0 = cf_now();
  for (int i = 0; i < calls; i++) CF_TRY(run_once(ctx, impl, s, o, bl));
  CF_TRY(cf_context_finish(ctx));
  *sec = (cf_now() - t0) / calls;
  return CF_OK;
}

/* Times the implementations impls[0..n-1] on one shape: a warm-up (builds kernels, touches memory),
 * then `repeat` samples of each, taking turns, each a run of calls sized to ~2 ms of the slowest.
 * stats[j] = GFLOP/s {median, min, max} of impls[j]. */
static cf_status time_shape(cf_context *ctx, const gemm_shape *s, const blas *bl, const int *impls, int n, int repeat,
                            double stats[][3]) {
  operands o;
  CF_TRY(operands_make(ctx, s, &o));
  double flops = 2.0 * s->M * s->N * s->K * s->batch, slow = 0;
  cf_status st = CF_OK;
  for (int j = 0; j < n && st == CF_OK; j++) {
    double t = 0;
    st = sample(ctx, impls[j], s, &o, bl, 1, &t);
    if (st == CF_OK) st = sample(ctx, impls[j], s, &o, bl, 2, &t);
    if (t > slow) slow = t;
  }
  int calls = slow >= 2e-3 ? 1 : (int)ceil(2e-3 / (slow > 1e-7 ? slow : 1e-7));
  if (calls > 200) calls = 200;
  double *v = st == CF_OK ? malloc(sizeof(double) * (size_t)n * (size_t)repeat) : NULL;  /* v[j * repeat + r] */
  if (st == CF_OK && !v) st = CF_FAIL(CF_ERR_NO_MEMORY, "bench gemm: %d samples", repeat);
  for (int r = 0; r < repeat && st == CF_OK; r++)
    for (int i = 0; i < n && st == CF_OK; i++) {
      int j = (i + r) % n;
      double t = 0;
      st = sample(ctx, impls[j], s, &o, bl, calls, &t);
      v[j * repeat + r] = flops / t * 1e-9;
    }
  operands_free(&o);
  for (int j = 0; j < n && st == CF_OK; j++) {
    double *vj = v + j * repeat;
    stats[j][0] = cf_median(vj, repeat);  /* sorts vj */
    stats[j][1] = vj[0];
    stats[j][2] = vj[repeat - 1];
  }
  free(v);
  return st;
}

/* ---------- the device's FMA peak ---------- */

static cf_status fma_peak(cf_context *ctx, double *gflops) {
  const cf_device_info *d = cf_context_device(ctx);
  size_t items = (size_t)(d->compute_units ? d->compute_units : 1) * 8, local = 1;
  unsigned iters = 1u << 14;
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
      while (t < 0.05 && iters < (1u << 30)) { iters *= 2; t *= 2; }
      continue;
    }
    double g = (double)items * iters * 16 * 16 * 2 / t * 1e-9;
    v[nv++] = g;
  }
  cf_buffer_free(out);
  *gflops = nv ? cf_median(v, nv) : 0;
  return st;
}

/* {"median", "min", "max"} GFLOP/s, or null for an implementation not timed */
static json_t *stats_json(const double *v, int ok) {
  if (!ok) return json_null();
  return json_pack("{s:o, s:o, s:o}", "median", cf_json_num(v[0], "%.3f"), "min", cf_json_num(v[1], "%.3f"), "max",
                   cf_json_num(v[2], "%.3f"));
}

/* "2.10x faster" for a time ratio (theirs / ours) of 2.1, "4.50x slower" for 0.222. */
static const char *speed_words(double ratio, char *buf, size_t n) {
  if (ratio >= 1.0) snprintf(buf, n, "%.2fx faster", ratio);
  else snprintf(buf, n, "%.2fx slower", 1.0 / ratio);
  return buf;
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
static json_t *gemm_json(const cf_device_info *d, double peak, const blas *bl, int have_blas, int tuned,
                         const char *tuning, const char *tpath, int repeat) {
  json_t *ob = have_blas ? json_pack("{s:s, s:i}", "core", bl->core, "threads", bl->threads) : json_null();
  json_t *tu = tuned ? json_pack("{s:o, s:o}", "applied", cf_json_str(tuning), "file", cf_json_str(tpath)) : json_null();
  return json_pack("{s:o, s:o, s:o, s:o, s:i, s:[]}", "device", cf_json_str(d->name), "peak_gflops",
                   cf_json_num(peak, "%.4f"), "openblas", ob, "clblast_tuning", tu, "repeat", repeat, "shapes");
}

/* One row of "shapes": the shape, each implementation's GFLOP/s, and the ratios. */
static json_t *shape_json(const gemm_shape *s, double flops, double stats[NIMPL][3], int nimpl, const double *dstats,
                          int dflt, double own_vs_clblast, double own_vs_openblas, double peak_vs_clblast) {
  char op[3] = {s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', 0};
  return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "name", s->name, "op",
                   op, "M", (json_int_t)s->M, "N", (json_int_t)s->N, "K", (json_int_t)s->K, "batch",
                   (json_int_t)s->batch, "flops", (json_int_t)llround(flops), "per_step", s->per_step, impl_names[0],
                   stats_json(stats[0], nimpl > 0), impl_names[1], stats_json(stats[1], nimpl > 1), impl_names[2],
                   stats_json(stats[2], nimpl > 2), "clblast_default", stats_json(dstats, dflt), "own_vs_clblast",
                   cf_json_num(own_vs_clblast, "%.4f"), "own_vs_openblas", cf_json_num(own_vs_openblas, "%.4f"),
                   "peak_vs_clblast", cf_json_num(peak_vs_clblast, "%.4f"));
}

cf_status cf_bench_gemm(cf_context *ctx, const cf_config *cfg, int vs_blas, int repeat, FILE *out, json_t *report) {
  if (repeat <= 0) repeat = BENCH_GEMM_REPEAT;
  const cf_device_info *d = cf_context_device(ctx);
  gemm_shape sh[BENCH_GEMM_MAX_SHAPES];
  int nsh = cf_model_gemm_shapes(cfg, sh);
  blas bl = {0};
  int have_blas = vs_blas && blas_open(&bl);
  double peak = 0;
  CF_TRY(fma_peak(ctx, &peak));
  /* CLBlast's defaults are timed first, while the tuning file is held back: once its parameters are
   * applied CLBlast cannot be put back to its defaults in this process */
  int dflt = cf_gemm_tune_hold(ctx);
  fprintf(out, "device: %s (%s)\nfp32 FMA peak (a kernel of register-only FMAs on float16 vectors, 16 x fp32): "
          "%.1f GFLOP/s\n", d->name,
          d->platform_name, peak);
  if (vs_blas && !have_blas) fprintf(out, "OpenBLAS not found (dlopen libopenblas.so.0 with cblas_sgemm)\n");
  if (have_blas) fprintf(out, "OpenBLAS: core %s, %d threads (on the host)\n", bl.core, bl.threads);
  double dstats[BENCH_GEMM_MAX_SHAPES][3];  /* CLBlast with its defaults, when a tuning file was held */
  if (dflt) {
    fprintf(out, "CLBlast with its default parameters first (the tuned ones are applied after): ");
    fflush(out);
    int clb = IMPL_CLBLAST;
    for (int si = 0; si < nsh; si++) {
      cf_status st = time_shape(ctx, &sh[si], &bl, &clb, 1, repeat, &dstats[si]);
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
  if (!cf_gemm_tune_path(ctx, tpath, sizeof tpath)) snprintf(tpath, sizeof tpath, "(caching off)");
  if (tuned) fprintf(out, "CLBlast: tuned, from %s: %s\n", tpath, tuning);
  else {
    const char *off = getenv("CLFORMER_TUNE");
    if (off && (!strcmp(off, "off") || !strcmp(off, "0")))
      fprintf(out, "CLBlast: untuned defaults (CLFORMER_TUNE=%s: the tuning file is ignored)\n", off);
    else if (!cf_gemm_tune_path(ctx, tpath, sizeof tpath))
      fprintf(out, "CLBlast: untuned defaults (caching is off, so there is no tuning file)\n");
    else fprintf(out, "CLBlast: untuned defaults (no tuned parameters in %s; run clformer tune)\n", tpath);
  }
  fprintf(out, "timing: wall-clock around runs of calls between clFinish, each after at least %.0f ms of untimed calls; "
          "GFLOP/s median [min-max] of %d samples\n\n", BENCH_LEAD_S * 1e3, repeat);
  fprintf(out, "%-14s %-2s %5s %5s %5s %4s", "shape", "op", "M", "N", "K", "bat");
  if (dflt) fprintf(out, "  %-22s", "default clblast GFLOP/s");
  fprintf(out, "  %-22s %-22s %7s", tuned ? "tuned clblast GFLOP/s" : "clblast GFLOP/s", "own GFLOP/s", "own/clb");
  if (have_blas) fprintf(out, "  %-22s %7s", "openblas GFLOP/s", "own/obl");
  fprintf(out, "\n");
  json_t *g = NULL;  /* the report's "gemm" (borrowed from it), filled as the shapes are timed */
  if (report) {
    CF_TRY(cf_json_set(report, "gemm", gemm_json(d, peak, &bl, have_blas, tuned, tuning, tpath, repeat)));
    g = json_object_get(report, "gemm");
  }

  double med[NIMPL][BENCH_GEMM_MAX_SHAPES], ratio_clb[BENCH_GEMM_MAX_SHAPES], ratio_blas[BENCH_GEMM_MAX_SHAPES];
  double med_dflt[BENCH_GEMM_MAX_SHAPES], ratio_tuning[BENCH_GEMM_MAX_SHAPES], dflt_ms = 0;
  /* the most own/clblast could be at a shape: a kernel at the FMA peak against this run's clblast */
  double ceiling_clb[BENCH_GEMM_MAX_SHAPES];
  double step_ms[NIMPL] = {0}, step_gflop = 0;  /* one training step's products: each shape times its calls */
  cf_status st = CF_OK;
  for (int si = 0; si < nsh && st == CF_OK; si++) {
    const gemm_shape *s = &sh[si];
    double flops = 2.0 * s->M * s->N * s->K * s->batch, stats[NIMPL][3];
    int nimpl = have_blas ? 3 : 2, impls[NIMPL] = {IMPL_CLBLAST, IMPL_OWN, IMPL_BLAS};
    st = time_shape(ctx, s, &bl, impls, nimpl, repeat, stats);
    if (st != CF_OK) break;
    for (int impl = 0; impl < nimpl; impl++) med[impl][si] = stats[impl][0];
    if (dflt) {
      med_dflt[si] = dstats[si][0];
      ratio_tuning[si] = med[IMPL_CLBLAST][si] / med_dflt[si];
      dflt_ms += s->per_step * flops / med_dflt[si] * 1e-6;
    }
    ratio_clb[si] = med[IMPL_OWN][si] / med[IMPL_CLBLAST][si];
    ceiling_clb[si] = peak / med[IMPL_CLBLAST][si];
    step_gflop += s->per_step * flops * 1e-9;
    for (int impl = 0; impl < nimpl; impl++) step_ms[impl] += s->per_step * flops / med[impl][si] * 1e-6;
    ratio_blas[si] = have_blas ? med[IMPL_OWN][si] / med[IMPL_BLAS][si] : NAN;
    char op[3] = {s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', 0};
    fprintf(out, "%-14s %-2s %5zu %5zu %5zu %4zu", s->name, op, s->M, s->N, s->K, s->batch);
    if (dflt) {
      char cell[64];
      snprintf(cell, sizeof cell, "%.1f [%.1f-%.1f]", dstats[si][0], dstats[si][1], dstats[si][2]);
      fprintf(out, "  %-22s", cell);
    }
    for (int impl = 0; impl < nimpl; impl++) {
      char cell[64];
      snprintf(cell, sizeof cell, "%.1f [%.1f-%.1f]", stats[impl][0], stats[impl][1], stats[impl][2]);
      fprintf(out, "  %-22s", cell);
      if (impl == IMPL_OWN) fprintf(out, " %6.2fx", ratio_clb[si]);
    }
    if (have_blas) fprintf(out, " %6.2fx", ratio_blas[si]);
    fprintf(out, "\n");
    fflush(out);
    if (g && json_array_append_new(json_object_get(g, "shapes"), shape_json(s, flops, stats, nimpl, dstats[si], dflt,
                                                                             ratio_clb[si], ratio_blas[si],
                                                                             ceiling_clb[si])))
      st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the JSON report");
  }
  if (st == CF_OK) {
    double m[NIMPL], mr_clb = cf_median(ratio_clb, nsh), mr_blas = have_blas ? cf_median(ratio_blas, nsh) : NAN;
    double m_ceiling = cf_median(ceiling_clb, nsh);
    for (int impl = 0; impl < NIMPL; impl++) m[impl] = impl < (have_blas ? 3 : 2) ? cf_median(med[impl], nsh) : NAN;
    const char *clb = tuned ? "tuned clblast" : "untuned clblast";
    char words[48];
    fprintf(out, "\nmedian over %d shapes: %s %.1f, own %.1f GFLOP/s (%.0f%% of peak; %.2fx); median of the shapes' "
            "own/%s: %.2fx", nsh, clb, m[IMPL_CLBLAST], m[IMPL_OWN], 100 * m[IMPL_OWN] / peak,
            m[IMPL_OWN] / m[IMPL_CLBLAST], clb, mr_clb);
    if (have_blas) fprintf(out, "; openblas %.1f GFLOP/s, median of own/openblas: %.2fx", m[IMPL_BLAS], mr_blas);
    fprintf(out, "\nupper bound: with every shape at the FMA peak, the median of own/%s would be %.2fx", clb,
            m_ceiling);
    fprintf(out, "\none training step's products (%.3g GFLOP: each shape's median time times its calls per step): "
            "%s %.3g ms, own %.3g ms (own %s)", step_gflop, clb, step_ms[IMPL_CLBLAST], step_ms[IMPL_OWN],
            speed_words(step_ms[IMPL_CLBLAST] / step_ms[IMPL_OWN], words, sizeof words));
    if (have_blas)
      fprintf(out, "; openblas %.3g ms (own %s)", step_ms[IMPL_BLAS],
              speed_words(step_ms[IMPL_BLAS] / step_ms[IMPL_OWN], words, sizeof words));
    double m_dflt = NAN, mr_tuning = NAN;
    if (dflt) {  /* (cf_median sorts: the medians over shapes come after every per-shape use) */
      mr_tuning = cf_median(ratio_tuning, nsh);
      m_dflt = cf_median(med_dflt, nsh);
      fprintf(out, "\nwhat tuning gave CLBlast: default clblast %.1f GFLOP/s median over the shapes, median of the "
              "shapes' tuned/default %.2fx; one step's products %.1f ms with its defaults", m_dflt, mr_tuning, dflt_ms);
    }
    fprintf(out, "\n");
    if (g) {  /* absent implementations' entries are NaN here, null in the JSON */
      const char *mk[] = {impl_names[0], impl_names[1], impl_names[2], "clblast_default", "own_vs_clblast",
                          "own_vs_openblas", "peak_vs_clblast", "tuned_vs_default"};
      double mv[] = {m[0], m[1], m[2], m_dflt, mr_clb, mr_blas, m_ceiling, mr_tuning};
      const char *sk[] = {"gflop", "clblast_ms", "own_ms", "openblas_ms", "clblast_default_ms", "own_vs_clblast",
                          "own_vs_openblas"};
      double sv[] = {step_gflop, step_ms[IMPL_CLBLAST], step_ms[IMPL_OWN], have_blas ? step_ms[IMPL_BLAS] : NAN,
                     dflt ? dflt_ms : NAN, step_ms[IMPL_CLBLAST] / step_ms[IMPL_OWN],
                     have_blas ? step_ms[IMPL_BLAS] / step_ms[IMPL_OWN] : NAN};
      st = cf_json_set(g, "median", nums_json(mk, mv, sizeof mv / sizeof *mv));
      if (st == CF_OK) st = cf_json_set(g, "per_step", nums_json(sk, sv, sizeof sv / sizeof *sv));
    }
  }
  /* OpenBLAS stays loaded: unloading a library with live worker threads is not worth the risk */
  return st;
}
