/* `clformer tune`: fast GEMM settings for this device, stored per device and driver.
 *
 * 1. CLBlast's own tuners (tune_clblast.c) find parameters for its GEMM kernels and the helper
 *    kernels around them.
 * 2. The tuned parameters are stored and applied (CLBlastOverrideParameters), then every distinct
 *    GEMM shape of the model is timed through our kernels, CLBlast's direct kernel and CLBlast's
 *    indirect kernel (interleaved samples, medians).
 * 3. From those times: CLBlast's XGEMM_MIN_INDIRECT_SIZE (the direct/indirect switch) that makes the
 *    model's products fastest, and per shape ours or CLBlast's (CLBlast kept unless ours is > 3%
 *    faster).
 * The results file (format in tuning_file.c) is read by every later run's first GEMM. What the run
 * shows goes to the caller's streams (cf_tune_options.report and .progress), nothing elsewhere. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <clblast_c.h>
#include "gemm/tune_internal.h"
#include "runtime/runtime.h"

void cf_tune_say(FILE *f, const char *fmt, ...) {
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
}

void cf_tune_flush(FILE *f) {
  if (f) fflush(f);
}

void cf_tune_fmt_time(double s, char *out, size_t n) {
  if (s < 0) s = 0;
  snprintf(out, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

/* ---------- timing one shape ---------- */

/* XGEMM_MIN_INDIRECT_SIZE: CLBlast runs its direct kernel when m*n*k < S^3, else the indirect one
 * (Xgemm plus the helper kernels that pad and transpose). Set through the "GemmRoutine" parameters;
 * CLBlast keys its compiled programs by the parameter values, so switching back and forth compiles
 * each variant once. */
static cf_status set_min_indirect(cf_context *ctx, size_t S) {
  const char *names[1] = {"XGEMM_MIN_INDIRECT_SIZE"};
  size_t values[1] = {S};
  CF_CHECK(CLBlastOverrideParameters(ctx->info.device, "GemmRoutine", CLBlastPrecisionSingle, 1, names, values));
  return CF_OK;
}

enum { M_OWN, M_DIRECT, M_INDIRECT, NMODES };
static const size_t S_ALL_INDIRECT = 1;

/* Median seconds per call of one implementation over samples of `calls` calls. */
static cf_status time_impl(cf_context *ctx, int mode, size_t s_direct, const cf_gemm_shape *s, cl_mem A, cl_mem B,
                           cl_mem C, int calls, double *sec) {
  size_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  cf_gemm_impl impl = mode == M_OWN ? CF_GEMM_OWN : CF_GEMM_CLBLAST;
  if (mode != M_OWN) CF_TRY(set_min_indirect(ctx, mode == M_DIRECT ? s_direct : S_ALL_INDIRECT));
  CF_TRY(cf_context_finish(ctx));
  double t0 = cf_now();
  for (int i = 0; i < calls; i++)
    CF_TRY(cf_gemm_batched_nested_with(ctx, impl, s->ta, s->tb, s->M, s->N, s->K, 1.0f, cf_at(A, 0), lda,
                                       s->M * s->K, 0, cf_at(B, 0), ldb, s->K * s->N, 0, s->beta, cf_at(C, 0), s->N,
                                       s->M * s->N, 0, s->batch, 1, s->tri));
  CF_TRY(cf_context_finish(ctx));
  *sec = (cf_now() - t0) / calls;
  return CF_OK;
}

/* Seconds per call of one shape: ours, CLBlast's direct kernel, CLBlast's indirect kernel
 * (interleaved samples, order rotating, medians of 5). s_direct: an XGEMM_MIN_INDIRECT_SIZE that
 * sends this shape to the direct kernel. */
