/* The automatic GEMM choice measured on the device (src/gemm/calibrate.c), in a cache directory of
 * its own: the first automatic product of a class measures both implementations and stores the
 * verdict, which follows the rule (ours unless over 10% slower); a second context takes it from the
 * file without measuring; a verdict in the file is what runs (seen in the profiling events' kernel
 * names, both ways); $CLFORMER_GEMM=own|clblast and a forced implementation measure nothing; a file
 * that does not parse is measured anew and replaced; a second class is added beside the first;
 * the cache's pruning counts the file as its own. Every product's result is checked too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/base.h"
#include "testutil.h"

static char path[4200];

static cf_context *profiled_context(void) {
  cf_context_options o = {NULL, 1};
  cf_context *ctx = NULL;
  cf_status st = cf_context_create(&o, &ctx);
  if (st == CL_PLATFORM_NOT_FOUND_KHR) exit(TEST_SKIP);
  if (st != CF_OK) {
    fprintf(stderr, "FAIL: cannot open an OpenCL device: %s\n", cf_status_str(st));
    exit(1);
  }
  return ctx;
}

/* C = A B^T (24 x 40, K 16, class NT single small) or a batch of 3 of them (NT batched small), with
 * impl; the result against the product computed here. *kernel: the first GEMM kernel the profiling
 * events name ("clblast..." or "gemm_..."). */
static void product(cf_context *ctx, cf_gemm_impl impl, size_t batch, char *kernel, size_t n) {
  enum { M = 24, N = 40, K = 16 };
  float a[3 * M * K], b[3 * N * K], c[3 * M * N];
  test_rng r = test_rng_seed(7);
  test_fill_uniform(&r, a, batch * M * K, -1, 1);
  test_fill_uniform(&r, b, batch * N * K, -1, 1);
  cl_mem dA = test_buffer(ctx, a, batch * M * K), dB = test_buffer(ctx, b, batch * N * K);
  cl_mem dC = test_buffer(ctx, NULL, batch * M * N);
  cf_profile_start(ctx);
  TEST_OK(cf_gemm_batched_with(ctx, impl, 0, 1, M, N, K, 1.0f, cf_at(dA, 0), K, M * K, cf_at(dB, 0), K, N * K, 0.0f,
                               cf_at(dC, 0), N, M * N, batch));
  cf_profile_entry e[16];
  int ne = cf_profile_collect(ctx, e, 16);
  snprintf(kernel, n, "%s", "none");
  for (int i = 0; i < ne; i++)
    if (!strncmp(e[i].name, "gemm", 4) || !strncmp(e[i].name, "clblast", 7)) snprintf(kernel, n, "%.40s", e[i].name);
  TEST_OK(cf_read(ctx, cf_at(dC, 0), c, batch * M * N));
  double worst = 0;
  for (size_t p = 0; p < batch; p++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double want = 0;
        for (int k = 0; k < K; k++) want += (double)a[p * M * K + i * K + k] * b[p * N * K + j * K + k];
        double err = fabs(c[p * M * N + i * N + j] - want);
        if (!(err <= worst)) worst = err;
      }
  TEST_ASSERT(worst < 1e-4, "%s product off by %g", kernel, worst);
  cf_buffer_free(dA);
  cf_buffer_free(dB);
  cf_buffer_free(dC);
}

static int is_clblast(const char *kernel) { return !strncmp(kernel, "clblast", 7); }

/* The verdict file's text (NULL when there is none). */
static char *file_text(void) {
  char *t = NULL;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = cf_read_file(path, &t, NULL);
  cf_set_verbosity(v);
  cf_clear_error();
  return st == CF_OK ? t : NULL;
}

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  TEST_ASSERT(f != NULL, "cannot write %s", path);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* The line of class `name` follows the rule: "own" exactly when ours took at most 1.1x CLBlast's time. */
static void check_rule(const char *text, const char *name) {
  const char *l = text ? strstr(text, name) : NULL;
  TEST_ASSERT(l != NULL, "no '%s' verdict in the file:\n%s", name, text ? text : "(none)");
  if (!l) return;
  char impl[16] = "";
  double own = 0, clb = 0;
  int got = sscanf(l + strlen(name), " %15s %lf %lf", impl, &own, &clb);
  TEST_ASSERT(got == 3 && own > 0 && clb > 0, "malformed verdict line for %s", name);
  TEST_ASSERT(!strcmp(impl, own <= 1.1 * clb ? "own" : "clblast"), "%s: %s with ours %g ms, CLBlast %g ms", name, impl,
              own, clb);
  printf("%s: %s (ours %.4g ms, CLBlast %.4g ms a call)\n", name, impl, own, clb);
}

