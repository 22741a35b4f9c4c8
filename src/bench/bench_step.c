/* `bench step`: a full training step of the config's model (forward with loss, backward, gradient
 * norm, optimizer update, exactly the calls of the trainer's loop) on random tokens.
 *
 * Timing: `warmup` untimed steps, then `steps` steps, each timed by the wall clock from the first
 * enqueue to clFinish; median, min and max reported. Then `profile_steps` more steps with every
 * kernel recording an OpenCL profiling event (our launches, and the GEMM layer's CLBlast calls,
 * whose event covers the last kernel of the routine), summed per kernel name and divided by the
 * step count: the per-operation breakdown. Device time summed over the kernels is shown beside the
 * wall-clock step; the difference is host work and launch gaps.
 *
 * Throughput: tokens/s = B * T / median step time. GFLOP/s = counted FLOPs / median step time,
 * where the count covers the matrix products only (elementwise work, softmax, LayerNorm and the
 * optimizer are left out), with the attention products counted in full (no causal saving):
 *   linear weights P = L * (4 C^2 + 2 C F) + V C   (qkv 3C^2, proj C^2, fc1 and fc2 C F, logits V C)
 *   FLOPs/step     = 6 N P + 12 L B T^2 C           (N = B T; forward 2 N P and 4 B T^2 C per layer,
 *                                                    backward twice the forward)
 *
 * Start-up (when the step is the first thing the command runs): seconds from the command's start
 * to the context being ready, the model allocated and initialised, and the first step finished;
 * the kernel-cache hits and misses tell a warm run (all hits) from a cold one.
 *
 * --vs-torch: tools/torch_step.py is started as a child process speaking a line protocol on its
 * stdin/stdout (`run N` -> one JSON line of N step times); it builds the same model from the same
 * resolved config (written to a temporary YAML file) with PyTorch on the host CPU. The timed steps
 * alternate in rounds between clformer and torch, with a 0.2 s pause at every switch so neither
 * side's spinning worker threads (OpenMP, OpenBLAS, PoCL) steal the cores from the other. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "clformer/train.h"
#include "clformer/model.h"
#include "clformer/check.h"
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "clformer/bench.h"
#include "runtime/runtime.h"

extern char **environ;

#define MAX_OPS 128
#define MAX_STEPS 10000

static void pause_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* ---------- the torch child ---------- */

typedef struct torch_child {
  pid_t pid;
  FILE *to, *from;
  char tmp_config[64];
  char info[4096];  /* its first line: a JSON object describing the setup */
  json_t *setup;    /* that line, parsed */
} torch_child;

static const char *python_path(void) {
  const char *env = getenv("CLFORMER_PYTHON");
  if (env && *env) return env;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";  /* Debian's, with python3-torch */
  return "python3";
}

static int find_script(const char *given, char *out, size_t n) {
  if (given) {
    snprintf(out, n, "%s", given);
    return access(out, R_OK) == 0;
  }
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *dir = dirname(exe);
    const char *rel[] = {"../tools/torch_step.py", "../share/clformer/torch_step.py", "tools/torch_step.py"};
    for (int i = 0; i < 3; i++) {
      snprintf(out, n, "%s/%s", dir, rel[i]);
      if (access(out, R_OK) == 0) return 1;
    }
  }
  snprintf(out, n, "tools/torch_step.py");
  return access(out, R_OK) == 0;
}

static void torch_stop(torch_child *t) {
  if (t->to) fclose(t->to);
  if (t->from) fclose(t->from);
  if (t->pid > 0) {
    int status;
    pid_t r = 0;
    for (int i = 0; i < 50 && (r = waitpid(t->pid, &status, WNOHANG)) == 0; i++) pause_s(0.1);
    if (r == 0) {
      kill(t->pid, SIGTERM);
      waitpid(t->pid, &status, 0);
    }
  }
  if (t->tmp_config[0]) unlink(t->tmp_config);
  json_decref(t->setup);
  memset(t, 0, sizeof *t);
}

