/* `clformer tune`: fast GEMM settings for this device, stored per device and driver.
 *
 * 1. CLBlast's own tuners from Debian's clblast-utils (when on PATH): its two GEMM kernels
 *    (clblast_tuner_xgemm_direct, clblast_tuner_xgemm) and the helper kernels its indirect GEMM
 *    runs around Xgemm (clblast_tuner_transpose_pad, _transpose_fast, _copy_pad, _copy_fast: kernels
 *    Padtranspose, Transpose, Pad, Copy), each on this device for a product of the model's size,
 *    over part of its search space, under a share of the wall-clock budget. A tuner that runs out
 *    is stopped; the fastest verified configuration comes from its JSON when it wrote one, else from
 *    the rows it printed. Progress and an ETA are printed while they run.
 * 2. The tuned parameters are stored and applied (CLBlastOverrideParameters), then every distinct
 *    GEMM shape of the model is timed through our kernels, CLBlast's direct kernel and CLBlast's
 *    indirect kernel (interleaved samples, medians).
 * 3. From those times: CLBlast's XGEMM_MIN_INDIRECT_SIZE (the direct/indirect switch) that makes the
 *    model's products fastest, and per shape ours or CLBlast's (CLBlast kept unless ours is > 3%
 *    faster).
 * The results file (format in src/gemm.c) is read by every later run's first GEMM. */
#define _GNU_SOURCE  /* posix_spawn_file_actions_addchdir_np (glibc 2.29) */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <clblast_c.h>
#include "clformer/gemm.h"
#include "runtime/runtime.h"

extern char **environ;

static int on_path(const char *prog) {
  const char *path = getenv("PATH");
  char buf[4096];
  for (const char *p = path ? path : "/usr/bin"; p && *p;) {
    size_t n = strcspn(p, ":");
    snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, prog);
    if (access(buf, X_OK) == 0) return 1;
    p += n + (p[n] == ':');
  }
  return 0;
}

static void fmt_time(double s, char *out, size_t n) {
  if (s < 0) s = 0;
  snprintf(out, n, "%d:%02d", (int)s / 60, (int)s % 60);
}

/* The fastest verified configuration a tuner printed so far, as "KERNEL NAME=VALUE ...": a tuner
 * writes its JSON only when it finishes (xgemm: each of its two kernel variants), so one stopped at
 * its budget still leaves this. Names come from its "* Parameters explored:" line, values from the
 * param column of each "results match" row, in the same order. */
typedef struct tuner_best {
  const char *kernel;
  char names[32][32];
  int nnames;
  double ms;
  char line[1024];
} tuner_best;

static void parse_tuner_line(tuner_best *b, const char *line) {
  const char *ex = strstr(line, "Parameters explored:");
  if (ex) {
    b->nnames = 0;
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", ex + 20);
    char *save = NULL;
    for (char *w = strtok_r(tmp, " \t\r", &save); w && b->nnames < 32; w = strtok_r(NULL, " \t\r", &save))
      snprintf(b->names[b->nnames++], sizeof b->names[0], "%s", w);
    return;
  }
  int id;
  if (b->nnames == 0 || sscanf(line, "| %d |", &id) != 1 || !strstr(line, "results match")) return;
  const char *f[10];
  int nf = 0;
  for (const char *p = line; (p = strchr(p, '|')) && nf < 10; p++) f[nf++] = p + 1;
  if (nf < 9) return;
  double ms = strtod(f[6], NULL);  /* columns: ID, total, param, local, global, compiles, time, ... */
  if (!(ms > 0) || ms >= b->ms) return;
  char out[1024];
  size_t len = (size_t)snprintf(out, sizeof out, "%s", b->kernel);
  const char *p = f[2];
  for (int i = 0; i < b->nnames; i++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || end > f[3]) return;  /* fewer values than names: not a row we understand */
    p = end;
    if (len < sizeof out) len += (size_t)snprintf(out + len, sizeof out - len, " %s=%ld", b->names[i], v);
  }
  if (len >= sizeof out) return;
  b->ms = ms;
  snprintf(b->line, sizeof b->line, "%s", out);
}

/* Run one tuner in dir with a budget; returns the number of configurations it reported and keeps
 * the fastest in *best. */
