/* The device self-test driver: GEMM and every row of the op table (src/check/op_table.c) against
 * the library's double references; and the cached verdict that `train` checks before using a device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/ref.h"
#include "clformer/check.h"
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "runtime/embedded.h"
#include "runtime/runtime.h"

static cf_status selftest_gemm(cf_context *ctx, cf_selftest *t) {
  const int M = 37, N = 29, K = 45;
  float *a = malloc(M * K * 4), *b = malloc(K * N * 4), *c = malloc(M * N * 4);
  double *ref = malloc(M * N * sizeof *ref);
  cl_mem da = NULL, db = NULL, dc = NULL;
  cf_status st = CF_OK;
  if (!a || !b || !c || !ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  for (int i = 0; i < M * K; i++) a[i] = cf_random_uniform(1, 2, 3, (uint32_t)i) - 0.5f;
  for (int i = 0; i < K * N; i++) b[i] = cf_random_uniform(1, 2, 4, (uint32_t)i) - 0.5f;
  for (int i = 0; i < M * N; i++) c[i] = NAN;
  ref_gemm(0, 1, M, N, K, 1.0, a, K, b, K, 0.0, ref, N);
  if ((st = cf_buffer_create(ctx, M * K * 4, &da)) || (st = cf_buffer_create(ctx, K * N * 4, &db)) ||
      (st = cf_buffer_create(ctx, M * N * 4, &dc)))
    goto done;
  if ((st = cf_write(ctx, cf_at(da, 0), a, M * K)) || (st = cf_write(ctx, cf_at(db, 0), b, K * N)) ||
      (st = cf_write(ctx, cf_at(dc, 0), c, M * N)))
    goto done;
  double t0 = cf_now();
  if ((st = cf_gemm(ctx, 0, 1, M, N, K, 1.0f, cf_at(da, 0), K, cf_at(db, 0), K, 0.0f, cf_at(dc, 0), N))) goto done;
  if ((st = cf_read(ctx, cf_at(dc, 0), c, M * N))) goto done;
  cf_selftest_check(t, "gemm", c, ref, M * N, 1e-5, 1e-4, 1e3 * (cf_now() - t0));
done:
  cf_buffer_free(da); cf_buffer_free(db); cf_buffer_free(dc);
  free(a); free(b); free(c); free(ref);
  return st;
}

cf_status cf_selftest_run(cf_context *ctx, cf_selftest *t) {
  memset(t, 0, sizeof *t);
  CF_TRY(selftest_gemm(ctx, t));
  for (int i = 0; i < cf_op_count(); i++) {  /* the op table's rows, each at its small case */
    const cf_op *op = cf_op_get(i);
    CF_TRY(cf_op_check(ctx, op, &op->check_dims, 3, cf_hash64(CF_HASH_SEED, op->name, strlen(op->name)), t));
  }
  return CF_OK;
}

int cf_selftest_failures(const cf_selftest *t) {
  int n = 0;
  for (int i = 0; i < t->n; i++) n += !t->rows[i].pass;
  return n;
}

void cf_selftest_print(const cf_selftest *t, FILE *f) {
  fprintf(f, "%-38s %11s %11s %11s %6s %9s\n", "op", "max error", "atol", "rtol", "", "time");
  for (int i = 0; i < t->n; i++) {
    const cf_selftest_row *r = &t->rows[i];
    fprintf(f, "%-38s %11.3g %11.3g %11.3g %6s %7.2f ms\n", r->op, r->max_err, r->atol, r->rtol, r->pass ? "pass" : "FAIL",
            r->ms);
  }
}

/* Where the verdict for this device, driver, clformer version and kernel sources is kept; 0 when
 * nowhere (no cache directory, or kernels read from $CLFORMER_KERNEL_DIR, which may change). */
static int verdict_path(cf_context *ctx, char *path, size_t n) {
  const cf_device_info *d = cf_context_device(ctx);
  unsigned long long h = CF_HASH_SEED;
  const char *parts[] = {d->name, d->driver_version, d->platform_version, d->device_version, CLFORMER_VERSION,
                         cf_program_defines(ctx)};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) h = cf_hash64(h, parts[i], strlen(parts[i]) + 1);
  for (const char *const *name = cf_program_names(); *name; name++) {
    char *src;
    if (cf_program_source(*name, &src) == CF_OK) { h = cf_hash64(h, src, strlen(src)); free(src); }
  }
  const char *dir = cf_cache_dir();
  if (!dir || getenv("CLFORMER_KERNEL_DIR")) return 0;
  snprintf(path, n, "%s/selftest-%016llx.txt", dir, h);
  return 1;
}

static int verdict_passed(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[16] = "";
  int ok = fgets(line, sizeof line, f) && !strncmp(line, "pass", 4);
  fclose(f);
  return ok;
}

void cf_selftest_record(cf_context *ctx, const cf_selftest *t) {
  char path[4200];
  if (cf_selftest_failures(t) || t->n == 0 || !verdict_path(ctx, path, sizeof path)) return;
  const char *dir = cf_cache_dir();
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* a cache that cannot be written costs the self-test's time next run, never this run */
  cf_status st = cf_mkdirs_private(dir);
  if (st == CF_OK) st = cf_write_file_atomic(path, "pass\n", 5);
  cf_set_verbosity(v);
  if (st == CF_OK) cf_cache_prune_default(dir);
  else cf_log(1, "note: the self-test's verdict is not cached: %s", cf_last_error());
  cf_clear_error();
}

cf_status cf_selftest_ensure(cf_context *ctx) {
  const cf_device_info *d = cf_context_device(ctx);
  char path[4200];
  if (verdict_path(ctx, path, sizeof path) && verdict_passed(path)) {
    cf_cache_touch(path);
    return CF_OK;
  }
  cf_log(1, "running the kernel self-test on %s (once per device and driver)...", d->name);
  cf_selftest t;
  CF_TRY(cf_selftest_run(ctx, &t));
  if (cf_selftest_failures(&t)) {
    cf_selftest_print(&t, stderr);
    char ops[1024] = "";
    for (int i = 0; i < t.n; i++)
      if (!t.rows[i].pass) snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", ops[0] ? ", " : "", t.rows[i].op);
    return CF_FAIL(CF_ERR_SELFTEST, "%s computes wrong results in: %s; refusing to train on it (see the table above, "
                   "and `clformer selftest`)", d->name, ops);
  }
  cf_selftest_record(ctx, &t);
  return CF_OK;
}