static cf_status torch_start(torch_child *t, const cf_config *cfg, const cf_bench_step_options *o) {
  memset(t, 0, sizeof *t);
  char script[PATH_MAX + 64];
  if (!find_script(o->torch_script, script, sizeof script))
    return CF_FAIL(CF_ERR_NOT_FOUND, "--vs-torch: cannot find tools/torch_step.py (give --torch-script PATH)");
  snprintf(t->tmp_config, sizeof t->tmp_config, "/tmp/clformer-bench-XXXXXX");
  int fd = mkstemp(t->tmp_config);
  if (fd < 0) {
    t->tmp_config[0] = 0;
    return CF_FAIL(CF_ERR_IO, "--vs-torch: cannot create a temporary config file: %s", strerror(errno));
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: fdopen: %s", strerror(errno));
  }
  cf_config_write(cfg, f);
  fclose(f);
  int in[2], out[2];
  if (pipe(in)) {
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: pipe: %s", strerror(errno));
  }
  if (pipe(out)) {
    int e = errno;
    close(in[0]);
    close(in[1]);
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: pipe: %s", strerror(e));
  }
  fflush(NULL);
  const char *py = python_path();
  char threads[32] = "0", warm[32];
  if (o->torch_threads > 0) snprintf(threads, sizeof threads, "%d", o->torch_threads);
  snprintf(warm, sizeof warm, "%d", o->warmup);
  /* posix_spawn, not fork: a forked copy of this process write-protects every page of ours until
   * the child has exec'd, and the first step after it then took 0.6 s more, faulting each page of
   * the model's buffers back in. */
  posix_spawn_file_actions_t fa;
  pid_t pid = 0;
  int err = posix_spawn_file_actions_init(&fa);
  if (!err) {
    err = posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    if (!err) err = posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    for (int i = 0; i < 2 && !err; i++) {
      if (in[i] > 1) err = posix_spawn_file_actions_addclose(&fa, in[i]);
      if (!err && out[i] > 1) err = posix_spawn_file_actions_addclose(&fa, out[i]);
    }
    char *args[] = {(char *)py, script, t->tmp_config, "--serve", "--threads", threads, "--warmup", warm, NULL};
    if (!err) err = posix_spawnp(&pid, py, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
  }
  if (err) {
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: cannot run %s: %s", py, strerror(err));
  }
  close(in[0]);
  close(out[1]);
  t->pid = pid;
  t->to = fdopen(in[1], "w");
  t->from = fdopen(out[0], "r");
  if (!t->to || !t->from) {  /* the raw end fdopen did not take is closed here, so the child sees EOF */
    if (!t->to) close(in[1]);
    if (!t->from) close(out[0]);
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: fdopen: %s", strerror(errno));
  }
  if (!fgets(t->info, sizeof t->info, t->from) || t->info[0] != '{') {
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: %s %s did not start (is python3-torch installed? see its messages above)",
                   py, script);
  }
  t->info[strcspn(t->info, "\n")] = 0;
  t->setup = json_loads(t->info, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(t->setup)) {
    cf_status st = CF_FAIL(CF_ERR_IO, "--vs-torch: %s did not describe its setup in JSON: %.200s", script, t->info);
    torch_stop(t);
    return st;
  }
  return CF_OK;
}

/* Run n timed torch steps; appends their times (seconds) to v. */
static cf_status torch_run(torch_child *t, int n, double *v, int *nv) {
  fprintf(t->to, "run %d\n", n);
  fflush(t->to);
  static char line[1 << 16];
  if (!fgets(line, sizeof line, t->from)) return CF_FAIL(CF_ERR_IO, "--vs-torch: torch_step.py stopped answering");
  json_t *answer = json_loads(line, 0, NULL), *times = json_object_get(answer, "times");  /* {"times": [s, ...]} */
  int ok = json_is_array(times) && json_array_size(times) == (size_t)n;
  for (int i = 0; ok && i < n; i++) {
    json_t *x = json_array_get(times, (size_t)i);
    ok = json_is_number(x);
    if (ok) v[(*nv)++] = json_number_value(x);
  }
  json_decref(answer);
  if (!ok) return CF_FAIL(CF_ERR_IO, "--vs-torch: unexpected answer from torch_step.py: %.200s", line);
  return CF_OK;
}

/* A field of the child's setup as text (a string as is, anything else as JSON), or "?". */
static void info_field(json_t *setup, const char *key, char *out, size_t n) {
  json_t *v = json_object_get(setup, key);
  char *text = json_is_string(v) ? NULL : v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  snprintf(out, n, "%s", json_is_string(v) ? json_string_value(v) : text ? text : "?");
  free(text);
}

/* ---------- clformer's step ---------- */

typedef struct stepper {
  cf_model *m;
  cl_mem acc;
  int *in, *tg;
  int N;
  float lr;
  int step;
} stepper;