static int run_tuner(const cf_context *ctx, const char *prog, const char *dir, double fraction, int runs, size_t m,
                     size_t n, size_t k, double budget, double t0, double total_budget, tuner_best *best) {
  int fd[2];
  if (pipe(fd)) return 0;
  char sp[16], sd[16], sm[32], sn[32], sk[32], sf[32], sr[16];
  snprintf(sp, sizeof sp, "%d", ctx->info.platform_index);
  snprintf(sd, sizeof sd, "%d", ctx->info.device_index);
  snprintf(sm, sizeof sm, "%zu", m);
  snprintf(sn, sizeof sn, "%zu", n);
  snprintf(sk, sizeof sk, "%zu", k);
  snprintf(sf, sizeof sf, "%g", fraction);
  snprintf(sr, sizeof sr, "%d", runs);
  fflush(NULL);
  /* posix_spawn rather than fork: no copy of this multi-threaded process (PoCL's workers) whose
   * pages stay write-protected until the exec. The tuner runs in dir, in its own process group (so
   * the budget's SIGTERM reaches what it starts), its output to our pipe. */
  int buffered = on_path("stdbuf");  /* its progress arrives as it happens, not when a pipe buffer fills */
  char *args[] = {"stdbuf", "-oL", (char *)prog, "-platform", sp, "-device", sd, "-precision", "32", "-m", sm, "-n", sn,
                  "-k", sk, "-fraction", sf, "-runs", sr, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  pid_t pid = 0;
  int err = posix_spawn_file_actions_init(&fa);
  if (!err) {
    err = posix_spawnattr_init(&at);
    if (!err) {
      err = posix_spawn_file_actions_addchdir_np(&fa, dir);
      if (!err) err = posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
      if (!err) err = posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
      if (!err) err = posix_spawn_file_actions_addclose(&fa, fd[0]);
      if (!err && fd[1] > 2) err = posix_spawn_file_actions_addclose(&fa, fd[1]);
      if (!err) err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
      if (!err) err = posix_spawnattr_setpgroup(&at, 0);
      if (!err) err = posix_spawnp(&pid, buffered ? args[0] : prog, &fa, &at, buffered ? args : args + 2, environ);
      posix_spawnattr_destroy(&at);
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  if (err) {
    cf_log(0, "tune: cannot run %s: %s", prog, strerror(err));
    close(fd[0]);
    close(fd[1]);
    return 0;
  }
  close(fd[1]);
  double start = cf_now(), last = 0;
  int configs = 0, killed = 0, tty = isatty(2), open_ = 1;
  char line[4096];
  size_t used = 0;
  while (open_) {
    struct pollfd p = {fd[0], POLLIN, 0};
    if (poll(&p, 1, 1000) > 0) {  /* at least once a second: the progress line below */
      ssize_t r = read(fd[0], line + used, sizeof line - 1 - used);
      if (r <= 0) open_ = 0;
      else used += (size_t)r;
      line[used] = 0;
      char *nl;
      while ((nl = strchr(line, '\n')) || used == sizeof line - 1) {
        if (!nl) nl = line + used - 1;
        *nl = 0;
        int id;
        if (sscanf(line, "| %d |", &id) == 1 && strstr(line, " ms |")) configs++;  /* a timed configuration */
        parse_tuner_line(best, line);
        used -= (size_t)(nl + 1 - line);
        memmove(line, nl + 1, used + 1);
      }
    }
    double now = cf_now();
    if (now - last >= (tty ? 1.0 : 15.0)) {
      char el[16], eta[16];
      fmt_time(now - t0, el, sizeof el);
      fmt_time(total_budget - (now - t0), eta, sizeof eta);
      fprintf(stderr, "%s  %s: %d configurations tried, %s elapsed, at most %s left%s", tty ? "\r" : "", prog, configs,
              el, eta, tty ? "   " : "\n");
      last = now;
    }
    if (!killed && now - start > budget) {
      kill(-pid, SIGTERM);
      kill(pid, SIGTERM);
      killed = 1;
    }
  }
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  fprintf(stderr, "%s  %s: %d configurations tried in %.0f s%s\n", tty ? "\r" : "", prog, configs, cf_now() - start,
          killed ? " (stopped at its budget)" : "");
  return configs;
}

/* From the tuner JSON files in dir of one family (prefix "clblast_xgemm_direct_" or "clblast_xgemm_"), the
 * fastest result as "KERNEL NAME=VALUE ..." (PRECISION dropped); 0 when there is none. */
static int best_of(const char *dir, const char *prefix, const char *kernel, char *out, size_t n, double *best_ms) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int found = 0;
  *best_ms = INFINITY;
  while ((e = readdir(d))) {
    const char *name = e->d_name;
    size_t pl = strlen(prefix);
    /* clblast_xgemm_1_32.json is xgemm's, clblast_xgemm_direct_1_32.json xgemm_direct's */
    if (strncmp(name, prefix, pl) || !(name[pl] >= '0' && name[pl] <= '9') || !strstr(name, "_32.json")) continue;
    char path[4400], *text;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (cf_read_file(path, &text, NULL) != CF_OK) {
      cf_clear_error();
      continue;
    }
    const char *t = strstr(text, "\"best_time\": \""), *p = strstr(text, "\"best_parameters\": \"");
    if (t && p) {
      double ms = strtod(t + 14, NULL);
      p += 20;
      const char *q = strchr(p, '"');
      if (q && ms > 0 && ms < *best_ms) {
        *best_ms = ms;
        size_t len = (size_t)snprintf(out, n, "%s", kernel);
        char params[2048];
        snprintf(params, sizeof params, "%.*s", (int)(q - p), p);
        char *save = NULL;
        for (char *w = strtok_r(params, " ", &save); w; w = strtok_r(NULL, " ", &save))
          if (strncmp(w, "PRECISION=", 10) && len < n) len += (size_t)snprintf(out + len, n - len, " %s", w);
        found = 1;
      }
    }
    free(text);
  }
  closedir(d);
  return found;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
      }
    closedir(d);
  }
  rmdir(dir);
}

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
    CF_TRY(cf_gemm_batched_with(ctx, impl, s->ta, s->tb, s->M, s->N, s->K, 1.0f, cf_at(A, 0), lda, s->M * s->K,
                                cf_at(B, 0), ldb, s->K * s->N, s->beta, cf_at(C, 0), s->N, s->M * s->N, s->batch));
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