static cf_status measure_shape(cf_context *ctx, const cf_gemm_shape *s, size_t s_direct, double sec[NMODES]) {
  size_t na = s->M * s->K * s->batch, nb = s->K * s->N * s->batch, nc = s->M * s->N * s->batch;
  cl_mem A = NULL, B = NULL, C = NULL;
  cf_status st = cf_buffer_create(ctx, na * sizeof(float), &A);
  if (st == CF_OK) st = cf_buffer_create(ctx, nb * sizeof(float), &B);
  if (st == CF_OK) st = cf_buffer_create(ctx, nc * sizeof(float), &C);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(A, 0), 0.01f, na);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(B, 0), 0.01f, nb);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(C, 0), 0.0f, nc);
  double slow = 0, t = 0, v[NMODES][5];
  for (int i = 0; i < NMODES && st == CF_OK; i++) {  /* warm-up: builds the kernels */
    st = time_impl(ctx, i, s_direct, s, A, B, C, 1, &t);
    if (st == CF_OK) st = time_impl(ctx, i, s_direct, s, A, B, C, 2, &t);
    if (t > slow) slow = t;
  }
  int calls = slow >= 0.01 ? 1 : (int)ceil(0.01 / (slow > 1e-6 ? slow : 1e-6));
  if (calls > 100) calls = 100;
  for (int r = 0; r < 5 && st == CF_OK; r++)
    for (int j = 0; j < NMODES && st == CF_OK; j++)
      st = time_impl(ctx, (j + r) % NMODES, s_direct, s, A, B, C, calls, &v[(j + r) % NMODES][r]);
  cf_buffer_free(A);
  cf_buffer_free(B);
  cf_buffer_free(C);
  if (st != CF_OK) return st;
  for (int i = 0; i < NMODES; i++) sec[i] = cf_median(v[i], 5);
  return CF_OK;
}

/* m*n*k of one matrix of a shape: what CLBlast compares with XGEMM_MIN_INDIRECT_SIZE^3. */
static unsigned long long mnk(const cf_gemm_shape *s) { return (unsigned long long)s->M * s->N * s->K; }

/* The smallest S with S^3 > v (so a product of v flops/2 goes to the direct kernel). */
static size_t cube_above(unsigned long long v) {
  size_t S = (size_t)cbrt((double)v);
  while ((unsigned long long)S * S * S > v && S > 1) S--;
  while ((unsigned long long)S * S * S <= v) S++;
  return S;
}

/* The XGEMM_MIN_INDIRECT_SIZE that minimises the measured time of all the shapes (each weighted by
 * how often the model issues it): every threshold between two shapes' sizes is a candidate. */
static size_t pick_min_indirect(const cf_gemm_shape *sh, const int *count, double (*sec)[NMODES], int n,
                                double *best_total) {
  size_t best = S_ALL_INDIRECT;
  *best_total = INFINITY;
  for (int c = -1; c < n; c++) {
    size_t S = c < 0 ? S_ALL_INDIRECT : cube_above(mnk(&sh[c]));
    double total = 0;
    for (int i = 0; i < n; i++)
      total += count[i] * sec[i][mnk(&sh[i]) < (unsigned long long)S * S * S ? M_DIRECT : M_INDIRECT];
    if (total < *best_total * 0.999) {  /* ties: the smaller threshold (more products indirect) */
      *best_total = total;
      best = S;
    }
  }
  return best;
}

/* ---------- every shape ---------- */

/* The distinct shapes among all (alike in ta, tb, M, N, K, batch and beta) into sh, with how often
 * each occurs in count; their number. */
static int distinct_shapes(const cf_gemm_shape *all, int nall, cf_gemm_shape *sh, int *count) {
  int nsh = 0;
  for (int i = 0; i < nall; i++) {
    int j = 0;
    while (j < nsh && !(sh[j].ta == all[i].ta && sh[j].tb == all[i].tb && sh[j].M == all[i].M && sh[j].N == all[i].N &&
                        sh[j].K == all[i].K && sh[j].batch == all[i].batch && sh[j].beta == all[i].beta))
      j++;
    if (j == nsh) {
      sh[nsh] = all[i];
      count[nsh++] = 0;
    }
    count[j]++;
  }
  return nsh;
}