static cf_status one_step(cf_context *ctx, stepper *s) {
  s->step++;
  CF_TRY(cf_train_step(s->m, s->in, s->tg, s->step, s->lr, cf_at(s->acc, 0)));
  return cf_context_finish(ctx);
}

static cf_status timed_steps(cf_context *ctx, stepper *s, int n, double *v, int *nv) {
  for (int i = 0; i < n; i++) {
    double t0 = cf_now();
    CF_TRY(one_step(ctx, s));
    v[(*nv)++] = cf_now() - t0;
  }
  return CF_OK;
}

static int is_gemm(const char *name) { return !strncmp(name, "gemm", 4) || !strncmp(name, "clblast", 7); }

/* {"median", "min", "max"} in ms, from seconds */
static json_t *ms_json(double med, double min, double max) {
  return json_pack("{s:o, s:o, s:o}", "median", cf_json_num(med * 1e3, "%.4f"), "min", cf_json_num(min * 1e3, "%.4f"),
                   "max", cf_json_num(max * 1e3, "%.4f"));
}

/* The report's "breakdown": per-step means of the profiled steps, one row per kernel name. */
static json_t *breakdown_json(const cf_profile_entry *ops, int nops, int psteps, double step_s, double dev, double gemm_ms) {
  json_t *rows = json_array();
  for (int i = 0; rows && i < nops; i++)
    if (json_array_append_new(rows, json_pack("{s:s, s:o, s:o, s:o}", "name", ops[i].name, "calls",
                                              cf_json_num((double)ops[i].calls / psteps, "%.2f"), "ms",
                                              cf_json_num(ops[i].ms, "%.4f"), "share",
                                              cf_json_num(ops[i].ms / dev, "%.4f")))) {
      json_decref(rows);
      rows = NULL;
    }
  if (!rows) return NULL;
  return json_pack("{s:i, s:o, s:o, s:o, s:o}", "steps", psteps, "step_ms", cf_json_num(step_s * 1e3, "%.4f"),
                   "device_ms", cf_json_num(dev, "%.4f"), "gemm_ms", cf_json_num(gemm_ms, "%.4f"), "ops", rows);
}