static cf_status write_results(cf_context *ctx, const char *path, const char *clblast_lines, const char *choices) {
  const cf_device_info *d = cf_context_device(ctx);
  size_t n = strlen(clblast_lines) + strlen(choices) + 2048;
  char *text = malloc(n);
  if (!text) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  time_t now = time(NULL);
  char when[64];
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));  /* localtime shares one buffer */
  int len = snprintf(text, n,
                     "# clformer %s tune, %s\n# device: %s | %s | %s | driver %s\n"
                     "# clblast KERNEL NAME=VALUE...: CLBlastOverrideParameters\n"
                     "# choice OP M N K BATCH IMPL OWN_GFLOPS CLBLAST_GFLOPS\n%s%s",
                     CLFORMER_VERSION, when, d->name, d->platform_name, d->platform_version, d->driver_version,
                     clblast_lines, choices);
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  cf_status st = cf_mkdirs(dir);
  if (st == CF_OK) st = cf_write_file_atomic(path, text, (size_t)len);
  free(text);
  return st;
}

cf_status cf_gemm_tune(cf_context *ctx, const cf_gemm_shape *all, int nall, const cf_tune_options *o) {
  if (!o || !o->rows || !o->width || nall < 1 || nall > CF_GEMM_MAX_SHAPES)
    return CF_FAIL(CF_ERR_INVALID_ARG, "cf_gemm_tune: needs the problem's rows and width and 1 to %d shapes",
                   CF_GEMM_MAX_SHAPES);
  double t0 = cf_now(), budget = o->budget_s > 0 ? o->budget_s : 840;
  char path[4200];
  if (!cf_gemm_tune_path(ctx, path, sizeof path))
    return CF_FAIL(CF_ERR_CONFIG, "tune: no cache directory to store results in (CLFORMER_CACHE is off, or no HOME)");
  const cf_device_info *d = cf_context_device(ctx);
  printf("tuning GEMM on %s (%s, driver %s), at most %.0f s; results: %s\n", d->name, d->platform_name,
         d->driver_version, budget, path);
  fflush(stdout);

  /* 1. CLBlast's tuners, 68% of the budget: its two GEMM kernels (direct first: small products use
   * it by default), then the helper kernels its indirect GEMM runs around Xgemm (pad and/or
   * transpose the operands into temporaries; Padtranspose does most of that work here). The GEMM
   * tuners search a fraction of their large spaces; the helpers' spaces are small (34-144
   * configurations) and get a fixed share. Problem sizes are the model's: m = C, n = min(B*T,
   * 1024) tokens, k = C (with operands swapped to column-major, as src/gemm.c calls CLBlast): the
   * winner at a smaller size need not be the best for the model's 1024-row products. Each
   * configuration is timed 3 times (the tuners keep the fastest): with one run each, on a shared
   * machine, a lucky timing can pick the winner. */
  char clblast_lines[8192] = "";
  int run_tuners = !o->skip_clblast_tuners;
  size_t N = o->rows, C = o->width;
  size_t tn = N < 1024 ? N : 1024;
  double user_fraction = o->fraction > 0 ? o->fraction : 0.005;
  struct {
    const char *prog, *prefix, *kernel;
    double share, fraction;  /* fraction 0: the user's */
    int runs;
    size_t m, n, k;
  } tuners[] = {
      {"clblast_tuner_xgemm_direct", "clblast_xgemm_direct_", "XgemmDirect", 0.12, 0, 3, C, tn, C},
      {"clblast_tuner_xgemm", "clblast_xgemm_", "Xgemm", 0.36, 0, 3, C, tn, C},
      {"clblast_tuner_transpose_pad", "clblast_padtranspose_", "Padtranspose", 0.07, 0.6, 3, tn, C, 1},
      {"clblast_tuner_transpose_fast", "clblast_transpose_", "Transpose", 0.03, 1.0, 3, C, C, 1},  /* square only */
      {"clblast_tuner_copy_pad", "clblast_pad_", "Pad", 0.05, 0.6, 3, tn, C, 1},
      {"clblast_tuner_copy_fast", "clblast_copy_", "Copy", 0.05, 0.5, 3, tn, C, 1}};
  for (size_t i = 0; i < sizeof tuners / sizeof *tuners && run_tuners; i++) {
    if (!on_path(tuners[i].prog)) {
      printf("  %s not found (Debian: apt install clblast-utils); skipped\n", tuners[i].prog);
      continue;
    }
    char dir[] = "/tmp/clformer-tune-XXXXXX";
    if (!mkdtemp(dir)) return CF_FAIL(CF_ERR_IO, "tune: mkdtemp: %s", strerror(errno));
    tuner_best best = {.kernel = tuners[i].kernel, .ms = INFINITY};
    run_tuner(ctx, tuners[i].prog, dir, tuners[i].fraction > 0 ? tuners[i].fraction : user_fraction, tuners[i].runs,
              tuners[i].m, tuners[i].n, tuners[i].k, budget * tuners[i].share, t0, budget, &best);
    char line[2048];
    double ms;
    const char *from = "its results file";
    if (!best_of(dir, tuners[i].prefix, tuners[i].kernel, line, sizeof line, &ms)) ms = INFINITY;
    if (best.ms < ms) {  /* stopped before it wrote a file, or (xgemm) in a later variant than the one it wrote */
      snprintf(line, sizeof line, "%s", best.line);
      ms = best.ms;
      from = "its output";
    }
    if (isfinite(ms) && ms > 0) {
      printf("  best %s: %.3f ms (from %s): %s\n", tuners[i].kernel, ms, from, line);
      snprintf(clblast_lines + strlen(clblast_lines), sizeof clblast_lines - strlen(clblast_lines), "clblast %s\n",
               line);
    } else printf("  %s finished no kernel variant within its budget; CLBlast keeps its defaults\n", tuners[i].prog);
    rm_dir(dir);
    fflush(stdout);
  }
  /* apply them (a file without choices), so the comparison below times tuned CLBlast */
  CF_TRY(write_results(ctx, path, clblast_lines, ""));
  cf_gemm_tune_reload(ctx);

  /* 2. every distinct shape: ours, CLBlast direct, CLBlast indirect (all tuned parameters applied) */
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  int nsh = 0, count[CF_GEMM_MAX_SHAPES];
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
  unsigned long long biggest = 0;
  for (int i = 0; i < nsh; i++)
    if (mnk(&sh[i]) > biggest) biggest = mnk(&sh[i]);
  size_t s_direct = cube_above(biggest);
  double sec[CF_GEMM_MAX_SHAPES][NMODES];
  int measured = 0;
  printf("\n%-14s %-2s %5s %5s %5s %4s %9s %9s %9s   (GFLOP/s; CLBlast with what its tuners found above)\n", "shape", "op",
         "M", "N", "K", "bat", "own", "clb-dir", "clb-ind");
  cf_status st = CF_OK;
  double t2 = cf_now();
  for (int i = 0; i < nsh && st == CF_OK; i++) {
    if (cf_now() - t0 > budget) {
      printf("  budget spent: %d of %d shapes measured; the rest keep the default choice\n", i, nsh);
      break;
    }
    st = measure_shape(ctx, &sh[i], s_direct, sec[i]);
    if (st != CF_OK) break;
    measured++;
    double flops = 2.0 * (double)mnk(&sh[i]) * sh[i].batch * 1e-9;
    printf("%-14s %-2s %5zu %5zu %5zu %4zu %9.1f %9.1f %9.1f\n", sh[i].name, sh[i].ta ? (sh[i].tb ? "TT" : "TN")
           : (sh[i].tb ? "NT" : "NN"), sh[i].M, sh[i].N, sh[i].K, sh[i].batch, flops / sec[i][M_OWN],
           flops / sec[i][M_DIRECT], flops / sec[i][M_INDIRECT]);
    char el[16], eta[16];
    fmt_time(cf_now() - t0, el, sizeof el);
    fmt_time((cf_now() - t2) / (i + 1) * (nsh - i - 1), eta, sizeof eta);
    fflush(stdout);
    fprintf(stderr, "  [%d/%d shapes, %s elapsed, ETA %s]\n", i + 1, nsh, el, eta);
  }
  char *choices = NULL;
  if (st == CF_OK && measured > 0) {
    /* 3. CLBlast's direct/indirect switch from the measurements, then ours or CLBlast's per shape */
    double total;
    size_t S = pick_min_indirect(sh, count, sec, measured, &total);
    double all_ind = 0, all_dir = 0;
    for (int i = 0; i < measured; i++) {
      all_ind += count[i] * sec[i][M_INDIRECT];
      all_dir += count[i] * sec[i][M_DIRECT];
    }
    char rule[64] = "every product indirect";
    if (S > S_ALL_INDIRECT) snprintf(rule, sizeof rule, "direct kernel when M*N*K < %zu^3", S);
    printf("\nCLBlast XGEMM_MIN_INDIRECT_SIZE=%zu (%s): %.2f ms for one of each of the model's products; all indirect "
           "%.2f ms, all direct %.2f ms\n", S, rule, total * 1e3, all_ind * 1e3, all_dir * 1e3);
    snprintf(clblast_lines + strlen(clblast_lines), sizeof clblast_lines - strlen(clblast_lines),
             "clblast GemmRoutine XGEMM_MIN_INDIRECT_SIZE=%zu\n", S);
    choices = calloc((size_t)measured, 160);
    if (!choices) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    size_t len = 0;
    for (int i = 0; i < measured && st == CF_OK; i++) {
      double flops = 2.0 * (double)mnk(&sh[i]) * sh[i].batch * 1e-9;
      double own = flops / sec[i][M_OWN], clb = flops / sec[i][mnk(&sh[i]) < (unsigned long long)S * S * S
                                                                   ? M_DIRECT : M_INDIRECT];
      const char *pick = own > 1.03 * clb ? "own" : "clblast";
      char op[3] = {sh[i].ta ? 'T' : 'N', sh[i].tb ? 'T' : 'N', 0};
      len += (size_t)snprintf(choices + len, (size_t)measured * 160 - len, "choice %s %zu %zu %zu %zu %s %.2f %.2f\n",
                              op, sh[i].M, sh[i].N, sh[i].K, sh[i].batch, pick, own, clb);
    }
  }
  if (st == CF_OK) st = write_results(ctx, path, clblast_lines, choices ? choices : "");
  free(choices);
  cf_gemm_tune_reload(ctx);  /* also puts back the file's XGEMM_MIN_INDIRECT_SIZE */
  if (st == CF_OK) printf("\ndone in %.0f s; every later run on this device and driver applies %s\n", cf_now() - t0, path);
  return st;
}
