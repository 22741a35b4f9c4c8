/* `clformer tune`: fast GEMM settings for this device, stored per device and driver.
 *
 * 1. CLBlast's own tuners (clblast_tuner_xgemm_direct and clblast_tuner_xgemm from Debian's
 *    clblast-utils, when on PATH), each run on this device for a product of the model's size
 *    (M = min(B*T, 512), N = K = d_model) over a random fraction of its search space, under a
 *    wall-clock budget (the tuner is stopped when it runs out; each kernel variant it finished has
 *    written its JSON, and the fastest configuration of those wins). Progress and an ETA are
 *    printed while they run.
 * 2. The tuned parameters are stored and applied (CLBlastOverrideParameters), then every GEMM
 *    shape of the model is timed through CLBlast and through our kernels (interleaved samples,
 *    medians); the faster one is recorded per shape, CLBlast kept unless ours is > 3% faster.
 * The results file (format in src/gemm.c) is read by every later run's first GEMM. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "clformer/bench.h"
#include "clformer/clformer.h"
#include "internal.h"

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

/* Run one tuner in dir with a budget; returns the number of configurations it reported. */
static int run_tuner(const cf_context *ctx, const char *prog, const char *dir, double fraction, size_t m, size_t n,
                     size_t k, double budget, double t0, double total_budget) {
  int fd[2];
  if (pipe(fd)) return 0;
  char sp[16], sd[16], sm[32], sn[32], sk[32], sf[32];
  snprintf(sp, sizeof sp, "%d", ctx->info.platform_index);
  snprintf(sd, sizeof sd, "%d", ctx->info.device_index);
  snprintf(sm, sizeof sm, "%zu", m);
  snprintf(sn, sizeof sn, "%zu", n);
  snprintf(sk, sizeof sk, "%zu", k);
  snprintf(sf, sizeof sf, "%g", fraction);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    if (chdir(dir)) _exit(127);
    setpgid(0, 0);
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    if (on_path("stdbuf"))  /* its progress arrives as it happens, not when a pipe buffer fills */
      execlp("stdbuf", "stdbuf", "-oL", prog, "-platform", sp, "-device", sd, "-precision", "32", "-m", sm, "-n", sn,
             "-k", sk, "-fraction", sf, "-runs", "1", (char *)NULL);
    execlp(prog, prog, "-platform", sp, "-device", sd, "-precision", "32", "-m", sm, "-n", sn, "-k", sk, "-fraction",
           sf, "-runs", "1", (char *)NULL);
    _exit(127);
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

/* Median seconds per call of one implementation over samples of `calls` calls. */
static cf_status time_impl(cf_context *ctx, cf_gemm_impl impl, const cf_gemm_shape *s, cl_mem A, cl_mem B, cl_mem C,
                           int calls, double *sec) {
  size_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
  CF_TRY(cf_context_finish(ctx));
  double t0 = cf_now();
  for (int i = 0; i < calls; i++)
    CF_TRY(cf_gemm_batched_with(ctx, impl, s->ta, s->tb, s->M, s->N, s->K, 1.0f, cf_at(A, 0), lda, s->M * s->K,
                                cf_at(B, 0), ldb, s->K * s->N, s->beta, cf_at(C, 0), s->N, s->M * s->N, s->batch));
  CF_TRY(cf_context_finish(ctx));
  *sec = (cf_now() - t0) / calls;
  return CF_OK;
}

static double med5(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static cf_status measure_shape(cf_context *ctx, const cf_gemm_shape *s, double gflops[2]) {
  size_t na = s->M * s->K * s->batch, nb = s->K * s->N * s->batch, nc = s->M * s->N * s->batch;
  cl_mem A = NULL, B = NULL, C = NULL;
  cf_status st = cf_buffer_create(ctx, na * sizeof(float), &A);
  if (st == CF_OK) st = cf_buffer_create(ctx, nb * sizeof(float), &B);
  if (st == CF_OK) st = cf_buffer_create(ctx, nc * sizeof(float), &C);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(A, 0), 0.01f, na);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(B, 0), 0.01f, nb);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(C, 0), 0.0f, nc);
  const cf_gemm_impl impl[2] = {CF_GEMM_OWN, CF_GEMM_CLBLAST};
  double slow = 0, t, v[2][5];
  for (int i = 0; i < 2 && st == CF_OK; i++) {  /* warm-up: builds the kernels */
    st = time_impl(ctx, impl[i], s, A, B, C, 1, &t);
    if (st == CF_OK) st = time_impl(ctx, impl[i], s, A, B, C, 2, &t);
    if (t > slow) slow = t;
  }
  int calls = slow >= 0.01 ? 1 : (int)ceil(0.01 / (slow > 1e-6 ? slow : 1e-6));
  if (calls > 100) calls = 100;
  for (int r = 0; r < 5 && st == CF_OK; r++)
    for (int j = 0; j < 2 && st == CF_OK; j++) {
      int i = (j + r) % 2;
      st = time_impl(ctx, impl[i], s, A, B, C, calls, &v[i][r]);
    }
  cf_buffer_free(A);
  cf_buffer_free(B);
  cf_buffer_free(C);
  if (st != CF_OK) return st;
  double flops = 2.0 * s->M * s->N * s->K * s->batch;
  for (int i = 0; i < 2; i++) gflops[i] = flops / med5(v[i], 5) * 1e-9;
  return CF_OK;
}

