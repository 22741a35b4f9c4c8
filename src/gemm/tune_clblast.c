/* `clformer tune`, step 1: CLBlast's own tuners from Debian's clblast-utils (when on PATH): its two
 * GEMM kernels (clblast_tuner_xgemm_direct, clblast_tuner_xgemm) and the helper kernels its indirect
 * GEMM runs around Xgemm (clblast_tuner_transpose_pad, _transpose_fast, _copy_pad, _copy_fast:
 * kernels Padtranspose, Transpose, Pad, Copy), each on this device for a product of the model's
 * size, over part of its search space, under a share of the wall-clock budget. A tuner that runs
 * out is stopped; the fastest verified configuration comes from its JSON when it wrote one, else
 * from the rows it printed. Progress and an ETA go to the run's progress stream while they run. */
#define _GNU_SOURCE  /* posix_spawn_file_actions_addchdir_np (glibc 2.29) */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "gemm/tune_internal.h"
#include "runtime/runtime.h"

extern char **environ;

/* One of CLBlast's tuners: its program, the prefix of the JSON files it writes, the kernel whose
 * parameters it finds, its share of the budget and of its search space (0: the user's fraction),
 * timed runs per configuration, and its problem size. */
typedef struct tuner_spec {
  const char *prog, *prefix, *kernel;
  double share, fraction;
  int runs;
  size_t m, n, k;
} tuner_spec;

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

/* ---------- the tuner's printed table ---------- */

/* The fastest verified configuration a tuner printed so far: a tuner writes its JSON only when it
 * finishes (xgemm: each of its two kernel variants), so one stopped at its budget still leaves this.
 * Names come from its "* Parameters explored:" line, values from the param column of each
 * "results match" row, in the same order. */
typedef struct tuner_best {
  char names[CF_TUNING_MAX_PARAMS][CF_TUNING_NAME];
  int nnames;
  double ms;
  cf_tuning_clblast line;  /* its kernel set before the tuner runs */
} tuner_best;

static void parse_explored(tuner_best *b, const char *list) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", list);
  char *save = NULL;
  b->nnames = 0;
  for (char *w = strtok_r(tmp, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
    if (b->nnames == CF_TUNING_MAX_PARAMS || strlen(w) >= CF_TUNING_NAME) {  /* not a list we understand */
      b->nnames = 0;
      return;
    }
    snprintf(b->names[b->nnames++], sizeof b->names[0], "%s", w);
  }
}

static void parse_tuner_line(tuner_best *b, const char *line) {
  const char *ex = strstr(line, "Parameters explored:");
  if (ex) {
    parse_explored(b, ex + 20);
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
  cf_tuning_clblast c = {.nparams = 0};
  snprintf(c.kernel, sizeof c.kernel, "%s", b->line.kernel);
  const char *p = f[2];
  for (int i = 0; i < b->nnames; i++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || end > f[3] || v < 0) return;  /* fewer values than names: not a row we understand */
    if (!cf_tuning_clblast_add(&c, b->names[i], (size_t)v)) return;
    p = end;
  }
  b->ms = ms;
  b->line = c;
}

/* Hand each whole line in buf (*used bytes, NUL-terminated) to the parser, keeping the unfinished
 * rest at its start (a full buffer without a newline counts as a line); the number of timed
 * configurations among them. */
static int take_lines(char *buf, size_t *used, size_t cap, tuner_best *best) {
  int configs = 0;
  char *nl;
  while ((nl = strchr(buf, '\n')) || *used == cap - 1) {
    if (!nl) nl = buf + *used - 1;
    *nl = 0;
    int id;
    if (sscanf(buf, "| %d |", &id) == 1 && strstr(buf, " ms |")) configs++;  /* a timed configuration */
    parse_tuner_line(best, buf);
    *used -= (size_t)(nl + 1 - buf);
    memmove(buf, nl + 1, *used + 1);
  }
  return configs;
}

/* ---------- running one tuner ---------- */

/* Start one tuner in dir, in its own process group (so the budget's SIGTERM reaches what it
 * starts), its stdout and stderr into fd[1]; its pid, or 0 when it cannot be started (logged). */
static pid_t spawn_tuner(const cf_context *ctx, const tuner_spec *t, double fraction, const char *dir, int fd[2]) {
  char sp[16], sd[16], sm[32], sn[32], sk[32], sf[32], sr[16];
  snprintf(sp, sizeof sp, "%d", ctx->info.platform_index);
  snprintf(sd, sizeof sd, "%d", ctx->info.device_index);
  snprintf(sm, sizeof sm, "%zu", t->m);
  snprintf(sn, sizeof sn, "%zu", t->n);
  snprintf(sk, sizeof sk, "%zu", t->k);
  snprintf(sf, sizeof sf, "%g", fraction);
  snprintf(sr, sizeof sr, "%d", t->runs);
  /* posix_spawn rather than fork: no copy of this multi-threaded process (PoCL's workers) whose
   * pages stay write-protected until the exec */
  int buffered = on_path("stdbuf");  /* its progress arrives as it happens, not when a pipe buffer fills */
  char *args[] = {"stdbuf", "-oL", (char *)t->prog, "-platform", sp, "-device", sd, "-precision", "32", "-m", sm,
                  "-n", sn, "-k", sk, "-fraction", sf, "-runs", sr, NULL};
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
      if (!err)
        err = posix_spawnp(&pid, buffered ? args[0] : t->prog, &fa, &at, buffered ? args : args + 2, environ);
      posix_spawnattr_destroy(&at);
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  if (err) {
    cf_log(0, "tune: cannot run %s: %s", t->prog, strerror(err));
    return 0;
  }
  return pid;
}

