/* Kernel loader: a good kernel computes, a bad one reports its build log, the disk cache hits,
 * rejects and replaces corrupt entries, can be turned off, and CLFORMER_KERNEL_DIR overrides
 * the embedded sources (with #include of .clh headers), and old entries are pruned by age and
 * total size without touching other files. Also the error-reporting macro. */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"

static const char *good_src =
    "__kernel void axpb(__global float *y, uint y_off, __global const float *x, uint x_off, float a, float b, int n) {\n"
    "  int i = get_global_id(0);\n"
    "  if (i < n) y[y_off + i] = a * x[x_off + i] + b + (float)CF_WG * 0.0f;\n"
    "}\n";

static const char *bad_src =
    "__kernel void broken(__global float *y) {\n"
    "  y[0] = undeclared_identifier_42;\n"
    "}\n";

/* The one .bin file in dir (the test writes one program per fresh directory). */
static int find_bin(const char *dir, char *path, size_t n) {
  DIR *d = opendir(dir);
  int found = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, ".bin") && !strstr(e->d_name, ".tmp")) {
      snprintf(path, n, "%s/%s", dir, e->d_name);
      found++;
    }
  if (d) closedir(d);
  return found;
}

/* Creates dir/name with `bytes` bytes, last modified `age_s` seconds ago. */
static void make_entry(const char *dir, const char *name, int bytes, double age_s) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  TEST_ASSERT(f != NULL, "create %s", path);
  for (int i = 0; i < bytes; i++) fputc('x', f);
  fclose(f);
  struct timespec t[2];
  t[0].tv_sec = t[1].tv_sec = time(NULL) - (time_t)age_s;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  TEST_ASSERT(utimensat(AT_FDCWD, path, t, 0) == 0, "utimensat %s", path);
}

static int exists(const char *dir, const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

static double mtime_age(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? difftime(time(NULL), st.st_mtime) : -1;
}

/* Pruning: by age first, then least recently used down to the size limit; foreign files stay. */
static void check_prune(void) {
  char dir[] = "/tmp/clformer-test-prune-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  const double day = 86400;
  const char *hex32 = "0123456789abcdef0123456789abcdef";
  char old_bin[64], fresh_bin[64], mid_bin[64], new_bin[64], old_tmp[80], new_tmp[80];
  snprintf(old_bin, sizeof old_bin, "layernorm-%s.bin", hex32);
  snprintf(fresh_bin, sizeof fresh_bin, "gemm-%s.bin", hex32);
  snprintf(mid_bin, sizeof mid_bin, "attention-%s.bin", hex32);
  snprintf(new_bin, sizeof new_bin, "dropout-%s.bin", hex32);
  snprintf(old_tmp, sizeof old_tmp, "residual-%s.bin.tmp.1234", hex32);
  snprintf(new_tmp, sizeof new_tmp, "embedding-%s.bin.tmp.1235", hex32);
  make_entry(dir, old_bin, 100, 100 * day);
  make_entry(dir, "selftest-0123456789abcdef.txt", 5, 100 * day);
  make_entry(dir, fresh_bin, 1000, 3 * 3600);
  make_entry(dir, mid_bin, 1000, 2 * 3600);
  make_entry(dir, new_bin, 1000, 1 * 3600);
  make_entry(dir, old_tmp, 10, 2 * 3600);
  make_entry(dir, new_tmp, 10, 60);
  /* not ours: kept whatever their age */
  make_entry(dir, "notes.txt", 10, 400 * day);
  make_entry(dir, "gemm-tuning-abc.txt", 10, 400 * day);
  make_entry(dir, "layernorm-0123.bin", 10, 400 * day);
  make_entry(dir, "selftest-0123456789ABCDEF.txt", 10, 400 * day);

  int removed = cf_cache_prune(dir, 60, 1u << 20);
  TEST_ASSERT(removed == 3, "age pruning removed %d entries, expected 3 (old binary, old verdict, stale tmp)", removed);
  TEST_ASSERT(!exists(dir, old_bin) && !exists(dir, "selftest-0123456789abcdef.txt") && !exists(dir, old_tmp),
              "expired entries must go");
  TEST_ASSERT(exists(dir, fresh_bin) && exists(dir, mid_bin) && exists(dir, new_bin) && exists(dir, new_tmp),
              "recent entries must stay");
  /* size: 3010 bytes of entries, limit 1500: the two least recently used go */
  removed = cf_cache_prune(dir, 60, 1500);
  TEST_ASSERT(removed == 2 && !exists(dir, fresh_bin) && !exists(dir, mid_bin) && exists(dir, new_bin) &&
                  exists(dir, new_tmp), "size pruning removed %d, expected the 2 oldest", removed);
  TEST_ASSERT(exists(dir, "notes.txt") && exists(dir, "gemm-tuning-abc.txt") && exists(dir, "layernorm-0123.bin") &&
                  exists(dir, "selftest-0123456789ABCDEF.txt"), "files that are not cache entries must stay");
  TEST_ASSERT(cf_cache_prune("/nonexistent/clformer-dir", 0, 0) == 0, "a missing directory prunes nothing");
  const char *rest[] = {new_bin, new_tmp, "notes.txt", "gemm-tuning-abc.txt", "layernorm-0123.bin",
                        "selftest-0123456789ABCDEF.txt"};
  for (size_t i = 0; i < sizeof rest / sizeof *rest; i++) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, rest[i]);
    unlink(path);
  }
  TEST_ASSERT(rmdir(dir) == 0, "prune test left files in %s", dir);
}