static cf_status write_results(cf_context *ctx, const char *path, const char *clblast_lines, const char *choices) {
  const cf_device_info *d = cf_context_device(ctx);
  size_t n = strlen(clblast_lines) + strlen(choices) + 2048;
  char *text = malloc(n);
  if (!text) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  time_t now = time(NULL);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
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

cf_status cf_gemm_tune(cf_context *ctx, const cf_config *cfg, const cf_tune_options *o) {
  double t0 = cf_now(), budget = o && o->budget_s > 0 ? o->budget_s : 840;
  char path[4200];
  if (!cf_gemm_tune_path(ctx, path, sizeof path))
    return CF_FAIL(CF_ERR_CONFIG, "tune: no cache directory to store results in (CLFORMER_CACHE is off, or no HOME)");
  const cf_device_info *d = cf_context_device(ctx);
  printf("tuning GEMM on %s (%s, driver %s), at most %.0f s; results: %s\n", d->name, d->platform_name,
         d->driver_version, budget, path);
  fflush(stdout);

  /* 1. CLBlast's tuners: 60% of the budget, direct kernels first (the model's products are small) */
  char clblast_lines[4096] = "";
  int run_tuners = !(o && o->skip_clblast_tuners);
  struct { const char *prog, *prefix, *kernel; double share; } tuners[] = {
      {"clblast_tuner_xgemm_direct", "clblast_xgemm_direct_", "XgemmDirect", 0.25},
      {"clblast_tuner_xgemm", "clblast_xgemm_", "Xgemm", 0.35}};
  size_t N = (size_t)cfg->data.batch_size * cfg->data.seq_len, C = (size_t)cfg->model.d_model;
  size_t tm = N < 512 ? N : 512;
  for (int i = 0; i < 2 && run_tuners; i++) {
    if (!on_path(tuners[i].prog)) {
      printf("  %s not found (Debian: apt install clblast-utils); skipped\n", tuners[i].prog);
      continue;
    }
    char dir[] = "/tmp/clformer-tune-XXXXXX";
    if (!mkdtemp(dir)) return CF_FAIL(CF_ERR_IO, "tune: mkdtemp: %s", strerror(errno));
    double fraction = o && o->fraction > 0 ? o->fraction : 0.005;
    run_tuner(ctx, tuners[i].prog, dir, fraction, tm, C, C, budget * tuners[i].share, t0, budget);
    char line[2048];
    double ms;
    if (best_of(dir, tuners[i].prefix, tuners[i].kernel, line, sizeof line, &ms)) {
      printf("  best %s: %.3f ms for %zu x %zu x %zu: %s\n", tuners[i].kernel, ms, tm, C, C, line);
      snprintf(clblast_lines + strlen(clblast_lines), sizeof clblast_lines - strlen(clblast_lines), "clblast %s\n", line);
    } else printf("  %s finished no kernel variant within its budget; CLBlast keeps its defaults\n", tuners[i].prog);
    rm_dir(dir);
    fflush(stdout);
  }
  /* apply them (a file without choices), so the comparison below times tuned CLBlast */
  CF_TRY(write_results(ctx, path, clblast_lines, ""));
  cf_gemm_tune_reload(ctx);

  /* 2. per shape: ours or CLBlast's, by measured speed */
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  int nsh = cf_gemm_model_shapes(cfg, sh);
  char *choices = calloc((size_t)nsh, 128);
  if (!choices) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  size_t len = 0;
  printf("\n%-14s %-2s %5s %5s %5s %4s %10s %10s  %s\n", "shape", "op", "M", "N", "K", "bat", "own", "clblast",
         "choice (GFLOP/s)");
  cf_status st = CF_OK;
  for (int i = 0; i < nsh && st == CF_OK; i++) {
    double g[2];
    st = measure_shape(ctx, &sh[i], g);
    if (st != CF_OK) break;
    const char *pick = g[0] > 1.03 * g[1] ? "own" : "clblast";
    char op[3] = {sh[i].ta ? 'T' : 'N', sh[i].tb ? 'T' : 'N', 0};
    printf("%-14s %-2s %5zu %5zu %5zu %4zu %10.1f %10.1f  %s\n", sh[i].name, op, sh[i].M, sh[i].N, sh[i].K,
           sh[i].batch, g[0], g[1], pick);
    len += (size_t)snprintf(choices + len, (size_t)nsh * 128 - len, "choice %s %zu %zu %zu %zu %s %.2f %.2f\n", op,
                            sh[i].M, sh[i].N, sh[i].K, sh[i].batch, pick, g[0], g[1]);
    char el[16], eta[16];
    fmt_time(cf_now() - t0, el, sizeof el);
    fmt_time((cf_now() - t0) / (i + 1) * (nsh - i - 1), eta, sizeof eta);
    fprintf(stderr, "  [%d/%d shapes, %s elapsed, ETA %s]\n", i + 1, nsh, el, eta);
    fflush(stdout);
  }
  if (st == CF_OK) st = write_results(ctx, path, clblast_lines, choices);
  free(choices);
  if (st == CF_OK) {
    cf_gemm_tune_reload(ctx);
    printf("\ndone in %.0f s; every later run on this device and driver applies %s\n", cf_now() - t0, path);
  }
  return st;
}