static double gflop(const cf_gemm_shape *s) { return cf_gemm_shape_flops(s) * 1e-9; }

/* Step 2: time the shapes in turn (all tuned parameters applied) until the budget is spent, a table
 * row each; *measured: how many, from the first. */
static cf_status measure_shapes(const cf_tune_run *run, const cf_gemm_shape *sh, int nsh, double (*sec)[NMODES],
                                int *measured) {
  unsigned long long biggest = 0;
  for (int i = 0; i < nsh; i++)
    if (mnk(&sh[i]) > biggest) biggest = mnk(&sh[i]);
  size_t s_direct = cube_above(biggest);
  cf_tune_say(run->report, "\n%-14s %-2s %5s %5s %5s %4s %9s %9s %9s   (GFLOP/s; CLBlast with what its tuners found "
              "above)\n", "shape", "op", "M", "N", "K", "bat", "own", "clb-dir", "clb-ind");
  double t2 = cf_now();
  *measured = 0;
  for (int i = 0; i < nsh; i++) {
    if (cf_now() - run->t0 > run->budget) {
      cf_tune_say(run->report, "  budget spent: %d of %d shapes measured; the rest keep the default choice\n", i, nsh);
      break;
    }
    CF_TRY(measure_shape(run->ctx, &sh[i], s_direct, sec[i]));
    (*measured)++;
    double g = gflop(&sh[i]);
    cf_tune_say(run->report, "%-14s %-2s %5zu %5zu %5zu %4zu %9.1f %9.1f %9.1f\n", sh[i].name,
                sh[i].ta ? (sh[i].tb ? "TT" : "TN") : (sh[i].tb ? "NT" : "NN"), sh[i].M, sh[i].N, sh[i].K, sh[i].batch,
                g / sec[i][M_OWN], g / sec[i][M_DIRECT], g / sec[i][M_INDIRECT]);
    char el[16], eta[16];
    cf_tune_fmt_time(cf_now() - run->t0, el, sizeof el);
    cf_tune_fmt_time((cf_now() - t2) / (i + 1) * (nsh - i - 1), eta, sizeof eta);
    cf_tune_flush(run->report);
    cf_tune_say(run->progress, "  [%d/%d shapes, %s elapsed, ETA %s]\n", i + 1, nsh, el, eta);
  }
  return CF_OK;
}

/* Step 3, from the first n shapes' times: CLBlast's direct/indirect switch (a GemmRoutine line),
 * then ours or CLBlast's per shape (choice lines), into tf. */
static cf_status record_choices(const cf_tune_run *run, const cf_gemm_shape *sh, const int *count,
                                double (*sec)[NMODES], int n, cf_tuning_file *tf) {
  double total, all_ind = 0, all_dir = 0;
  size_t S = pick_min_indirect(sh, count, sec, n, &total);
  for (int i = 0; i < n; i++) {
    all_ind += count[i] * sec[i][M_INDIRECT];
    all_dir += count[i] * sec[i][M_DIRECT];
  }
  char rule[64] = "every product indirect";
  if (S > S_ALL_INDIRECT) snprintf(rule, sizeof rule, "direct kernel when M*N*K < %zu^3", S);
  cf_tune_say(run->report, "\nCLBlast XGEMM_MIN_INDIRECT_SIZE=%zu (%s): %.2f ms for one of each of the model's "
              "products; all indirect %.2f ms, all direct %.2f ms\n", S, rule, total * 1e3, all_ind * 1e3,
              all_dir * 1e3);
  cf_tuning_clblast sw = {.kernel = "GemmRoutine"};
  cf_tuning_clblast_add(&sw, "XGEMM_MIN_INDIRECT_SIZE", S);
  CF_TRY(cf_tuning_file_add_clblast(tf, &sw));
  for (int i = 0; i < n; i++) {
    double g = gflop(&sh[i]);
    double own = g / sec[i][M_OWN], clb = g / sec[i][mnk(&sh[i]) < (unsigned long long)S * S * S ? M_DIRECT
                                                                                                 : M_INDIRECT];
    cf_tuning_choice c = {.ta = sh[i].ta, .tb = sh[i].tb, .M = sh[i].M, .N = sh[i].N, .K = sh[i].K,
                          .batch = sh[i].batch, .impl = own > 1.03 * clb ? CF_GEMM_OWN : CF_GEMM_CLBLAST,
                          .own_gflops = own, .clblast_gflops = clb};
    CF_TRY(cf_tuning_file_add_choice(tf, &c));
  }
  return CF_OK;
}