cf_status cf_bench_step(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *o, FILE *out,
                        json_t *report) {
  int steps = o->steps > 0 ? o->steps : 20, warmup = o->warmup >= 1 ? o->warmup : 1;
  int psteps = o->profile_steps > 0 ? o->profile_steps : 3;
  if (steps > MAX_STEPS) steps = MAX_STEPS;
  int B = cfg->data.batch_size, T = cfg->data.seq_len, N = B * T;
  const cf_device_info *d = cf_context_device(ctx);
  cf_gemm_impl gimpl = CF_GEMM_AUTO;
  CF_TRY(cf_gemm_resolve(ctx, CF_GEMM_AUTO, &gimpl));

  torch_child tc = {0};
  cf_status st = CF_OK;
  stepper s = {0};
  s.N = N;
  s.lr = (float)cfg->optim.lr;
  double *tv = malloc(sizeof(double) * 2 * MAX_STEPS), *cv = tv ? tv + MAX_STEPS : NULL;
  s.in = malloc(sizeof(int) * (size_t)N);
  s.tg = malloc(sizeof(int) * (size_t)N);
  cf_profile_entry *ops = calloc(MAX_OPS, sizeof *ops);
  if (!tv || !s.in || !s.tg || !ops) {
    st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    goto done;
  }
  unsigned long long x = 0x2545f4914f6cdd1dULL;  /* random tokens: speed does not depend on the text */
  for (int i = 0; i < N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.in[i] = (int)(x & 255);
    s.tg[i] = (int)((x >> 8) & 255);
  }
  double t_model0 = cf_now();
  if ((st = cf_model_create(ctx, &cfg->model, &cfg->optim, cfg->seed, B, T, &s.m)) != CF_OK) goto done;
  if ((st = cf_model_init(s.m, cfg->seed)) != CF_OK) goto done;
  if ((st = cf_buffer_create(ctx, 4, &s.acc)) != CF_OK) goto done;
  float zero = 0;
  if ((st = cf_write(ctx, cf_at(s.acc, 0), &zero, 1)) != CF_OK) goto done;
  if ((st = cf_context_finish(ctx)) != CF_OK) goto done;
  double t_model1 = cf_now();
  if ((st = one_step(ctx, &s)) != CF_OK) goto done;
  double t_first = cf_now();
  cf_cache_stats cache = cf_context_cache_stats(ctx);
  for (int i = 1; i < warmup && st == CF_OK; i++) st = one_step(ctx, &s);
  if (st != CF_OK) goto done;
  if (o->vs_torch) {  /* after our start-up, which it would otherwise slow down */
    st = torch_start(&tc, cfg, o);
    if (st != CF_OK) goto done;
  }

  size_t params = cf_model_num_params(s.m);
  double flops = cf_model_gemm_flops(cfg);
  char tuning[512];
  int tuned = cf_gemm_tune_summary(ctx, tuning, sizeof tuning);
  fprintf(out, "device: %s (%s, driver %s); GEMM: %s%s\n", d->name, d->platform_name, d->driver_version,
          cf_gemm_impl_name(gimpl), tuned ? " by default, and per shape what `clformer tune` measured faster" : "");
  fprintf(out, "model: %s-LN, %d layers, d_model %d, %d heads, d_ff %d, %s; %.2fM parameters; batch %d x %d = %d tokens\n",
          cfg->model.norm == CF_NORM_PRE ? "Pre" : "Post", cfg->model.layers, cfg->model.d_model, cfg->model.heads,
          cfg->model.d_ff, cfg->model.activation == 0 ? "relu" : cfg->model.activation == 1 ? "gelu" : "gelu_erf",
          params / 1e6, B, T, N);
  if (o->t_start > 0)
    fprintf(out, "start-up: context %.3f s, model %.3f s, first step %.3f s: %.3f s from the command's start to the end "
            "of the first step (kernel cache: %d hits, %d misses -> %s)\n",
            o->t_context - o->t_start, t_model1 - t_model0, t_first - t_model1, t_first - o->t_start, cache.hits,
            cache.misses, cache.misses ? "cold" : "warm");

  /* timed steps, interleaved with torch's in rounds */
  int nc = 0, nt = 0, rounds = o->vs_torch ? 5 : 1;
  for (int r = 0; r < rounds && st == CF_OK; r++) {
    int n = steps * (r + 1) / rounds - steps * r / rounds;
    if (o->vs_torch) pause_s(0.2);
    st = timed_steps(ctx, &s, n, cv, &nc);
    if (st == CF_OK && o->vs_torch) {
      pause_s(0.2);
      st = torch_run(&tc, n, tv, &nt);
    }
  }
  if (st != CF_OK) goto done;
  double cmin = cv[0], cmax = cv[0];
  for (int i = 0; i < nc; i++) {
    if (cv[i] < cmin) cmin = cv[i];
    if (cv[i] > cmax) cmax = cv[i];
  }
  double cmed = cf_median(cv, nc), tps = N / cmed, gfl = flops / cmed * 1e-9;
  fprintf(out, "\nstep time over %d steps after %d warm-up: median %.2f ms [min %.2f, max %.2f]\n", nc, warmup,
          cmed * 1e3, cmin * 1e3, cmax * 1e3);
  fprintf(out, "throughput: %.0f tokens/s, %.1f GFLOP/s (%.3f GFLOP per step in matrix products)\n", tps, gfl,
          flops * 1e-9);

  /* the per-operation breakdown */
  if (o->vs_torch) pause_s(0.2);
  cf_profile_start(ctx);
  double tp0 = cf_now();
  for (int i = 0; i < psteps && st == CF_OK; i++) st = one_step(ctx, &s);
  double prof_wall = (cf_now() - tp0) / psteps;
  int nops = cf_profile_collect(ctx, ops, MAX_OPS);
  if (st != CF_OK) goto done;
  double dev = 0, gemm_ms = 0;
  for (int i = 0; i < nops; i++) {
    ops[i].ms /= psteps;
    dev += ops[i].ms;
    if (is_gemm(ops[i].name)) gemm_ms += ops[i].ms;
  }
  if (nops == 0)
    fprintf(out, "\nno per-operation breakdown: the context was created without profiling\n");
  else {
    fprintf(out, "\nper operation (OpenCL profiling events, mean of %d steps; device time %.2f ms of a %.2f ms step):\n",
            psteps, dev, prof_wall * 1e3);
    fprintf(out, "  %-38s %8s %10s %7s\n", "kernel", "calls", "ms/step", "share");
    for (int i = 0; i < nops; i++)
      fprintf(out, "  %-38s %8.0f %10.3f %6.1f%%\n", ops[i].name, (double)ops[i].calls / psteps, ops[i].ms,
              100 * ops[i].ms / dev);
    fprintf(out, "  GEMM total %.2f ms (%.1f%%), everything else %.2f ms (%.1f%%)\n", gemm_ms, 100 * gemm_ms / dev,
            dev - gemm_ms, 100 * (dev - gemm_ms) / dev);
  }

  double tmed = NAN, tmin = NAN, tmax = NAN, ratio = NAN;
  char tver[64] = "", tthreads[32] = "", tobthreads[32] = "", tcore[64] = "", tblas[256] = "", tsettings[256] = "";
  if (o->vs_torch) {
    tmin = tmax = tv[0];
    for (int i = 0; i < nt; i++) {
      if (tv[i] < tmin) tmin = tv[i];
      if (tv[i] > tmax) tmax = tv[i];
    }
    tmed = cf_median(tv, nt);
    ratio = tmed / cmed;
    info_field(tc.setup, "torch_version", tver, sizeof tver);
    info_field(tc.setup, "threads", tthreads, sizeof tthreads);
    info_field(tc.setup, "openblas_core", tcore, sizeof tcore);
    info_field(tc.setup, "blas", tblas, sizeof tblas);
    info_field(tc.setup, "openblas_threads", tobthreads, sizeof tobthreads);
    info_field(tc.setup, "settings", tsettings, sizeof tsettings);
    fprintf(out, "\nPyTorch %s on the host CPU (%s threads, OpenBLAS %s threads; BLAS: %s; OpenBLAS core: %s), %d steps "
            "interleaved in %d rounds:\n  settings: %s\n  median %.2f ms [min %.2f, max %.2f], %.0f tokens/s\n", tver,
            tthreads, tobthreads, tblas, tcore, nt, rounds, tsettings, tmed * 1e3, tmin * 1e3, tmax * 1e3, N / tmed);
    fprintf(out, "clformer / torch speed: %.2fx (%s)\n", ratio, ratio >= 1 ? "clformer faster" : "torch faster");
  }
  fflush(out);

  if (report) {
    json_t *model = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I}", "norm",
                              cfg->model.norm == CF_NORM_PRE ? "pre" : "post", "layers", cfg->model.layers, "d_model",
                              cfg->model.d_model, "heads", cfg->model.heads, "d_ff", cfg->model.d_ff, "vocab", 256,
                              "seq_len", T, "batch_size", B, "params", (json_int_t)params);
    json_t *startup = o->t_start <= 0 ? json_null()
        : json_pack("{s:o, s:o, s:o, s:o, s:i, s:i}", "context_s", cf_json_num(o->t_context - o->t_start, "%.4f"),
                    "model_s", cf_json_num(t_model1 - t_model0, "%.4f"), "first_step_s",
                    cf_json_num(t_first - t_model1, "%.4f"), "total_s", cf_json_num(t_first - o->t_start, "%.4f"),
                    "cache_hits", cache.hits, "cache_misses", cache.misses);
    json_t *torch = !o->vs_torch ? json_null()
        : json_pack("{s:O, s:i, s:i, s:o, s:o, s:o}", "setup", tc.setup, "steps", nt, "rounds", rounds, "step_ms",
                    ms_json(tmed, tmin, tmax), "tokens_per_s", cf_json_num(N / tmed, "%.1f"), "clformer_vs_torch",
                    cf_json_num(ratio, "%.4f"));
    st = cf_json_set(report, "step",
                     json_pack("{s:o, s:s, s:i, s:i, s:o, s:o, s:I, s:o, s:o, s:o, s:o}", "model", model, "gemm",
                               cf_gemm_impl_name(gimpl), "warmup", warmup, "steps", nc, "step_ms",
                               ms_json(cmed, cmin, cmax), "tokens_per_s", cf_json_num(tps, "%.1f"), "flops_per_step",
                               (json_int_t)llround(flops), "gflops", cf_json_num(gfl, "%.3f"), "startup", startup,
                               "breakdown", breakdown_json(ops, nops, psteps, prof_wall, dev, gemm_ms), "torch", torch));
  }

done:
  if (tc.pid) {
    if (tc.to) {
      fprintf(tc.to, "quit\n");
      fflush(tc.to);
    }
    torch_stop(&tc);
  }
  if (s.acc) cf_buffer_free(s.acc);
  cf_model_free(s.m);
  free(s.in);
  free(s.tg);
  free(ops);
  free(tv);
  return st;
}