/* First context measures and stores; the second reads; a stored verdict is what runs, both ways. */
static void check_cached_and_honoured(void) {
  char k[48];
  cf_context *ctx = profiled_context();
  TEST_ASSERT(cf_gemm_calib_path(ctx, path, sizeof path), "no verdict file path with a cache directory");
  product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
  cf_gemm_calib_stats s = cf_gemm_calib_stats_of(ctx);
  TEST_ASSERT(s.measured == 1 && s.loaded == 0 && s.seconds > 0, "first context: measured %d, loaded %d", s.measured,
              s.loaded);
  char *t = file_text();
  TEST_ASSERT(t && !strncmp(t, "clformer-gemm-calibration 1\n", 28), "verdict file missing or without its header");
  check_rule(t, "NT single small");
  int stored_clblast = t && strstr(t, "NT single small clblast") != NULL;
  TEST_ASSERT(is_clblast(k) == stored_clblast, "the product ran on %s against the verdict just stored", k);
  free(t);
  cf_context_free(ctx);

  ctx = profiled_context();
  product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
  s = cf_gemm_calib_stats_of(ctx);
  TEST_ASSERT(s.measured == 0 && s.loaded >= 1 && s.seconds == 0, "second context measured %d classes", s.measured);
  cf_context_free(ctx);

  const char *verdicts[2] = {"NT single small own 1 9\n", "NT single small clblast 9 1\n"};
  for (int i = 0; i < 2; i++) {
    char text[256];
    snprintf(text, sizeof text, "clformer-gemm-calibration 1\n# written by the test\n%s", verdicts[i]);
    write_file(text);
    ctx = profiled_context();
    product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
    TEST_ASSERT(is_clblast(k) == i, "stored verdict '%.*s' but %s ran", (int)strlen(verdicts[i]) - 1, verdicts[i], k);
    TEST_ASSERT(cf_gemm_calib_stats_of(ctx).measured == 0, "a stored verdict was measured again");
    cf_context_free(ctx);
  }
}

/* $CLFORMER_GEMM and a forced implementation win over any verdict and measure nothing. */
static void check_forced(void) {
  char k[48];
  write_file("clformer-gemm-calibration 1\nNT single small clblast 9 1\nNT batched small own 1 9\n");
  setenv("CLFORMER_GEMM", "own", 1);
  cf_context *ctx = profiled_context();
  product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
  TEST_ASSERT(!is_clblast(k), "CLFORMER_GEMM=own ran %s", k);
  setenv("CLFORMER_GEMM", "clblast", 1);
  product(ctx, CF_GEMM_AUTO, 3, k, sizeof k);
  TEST_ASSERT(is_clblast(k), "CLFORMER_GEMM=clblast ran %s", k);
  unsetenv("CLFORMER_GEMM");
  product(ctx, CF_GEMM_OWN, 1, k, sizeof k);
  TEST_ASSERT(!is_clblast(k), "forced own ran %s", k);
  product(ctx, CF_GEMM_CLBLAST, 3, k, sizeof k);
  TEST_ASSERT(is_clblast(k), "forced CLBlast ran %s", k);
  cf_gemm_calib_stats s = cf_gemm_calib_stats_of(ctx);
  TEST_ASSERT(s.measured == 0 && s.loaded == 0, "forced choices consulted the calibration (%d measured, %d loaded)",
              s.measured, s.loaded);
  cf_context_free(ctx);
  unlink(path);
  setenv("CLFORMER_GEMM", "own", 1);
  ctx = profiled_context();
  product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
  TEST_ASSERT(access(path, F_OK) != 0, "CLFORMER_GEMM=own wrote a verdict file");
  unsetenv("CLFORMER_GEMM");
  cf_context_free(ctx);
}

/* A file that does not parse is measured anew and replaced by one that does; a second class joins it. */
static void check_rebuilt(void) {
  const char *bad[] = {"clformer-gemm-calibration 1\nNT single small fastest 1 2\n",
                       "clformer-gemm-calibration 1\nNT single small own 1\n", "\x7f""ELF garbage\n",
                       "clformer-gemm-calibration 1\nNT single tiny own 1 2\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_file(bad[i]);
    char k[48];
    cf_context *ctx = profiled_context();
    product(ctx, CF_GEMM_AUTO, 1, k, sizeof k);
    cf_gemm_calib_stats s = cf_gemm_calib_stats_of(ctx);
    TEST_ASSERT(s.measured == 1 && s.rebuilt == 1 && s.loaded == 0, "bad file %zu: measured %d, rebuilt %d", i,
                s.measured, s.rebuilt);
    if (i == 0) {  /* a second class: added to the file beside the first */
      product(ctx, CF_GEMM_AUTO, 3, k, sizeof k);
      TEST_ASSERT(cf_gemm_calib_stats_of(ctx).measured == 2, "a batched product did not measure its own class");
    }
    char *t = file_text();
    TEST_ASSERT(t && !strncmp(t, "clformer-gemm-calibration 1\n", 28), "bad file %zu not replaced", i);
    check_rule(t, "NT single small");
    if (i == 0) check_rule(t, "NT batched small");
    free(t);
    cf_context_free(ctx);
  }
}

/* The cache prunes the verdict file as its own entry (it is keyed like the binaries), never a tuning file. */
static void check_pruned(const char *dir) {
  char tune[4300];
  snprintf(tune, sizeof tune, "%s/gemm-tune-0123456789abcdef.txt", dir);
  FILE *f = fopen(tune, "w");
  if (f) fclose(f);
  TEST_ASSERT(access(path, F_OK) == 0, "no verdict file to prune");
  cf_cache_prune(dir, 60, 0);
  TEST_ASSERT(access(path, F_OK) != 0, "pruning to 0 bytes left the verdict file");
  TEST_ASSERT(access(tune, F_OK) == 0, "pruning removed a tuning file");
  unlink(tune);
}

int main(void) {
  char dir[] = "/tmp/clformer-test-calib-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
  setenv("CLFORMER_CACHE_DIR", dir, 1);
  setenv("CLFORMER_TUNE", "off", 1);
  unsetenv("CLFORMER_GEMM");
  check_cached_and_honoured();
  check_forced();
  check_rebuilt();
  check_pruned(dir);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  TEST_ASSERT(system(cmd) == 0, "cannot remove %s", dir);
  return test_finish("test_gemm_calib");
}