static double build_once(const char *src, cf_cache_stats *stats) {
  cf_context *ctx = test_context();  /* a fresh context: nothing held in memory */
  cl_program p;
  double t0 = test_now();
  TEST_OK(cf_program_build_source(ctx, "axpb", src, &p));
  double ms = 1e3 * (test_now() - t0);
  clReleaseProgram(p);
  *stats = cf_context_cache_stats(ctx);
  cf_context_free(ctx);
  return ms;
}

static void check_axpb(cf_context *ctx, cl_program p) {
  cl_int err;
  cl_kernel k = clCreateKernel(p, "axpb", &err);
  TEST_OK(err);
  int n = 1000;
  test_rng r = test_rng_seed(7);
  float *x = malloc(n * sizeof *x);
  test_fill_uniform(&r, x, n, -1, 1);
  cl_mem bx = test_buffer(ctx, x, n), by = test_buffer(ctx, NULL, n + 5);
  cl_uint yoff = 5, xoff = 0;
  float a = 3, b = -1;
  clSetKernelArg(k, 0, sizeof(cl_mem), &by);
  clSetKernelArg(k, 1, sizeof yoff, &yoff);
  clSetKernelArg(k, 2, sizeof(cl_mem), &bx);
  clSetKernelArg(k, 3, sizeof xoff, &xoff);
  clSetKernelArg(k, 4, sizeof a, &a);
  clSetKernelArg(k, 5, sizeof b, &b);
  clSetKernelArg(k, 6, sizeof n, &n);
  size_t g = 1024, l = 64;
  TEST_OK(clEnqueueNDRangeKernel(cf_context_queue(ctx), k, 1, NULL, &g, &l, 0, NULL, NULL));
  float *y = test_read(ctx, cf_at(by, 5), n);
  double *ref = malloc(n * sizeof *ref);
  for (int i = 0; i < n; i++) ref[i] = 3.0 * x[i] - 1.0;
  test_compare("axpb", y, ref, n, 1e-6, 1e-6);
  free(x); free(y); free(ref);
  cf_buffer_free(bx); cf_buffer_free(by);
  clReleaseKernel(k);
}

/* Work-group sizes and local memory past what the device allows are refused before the driver sees
 * them, naming the kernel, the size and the limit queried (CL_DEVICE_MAX_WORK_ITEM_SIZES,
 * CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_LOCAL_MEM_SIZE); a group of the kernel's own
 * CL_KERNEL_WORK_GROUP_SIZE runs. */