static void show_progress(const cf_tune_run *run, const char *prog, int configs, double now) {
  char el[16], left[16];
  cf_tune_fmt_time(now - run->t0, el, sizeof el);
  cf_tune_fmt_time(run->budget - (now - run->t0), left, sizeof left);
  cf_tune_say(run->progress, "%s  %s: %d configurations tried, %s elapsed, at most %s left%s", run->tty ? "\r" : "",
              prog, configs, el, left, run->tty ? "   " : "\n");
  cf_tune_flush(run->progress);
}

/* Read a started tuner's output until it ends: count the configurations it timed, keep its fastest
 * verified one in *best, show progress (each second on a terminal, else every 15 s), and stop it
 * once it has run `budget` seconds. The number of configurations; *stopped: the budget stopped it. */
static int follow_tuner(const cf_tune_run *run, const char *prog, int fd, pid_t pid, double budget, tuner_best *best,
                        int *stopped) {
  double start = cf_now(), last = 0;
  int configs = 0, open_ = 1;
  char buf[4096];
  size_t used = 0;
  *stopped = 0;
  while (open_) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) > 0) {  /* at least once a second: the progress line below */
      ssize_t r = read(fd, buf + used, sizeof buf - 1 - used);
      if (r <= 0) open_ = 0;
      else used += (size_t)r;
      buf[used] = 0;
      configs += take_lines(buf, &used, sizeof buf, best);
    }
    double now = cf_now();
    if (now - last >= (run->tty ? 1.0 : 15.0)) {
      show_progress(run, prog, configs, now);
      last = now;
    }
    if (!*stopped && now - start > budget) {
      kill(-pid, SIGTERM);
      kill(pid, SIGTERM);
      *stopped = 1;
    }
  }
  return configs;
}

/* Run one tuner in dir under its share of the budget, keeping its fastest printed configuration in
 * *best. */
static void run_tuner(const cf_tune_run *run, const tuner_spec *t, double fraction, const char *dir,
                      tuner_best *best) {
  int fd[2];
  if (pipe(fd)) return;
  cf_tune_flush(run->report);  /* what was reported comes before the tuner's progress */
  cf_tune_flush(run->progress);
  pid_t pid = spawn_tuner(run->ctx, t, fraction, dir, fd);
  close(fd[1]);
  if (!pid) {
    close(fd[0]);
    return;
  }
  double start = cf_now();
  int stopped;
  int configs = follow_tuner(run, t->prog, fd[0], pid, run->budget * t->share, best, &stopped);
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  cf_tune_say(run->progress, "%s  %s: %d configurations tried in %.0f s%s\n", run->tty ? "\r" : "", t->prog, configs,
              cf_now() - start, stopped ? " (stopped at its budget)" : "");
}

/* ---------- the tuner's JSON files ---------- */

/* A result's "parameters" object ({"NAME": value, ...}) as a `clblast` line for kernel, PRECISION
 * left out (the tuner's, not a kernel parameter CLBlast takes); 0 when it is not one. */
static int line_from_json(json_t *params, const char *kernel, cf_tuning_clblast *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->kernel, sizeof out->kernel, "%s", kernel);
  const char *name;
  json_t *v;
  json_object_foreach(params, name, v) {
    if (!strcmp(name, "PRECISION")) continue;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        !cf_tuning_clblast_add(out, name, (size_t)json_integer_value(v)))
      return 0;
  }
  return out->nparams > 0;
}

/* The fastest result in one tuner JSON file into *out, when faster than *best_ms (updated). CLBlast
 * lists only the configurations that ran and verified under "results": {"kernel", "time" (ms),
 * "parameters": {...}}. */
static int best_in_json(const char *path, const char *kernel, cf_tuning_clblast *out, double *best_ms) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) {
    cf_log(2, "note: %s:%d: %s; its results are not used", path, err.line, err.text);
    return 0;
  }
  json_t *r;
  size_t i;
  int found = 0;
  json_array_foreach(json_object_get(root, "results"), i, r) {
    json_t *time = json_object_get(r, "time"), *params = json_object_get(r, "parameters");
    double ms = json_number_value(time);
    cf_tuning_clblast line;
    if (json_is_number(time) && ms > 0 && ms < *best_ms && json_is_object(params) &&
        line_from_json(params, kernel, &line)) {
      *out = line;
      *best_ms = ms;
      found = 1;
    }
  }
  json_decref(root);
  return found;
}

