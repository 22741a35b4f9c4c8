/* The PyTorch child of `bench step --vs-torch` (the method: the top of bench_step.c): tools/torch_step.py
 * started by posix_spawn on the resolved config, written to a temporary YAML file, answering a line
 * protocol on its stdin/stdout. */
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/base.h"
#include "bench/bench_internal.h"
#include "bench/bench_torch.h"

extern char **environ;

typedef cf_torch_child torch_child;

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

/* Closes the pipes, waits up to 5 s for the child to end (then ends it), removes the config file. */
static void torch_stop(torch_child *t) {
  if (t->to) fclose(t->to);
  if (t->from) fclose(t->from);
  if (t->pid > 0) {
    int status;
    pid_t r = 0;
    for (int i = 0; i < 50 && (r = waitpid(t->pid, &status, WNOHANG)) == 0; i++) cf_bench_pause(0.1);
    if (r == 0) {
      kill(t->pid, SIGTERM);
      waitpid(t->pid, &status, 0);
    }
  }
  if (t->tmp_config[0]) unlink(t->tmp_config);
  json_decref(t->setup);
  memset(t, 0, sizeof *t);
}

/* The resolved config into a temporary YAML file, t->tmp_config, for the child to build its model from. */
static cf_status write_temp_config(torch_child *t, const cf_config *cfg) {
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
  return CF_OK;
}

/* Starts `py script CONFIG --serve ...` with in[0] as its stdin and out[1] as its stdout; posix_spawn's
 * error number, 0 when started. posix_spawn, not fork: a forked copy of this process write-protects
 * every page of ours until the child has exec'd, and the first step after it then took 0.6 s more,
 * faulting each page of the model's buffers back in. */
static int spawn_child(torch_child *t, const char *py, char *script, const cf_bench_step_options *o, const int in[2],
                       const int out[2]) {
  char threads[32] = "0", warm[32];
  if (o->torch_threads > 0) snprintf(threads, sizeof threads, "%d", o->torch_threads);
  snprintf(warm, sizeof warm, "%d", o->warmup);
  posix_spawn_file_actions_t fa;
  int err = posix_spawn_file_actions_init(&fa);
  if (err) return err;
  err = posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  if (!err) err = posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  for (int i = 0; i < 2 && !err; i++) {
    if (in[i] > 1) err = posix_spawn_file_actions_addclose(&fa, in[i]);
    if (!err && out[i] > 1) err = posix_spawn_file_actions_addclose(&fa, out[i]);
  }
  char *args[] = {(char *)py, script, t->tmp_config, "--serve", "--threads", threads, "--warmup", warm, NULL};
  pid_t pid = 0;
  if (!err) err = posix_spawnp(&pid, py, &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (!err) t->pid = pid;
  return err;
}

/* The child started on two pipes, t->to its stdin and t->from its stdout. */
static cf_status start_child(torch_child *t, const char *py, char *script, const cf_bench_step_options *o) {
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
  int err = spawn_child(t, py, script, o, in, out);
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
  t->to = fdopen(in[1], "w");
  t->from = fdopen(out[0], "r");
  if (!t->to || !t->from) {  /* the raw end fdopen did not take is closed here, so the child sees EOF */
    if (!t->to) close(in[1]);
    if (!t->from) close(out[0]);
    torch_stop(t);
    return CF_FAIL(CF_ERR_IO, "--vs-torch: fdopen: %s", strerror(errno));
  }
  return CF_OK;
}

/* The child's first line: a JSON object describing its setup, into t->info and t->setup. */
static cf_status read_setup(torch_child *t, const char *py, const char *script) {
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

cf_status cf_torch_start(torch_child *t, const cf_config *cfg, const cf_bench_step_options *o) {
  memset(t, 0, sizeof *t);
  char script[PATH_MAX + 64];
  if (!find_script(o->torch_script, script, sizeof script))
    return CF_FAIL(CF_ERR_NOT_FOUND, "--vs-torch: cannot find tools/torch_step.py (give --torch-script PATH)");
  const char *py = python_path();
  CF_TRY(write_temp_config(t, cfg));
  CF_TRY(start_child(t, py, script, o));
  return read_setup(t, py, script);
}

cf_status cf_torch_run(torch_child *t, int n, double *v, int *nv) {
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

void cf_torch_setup_field(const torch_child *t, const char *key, char *out, size_t n) {
  json_t *v = json_object_get(t->setup, key);
  char *text = json_is_string(v) ? NULL : v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  snprintf(out, n, "%s", json_is_string(v) ? json_string_value(v) : text ? text : "?");
  free(text);
}

void cf_torch_quit(torch_child *t) {
  if (!t->pid) return;
  if (t->to) {
    fprintf(t->to, "quit\n");
    fflush(t->to);
  }
  torch_stop(t);
}