static void check_limits(cf_context *ctx) {
  const cf_device_info *d = cf_context_device(ctx);
  size_t items[3] = {0}, kwg = 0;
  TEST_OK(clGetDeviceInfo(d->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL));
  cl_kernel k;
  TEST_OK(cf_kernel_get(ctx, "elementwise", "fill", &k));
  TEST_OK(clGetKernelWorkGroupInfo(k, d->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL));
  cl_mem b = test_buffer(ctx, NULL, 2 * kwg);
  TEST_ASSERT(items[0] >= d->max_work_group && items[1] >= 2, "device work-item sizes %zu x %zu", items[0], items[1]);
  struct { size_t local[2]; cl_uint dims; const char *limit; } cases[] = {
      {{items[0] + 1, 1}, 1, "CL_DEVICE_MAX_WORK_ITEM_SIZES"},
      {{d->max_work_group, 2}, 2, "CL_DEVICE_MAX_WORK_GROUP_SIZE"}};
  for (int i = 0; i < 2; i++) {
    cf_launch L;
    cf_launch_begin(&L, ctx, "elementwise", "fill");
    cf_arg_mem(&L, cf_at(b, 0));
    cf_arg_float(&L, 1.0f);
    cf_arg_int(&L, 1);
    size_t global[2] = {cases[i].local[0], cases[i].local[1]};
    cf_set_verbosity(-1);
    cf_status st = cf_launch_run(&L, cases[i].dims, global, cases[i].local);
    cf_set_verbosity(1);
    const char *msg = cf_last_error();
    TEST_ASSERT(st == CF_ERR_INVALID_ARG && strstr(msg, "fill") && strstr(msg, cases[i].limit),
                "work-group %zu x %zu gave %s: %s", cases[i].local[0], cases[i].local[1], cf_status_str(st), msg);
  }
  TEST_OK(cf_fill(ctx, cf_at(b, 0), 2.0f, 2 * kwg));
  cf_launch L;
  cf_launch_begin(&L, ctx, "elementwise", "fill");
  cf_arg_mem(&L, cf_at(b, 0));
  cf_arg_float(&L, 3.0f);
  cf_arg_int(&L, (int)kwg);
  size_t global = kwg, local = kwg;  /* the kernel's own limit: allowed, and it runs */
  TEST_OK(cf_launch_run(&L, 1, &global, &local));
  float *x = test_read(ctx, cf_at(b, 0), 2 * kwg);
  TEST_ASSERT(x[0] == 3.0f && x[kwg - 1] == 3.0f && x[kwg] == 2.0f, "a group of %zu: %g %g %g", kwg, x[0], x[kwg - 1],
              x[kwg]);
  free(x);
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wte_cpu");
  cf_set_verbosity(-1);
  cf_arg_local(&L, (size_t)d->local_mem + 4);
  cf_set_verbosity(1);
  TEST_ASSERT(L.status == CF_ERR_INVALID_ARG && strstr(cf_last_error(), "CL_DEVICE_LOCAL_MEM_SIZE"),
              "local memory past the device's: %s", cf_last_error());
  cf_buffer_free(b);
}