/* From the tuner JSON files in dir of one family (prefix "clblast_xgemm_direct_" or "clblast_xgemm_"),
 * the fastest result as a `clblast` line for kernel, its time in *best_ms; 0 when there is none. */
static int best_of(const char *dir, const char *prefix, const char *kernel, cf_tuning_clblast *out, double *best_ms) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int found = 0;
  size_t pl = strlen(prefix);
  *best_ms = INFINITY;
  while ((e = readdir(d))) {
    const char *name = e->d_name;
    /* clblast_xgemm_1_32.json is xgemm's, clblast_xgemm_direct_1_32.json xgemm_direct's */
    if (strncmp(name, prefix, pl) || !(name[pl] >= '0' && name[pl] <= '9') || !strstr(name, "_32.json")) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    found |= best_in_json(path, kernel, out, best_ms);
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

/* ---------- all of them ---------- */

/* Run one tuner in a fresh directory and add its best configuration to tf. */
static cf_status tune_one(const cf_tune_run *run, const tuner_spec *t, double user_fraction, cf_tuning_file *tf) {
  if (!on_path(t->prog)) {
    cf_tune_say(run->report, "  %s not found (Debian: apt install clblast-utils); skipped\n", t->prog);
    return CF_OK;
  }
  char dir[] = "/tmp/clformer-tune-XXXXXX";
  if (!mkdtemp(dir)) return CF_FAIL(CF_ERR_IO, "tune: mkdtemp: %s", strerror(errno));
  tuner_best best = {.ms = INFINITY};
  snprintf(best.line.kernel, sizeof best.line.kernel, "%s", t->kernel);
  run_tuner(run, t, t->fraction > 0 ? t->fraction : user_fraction, dir, &best);
  cf_tuning_clblast line;
  double ms;
  const char *from = "its results file";
  if (!best_of(dir, t->prefix, t->kernel, &line, &ms)) ms = INFINITY;
  /* its output when it stopped before writing a file, or (xgemm) did better in a later variant than
   * the one it wrote; the table shows 0.01 ms steps, so a row only as fast as the file's best
   * (rounded so) leaves the file's */
  if (best.ms < round(ms * 100) / 100) {
    line = best.line;
    ms = best.ms;
    from = "its output";
  }
  cf_status st = CF_OK;
  if (isfinite(ms) && ms > 0) {
    char text[CF_TUNING_LINE];
    cf_tuning_clblast_format(&line, text, sizeof text);
    cf_tune_say(run->report, "  best %s: %.3f ms (from %s): %s\n", t->kernel, ms, from, text);
    st = cf_tuning_file_add_clblast(tf, &line);
  } else
    cf_tune_say(run->report, "  %s finished no kernel variant within its budget; CLBlast keeps its defaults\n",
                t->prog);
  rm_dir(dir);
  cf_tune_flush(run->report);
  return st;
}

cf_status cf_tune_clblast_tuners(const cf_tune_run *run, const cf_tune_options *o, cf_tuning_file *tf) {
  /* 68% of the budget: CLBlast's two GEMM kernels (direct first: small products use it by
   * default), then the helper kernels its indirect GEMM runs around Xgemm (pad and/or transpose the
   * operands into temporaries; Padtranspose does most of that work here). The GEMM tuners search a
   * fraction of their large spaces; the helpers' spaces are small (34-144 configurations) and get a
   * fixed share. Problem sizes are the model's: m = C, n = min(B*T, 1024) tokens, k = C (with
   * operands swapped to column-major, as gemm.c calls CLBlast): the winner at a smaller size need
   * not be the best for the model's 1024-row products. Each configuration is timed 3 times (the
   * tuners keep the fastest): with one run each, on a shared machine, a lucky timing can pick the
   * winner. */
  size_t C = o->width, tn = o->rows < 1024 ? o->rows : 1024;
  double user_fraction = o->fraction > 0 ? o->fraction : 0.005;
  const tuner_spec tuners[] = {
      {"clblast_tuner_xgemm_direct", "clblast_xgemm_direct_", "XgemmDirect", 0.12, 0, 3, C, tn, C},
      {"clblast_tuner_xgemm", "clblast_xgemm_", "Xgemm", 0.36, 0, 3, C, tn, C},
      {"clblast_tuner_transpose_pad", "clblast_padtranspose_", "Padtranspose", 0.07, 0.6, 3, tn, C, 1},
      {"clblast_tuner_transpose_fast", "clblast_transpose_", "Transpose", 0.03, 1.0, 3, C, C, 1},  /* square only */
      {"clblast_tuner_copy_pad", "clblast_pad_", "Pad", 0.05, 0.6, 3, tn, C, 1},
      {"clblast_tuner_copy_fast", "clblast_copy_", "Copy", 0.05, 0.5, 3, tn, C, 1}};
  for (size_t i = 0; i < sizeof tuners / sizeof *tuners; i++) CF_TRY(tune_one(run, &tuners[i], user_fraction, tf));
  return CF_OK;
}