/* Steps 2 and 3 for the model's shapes (duplicates allowed). */
static cf_status choose_per_shape(const cf_tune_run *run, const cf_gemm_shape *all, int nall, cf_tuning_file *tf) {
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  int count[CF_GEMM_MAX_SHAPES], measured;
  int nsh = distinct_shapes(all, nall, sh, count);
  double sec[CF_GEMM_MAX_SHAPES][NMODES];
  CF_TRY(measure_shapes(run, sh, nsh, sec, &measured));
  return measured > 0 ? record_choices(run, sh, count, sec, measured, tf) : CF_OK;
}

/* tf to path, its header saying what wrote it, when, for which device. */
static cf_status write_file(const cf_tune_run *run, cf_tuning_file *tf, const char *path) {
  const cf_device_info *d = cf_context_device(run->ctx);
  time_t now = time(NULL);
  char when[64];
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));  /* localtime shares one buffer */
  CF_TRY(cf_tuning_file_set_comment(tf, "clformer %s tune, %s\ndevice: %s | %s | %s | driver %s", CLFORMER_VERSION,
                                    when, d->name, d->platform_name, d->platform_version, d->driver_version));
  return cf_tuning_file_write(tf, path);
}

cf_status cf_gemm_tune(cf_context *ctx, const cf_gemm_shape *all, int nall, const cf_tune_options *o) {
  if (!o || !o->rows || !o->width || nall < 1 || nall > CF_GEMM_MAX_SHAPES)
    return CF_FAIL(CF_ERR_INVALID_ARG, "cf_gemm_tune: needs the problem's rows and width and 1 to %d shapes",
                   CF_GEMM_MAX_SHAPES);
  cf_tune_run run = {.ctx = ctx, .report = o->report, .progress = o->progress, .t0 = cf_now(),
                     .budget = o->budget_s > 0 ? o->budget_s : 840};
  run.tty = run.progress && isatty(fileno(run.progress));
  char path[4200];
  if (!cf_gemm_tune_path(ctx, path, sizeof path))
    return CF_FAIL(CF_ERR_CONFIG, "tune: no cache directory to store results in (CLFORMER_CACHE is off, or no HOME)");
  const cf_device_info *d = cf_context_device(ctx);
  cf_tune_say(run.report, "tuning GEMM on %s (%s, driver %s), at most %.0f s; results: %s\n", d->name,
              d->platform_name, d->driver_version, run.budget, path);
  cf_tune_flush(run.report);
  cf_tuning_file tf = {0};
  cf_status st = o->skip_clblast_tuners ? CF_OK : cf_tune_clblast_tuners(&run, o, &tf);
  /* apply them (a file without choices), so the comparison below times tuned CLBlast */
  if (st == CF_OK) st = write_file(&run, &tf, path);
  if (st == CF_OK) {
    cf_gemm_tune_reload(ctx);
    st = choose_per_shape(&run, all, nall, &tf);
    if (st == CF_OK) st = write_file(&run, &tf, path);
    cf_gemm_tune_reload(ctx);  /* also puts back the file's XGEMM_MIN_INDIRECT_SIZE */
  }
  if (st == CF_OK)
    cf_tune_say(run.report, "\ndone in %.0f s; every later run on this device and driver applies %s\n",
                cf_now() - run.t0, path);
  cf_tuning_file_free(&tf);
  return st;
}