int main(void) {
  char dir[] = "/tmp/clformer-test-cache-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  setenv("CLFORMER_CACHE_DIR", dir, 1);
  unsetenv("CLFORMER_CACHE");
  unsetenv("CLFORMER_KERNEL_DIR");

  /* status names */
  TEST_ASSERT(!strcmp(cf_status_str(-54), "CL_INVALID_WORK_GROUP_SIZE"), "-54");
  TEST_ASSERT(!strcmp(cf_status_str(-1017), "CLBlastInvalidDimension"), "-1017");
  TEST_ASSERT(!strcmp(cf_status_str(CF_ERR_IO), "CF_ERR_IO"), "CF_ERR_IO");
  TEST_ASSERT(!strcmp(cf_status_str(-1001), "CL_PLATFORM_NOT_FOUND_KHR"), "-1001");

  /* a good kernel builds and computes; first build is a miss that writes the cache */
  cf_context *ctx = test_context();
  cl_program p;
  TEST_OK(cf_program_build_source(ctx, "axpb", good_src, &p));
  check_axpb(ctx, p);
  clReleaseProgram(p);
  cf_cache_stats s = cf_context_cache_stats(ctx);
  TEST_ASSERT(s.misses == 1 && s.hits == 0 && s.writes == 1, "first build: misses %d hits %d writes %d", s.misses,
              s.hits, s.writes);
  char bin[4300];
  TEST_ASSERT(find_bin(dir, bin, sizeof bin) == 1, "one cache file expected in %s", dir);

  /* the second load, in a fresh context, is a hit, and faster; the binary computes */
  cf_cache_stats s2;
  double cold = 0, warm;
  {
    setenv("CLFORMER_CACHE", "off", 1);
    cold = build_once(good_src, &s2);
    unsetenv("CLFORMER_CACHE");
  }
  warm = build_once(good_src, &s2);
  TEST_ASSERT(s2.hits == 1 && s2.misses == 0, "second load must hit: hits %d misses %d", s2.hits, s2.misses);
  printf("program load: cold %.1f ms, warm %.1f ms\n", cold, warm);
  TEST_ASSERT(warm < cold, "a cache hit (%.1f ms) should be faster than a build (%.1f ms)", warm, cold);
  {
    cf_context *c2 = test_context();
    TEST_OK(cf_program_build_source(c2, "axpb", good_src, &p));
    check_axpb(c2, p);
    clReleaseProgram(p);
    cf_context_free(c2);
  }

  /* a hit marks the entry used (its mtime), so pruning by age spares entries in use */
  {
    struct timespec t[2] = {{time(NULL) - 10 * 86400, 0}, {time(NULL) - 10 * 86400, 0}};
    TEST_ASSERT(utimensat(AT_FDCWD, bin, t, 0) == 0, "utimensat");
    build_once(good_src, &s2);
    TEST_ASSERT(s2.hits == 1 && mtime_age(bin) >= 0 && mtime_age(bin) < 3600,
                "a hit must refresh the entry's time (age %.0f s)", mtime_age(bin));
  }
  check_prune();

  /* corrupt the cached binary: detected, rebuilt, replaced (then a hit again) */
  for (int mode = 0; mode < 2; mode++) {
    FILE *f = fopen(bin, "r+b");
    TEST_ASSERT(f != NULL, "open %s", bin);
    if (mode == 0) {  /* flip bytes in the middle */
      fseek(f, 0, SEEK_END);
      long len = ftell(f);
      fseek(f, len / 2, SEEK_SET);
      fwrite("GARBAGE!", 1, 8, f);
      fclose(f);
    } else {          /* truncate */
      fclose(f);
      TEST_ASSERT(truncate(bin, 20) == 0, "truncate");
    }
    build_once(good_src, &s2);
    TEST_ASSERT(s2.rejected == 1 && s2.misses == 1 && s2.writes == 1, "corrupt entry (mode %d): rejected %d misses %d writes %d",
                mode, s2.rejected, s2.misses, s2.writes);
    build_once(good_src, &s2);
    TEST_ASSERT(s2.hits == 1 && s2.rejected == 0, "replaced entry must hit (mode %d)", mode);
  }

  /* CLFORMER_CACHE=off writes nothing */
  {
    char dir2[] = "/tmp/clformer-test-nocache-XXXXXX";
    TEST_ASSERT(mkdtemp(dir2) != NULL, "mkdtemp");
    setenv("CLFORMER_CACHE_DIR", dir2, 1);
    setenv("CLFORMER_CACHE", "off", 1);
    build_once(good_src, &s2);
    char tmp[4300];
    TEST_ASSERT(find_bin(dir2, tmp, sizeof tmp) == 0 && s2.writes == 0, "cache off must write nothing");
    unsetenv("CLFORMER_CACHE");
    setenv("CLFORMER_CACHE_DIR", dir, 1);
    rmdir(dir2);
  }

  /* a syntax error: CL_BUILD_PROGRAM_FAILURE, and the error text holds the build log */
  cf_set_verbosity(-1);
  cf_status st = cf_program_build_source(ctx, "broken", bad_src, &p);
  cf_set_verbosity(1);
  TEST_ASSERT(st == CL_BUILD_PROGRAM_FAILURE, "bad source returned %s", cf_status_str(st));
  const char *msg = cf_last_error();
  TEST_ASSERT(strstr(msg, "undeclared_identifier_42") != NULL, "build log missing from error: %s", msg);
  TEST_ASSERT(strstr(msg, "broken.cl") && strstr(msg, cf_context_device(ctx)->name) && strstr(msg, "CL_BUILD_PROGRAM_FAILURE"),
              "error must name the file, the device and the status: %s", msg);
  TEST_ASSERT(strstr(msg, ":2:") != NULL, "build log line numbers should match the source (line 2): %s", msg);

  /* unknown program and kernel names */
  cl_kernel k;
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_kernel_get(ctx, "no_such_program", "x", &k) == CF_ERR_NOT_FOUND, "unknown program");
  TEST_ASSERT(cf_kernel_get(ctx, "elementwise", "no_such_kernel", &k) == CF_ERR_NOT_FOUND, "unknown kernel");
  /* the launch helper names the kernel, argument and call site of a failing clSetKernelArg */
  cf_launch L;
  cf_launch_begin(&L, ctx, "elementwise", "fill");
  cf_arg_local(&L, 16);  /* argument 0 is a __global pointer: CL_INVALID_ARG_VALUE or similar */
  st = cf_launch_run(&L, 1, (size_t[]){1}, NULL);
  cf_set_verbosity(1);
  msg = cf_last_error();
  TEST_ASSERT(st != CF_OK && strstr(msg, "clSetKernelArg(fill, argument 0)") && strstr(msg, "test_program.c:") &&
                  strstr(msg, "CL_INVALID"), "launch error text: %s", msg);
  TEST_OK(cf_kernel_get(ctx, "elementwise", "fill", &k));
  check_limits(ctx);

  /* CLFORMER_KERNEL_DIR: sources come from there, headers are inlined */
  {
    char kdir[] = "/tmp/clformer-test-kdir-XXXXXX";
    TEST_ASSERT(mkdtemp(kdir) != NULL, "mkdtemp");
    char path[4200];
    snprintf(path, sizeof path, "%s/elementwise.cl", kdir);
    FILE *f = fopen(path, "w");
    fputs("#include \"plus.clh\"\n"
          "__kernel void fill(__global float *x, uint x_off, float value, int n) {\n"
          "  int i = get_global_id(0);\n  if (i < n) x[x_off + i] = PLUS(value);\n}\n"
          "__kernel void fill_cpu(__global float *x, uint x_off, float value, int n) {\n"  /* CPU devices' cf_fill */
          "  for (int i = get_global_id(0) * 4096; i < n && i < (int)(get_global_id(0) + 1) * 4096; i++)\n"
          "    x[x_off + i] = PLUS(value);\n}\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/plus.clh", kdir);
    f = fopen(path, "w");
    fputs("#define PLUS(v) ((v) + 100.0f)\n", f);
    fclose(f);
    setenv("CLFORMER_KERNEL_DIR", kdir, 1);
    cf_context *c3 = test_context();
    cl_mem b = test_buffer(c3, NULL, 3);
    TEST_OK(cf_fill(c3, cf_at(b, 0), 1.0f, 3));
    float *x = test_read(c3, cf_at(b, 0), 3);
    TEST_ASSERT(x[0] == 101.0f && x[2] == 101.0f, "CLFORMER_KERNEL_DIR source not used: %g", x[0]);
    free(x);
    cf_buffer_free(b);
    cf_context_free(c3);
    unsetenv("CLFORMER_KERNEL_DIR");
    unlink(path);
    snprintf(path, sizeof path, "%s/elementwise.cl", kdir);
    unlink(path);
    rmdir(kdir);
  }
  cf_context_free(ctx);

  /* clean up the cache directory */
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char path[4300];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
  return test_finish("test_program");
}
