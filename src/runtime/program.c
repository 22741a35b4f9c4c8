/* Program loading: source lookup (embedded or $CLFORMER_KERNEL_DIR), the prepended #define
 * block, the on-disk binary cache, kernel lookup by name, and the launch helper. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/embedded.h"
#include "runtime/runtime.h"

/* ---------- sources ---------- */

/* Filled once for the process (pthread_once: a second thread must not see a half-filled list). */
static const char *program_names[256];
static pthread_once_t program_names_once = PTHREAD_ONCE_INIT;

static void program_names_fill(void) {
  int n = 0;
  for (const cf_embedded_source *s = cf_embedded_sources; s->name && n < 255; s++)
    if (!strchr(s->name, '.')) program_names[n++] = s->name;  /* headers keep their .clh */
  program_names[n] = NULL;
}

const char *const *cf_program_names(void) {
  pthread_once(&program_names_once, program_names_fill);
  return program_names;
}

/* The text of cl/<file>: from $CLFORMER_KERNEL_DIR when set, else the embedded copy. */
static cf_status raw_source(const char *file, char **text) {
  *text = NULL;
  const char *dir = getenv("CLFORMER_KERNEL_DIR");
  if (dir && *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return cf_read_file(path, text, NULL);
  }
  size_t n = strlen(file);
  for (const cf_embedded_source *s = cf_embedded_sources; s->name; s++) {
    size_t m = strlen(s->name);
    /* programs are stored as "name" for "name.cl", headers as "name.clh" */
    if ((m == n && !strcmp(s->name, file)) || (m + 3 == n && !strncmp(s->name, file, m) && !strcmp(file + m, ".cl"))) {
      *text = strdup(s->text);
      return *text ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    }
  }
  return CF_FAIL(CF_ERR_NOT_FOUND, "no kernel source cl/%s in this build", file);
}

/* Programs pull shared code in with lines `#include "x.clh"`; the loader inlines those (one
 * level), since a program built from a string has no include path. */
cf_status cf_program_source(const char *name, char **text) {
  char file[256];
  snprintf(file, sizeof file, "%s.cl", name);
  char *src;
  CF_TRY(raw_source(file, &src));
  const char *inc = strstr(src, "#include \"");
  if (!inc) { *text = src; return CF_OK; }
  size_t cap = strlen(src) + 1, len = 0;
  char *out = malloc(cap);
  cf_status st = out ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  const char *p = src;
  while (st == CF_OK && (inc = strstr(p, "#include \""))) {
    const char *q = strchr(inc + 10, '"');
    if (!q) { st = CF_FAIL(CF_ERR_INVALID_ARG, "cl/%s.cl: unterminated #include", name); break; }
    char hdr[256];
    snprintf(hdr, sizeof hdr, "%.*s", (int)(q - inc - 10), inc + 10);
    char *htext;
    st = raw_source(hdr, &htext);
    if (st != CF_OK) break;
    size_t need = len + (size_t)(inc - p) + strlen(htext) + 2 + strlen(q);
    if (need > cap) {
      char *g = realloc(out, need);
      if (!g) { free(htext); st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); break; }
      out = g;
      cap = need;
    }
    memcpy(out + len, p, (size_t)(inc - p));
    len += (size_t)(inc - p);
    len += (size_t)sprintf(out + len, "%s\n", htext);
    free(htext);
    p = q + 1;
  }
  if (st == CF_OK) {
    strcpy(out + len, p);
    *text = out;
  } else free(out);
  free(src);
  return st;
}

/* ---------- binary cache ---------- */

/* A cache directory we may load binaries from: not a symbolic link (to somewhere else), and ours
 * when it exists (another user's directory could hand us binaries to run). Else caching is off,
 * noted once per process. */
static int cache_dir_trusted(const char *dir) {
  static atomic_int noted;
  struct stat sb;
  const char *why = NULL;
  if (lstat(dir, &sb) == 0) {
    if (S_ISLNK(sb.st_mode)) why = "is a symbolic link, which the cache does not follow";
    else if (sb.st_uid != geteuid()) why = "belongs to another user";
  }
  if (why && !atomic_exchange(&noted, 1)) cf_log(1, "note: kernel cache off: %s %s", dir, why);
  return why == NULL;
}

const char *cf_cache_dir(void) {
  /* per thread: each call rewrites it, and another thread's call must not change it under a caller */
  static _Thread_local char dir[4096];
  const char *off = getenv("CLFORMER_CACHE");
  if (off && (!strcmp(off, "off") || !strcmp(off, "0"))) return NULL;
  const char *d = getenv("CLFORMER_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (d && *d) snprintf(dir, sizeof dir, "%s", d);
  else if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/clformer", xdg);
  else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/clformer", home);
  else return NULL;
  return cache_dir_trusted(dir) ? dir : NULL;
}

#define CACHE_MAGIC "CFBIN001"
typedef struct cache_header {
  char magic[8];
  uint64_t size;      /* bytes of binary that follow */
  uint64_t checksum;  /* FNV-1a of those bytes */
} cache_header;

static void cache_key(const cf_context *ctx, const char *full_source, char key[33]) {
  const char *parts[] = {full_source, ctx->build_options, ctx->info.name, ctx->info.driver_version,
                         ctx->info.platform_version, ctx->info.device_version, ctx->info.platform_name};
  unsigned long long h1 = CF_HASH_SEED, h2 = 0x84222325cbf29ce4ULL;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    size_t n = strlen(parts[i]) + 1;  /* the NUL separates fields */
    h1 = cf_hash64(h1, parts[i], n);
    h2 = cf_hash64(h2, parts[i], n);
  }
  snprintf(key, 33, "%016llx%016llx", h1, h2);
}

/* Try the cached binary; CF_OK with *out set on a hit, anything else means "build from source". */
static cf_status cache_load(cf_context *ctx, const char *path, const char *label, cl_program *out) {
  char *data;
  size_t len;
  *out = NULL;
  struct stat sb;
  if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {  /* a link planted to elsewhere is never read */
    ctx->cache.rejected++;
    cf_log(2, "note: cache entry %s is not a regular file; rebuilding %s from source", path, label);
    return CF_ERR_IO;
  }
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* a missing file is the normal cold case: no error message */
  cf_status st = cf_read_file(path, &data, &len);
  cf_set_verbosity(v);
  cf_clear_error();
  if (st != CF_OK) return st;
  cache_header h;
  const char *why = NULL;
  if (len < sizeof h) why = "truncated header";
  else {
    memcpy(&h, data, sizeof h);
    if (memcmp(h.magic, CACHE_MAGIC, 8)) why = "bad magic";
    else if (h.size != len - sizeof h) why = "truncated binary";
    else if (h.checksum != cf_hash64(CF_HASH_SEED, data + sizeof h, h.size)) why = "checksum mismatch";
  }
  if (!why) {
    const unsigned char *bin = (const unsigned char *)data + sizeof h;
    size_t bin_len = (size_t)h.size;
    cl_int bin_status = CL_SUCCESS, err;
    cl_program p = clCreateProgramWithBinary(ctx->cl, 1, &ctx->info.device, &bin_len, &bin, &bin_status, &err);
    if (err != CL_SUCCESS || bin_status != CL_SUCCESS) why = "driver rejected the binary";
    else if (clBuildProgram(p, 1, &ctx->info.device, ctx->build_options, NULL, NULL) != CL_SUCCESS) {
      why = "binary failed to build";
      clReleaseProgram(p);
    } else *out = p;
    if (!*out && err == CL_SUCCESS && bin_status != CL_SUCCESS) clReleaseProgram(p);
  }
  free(data);
  if (why) {
    ctx->cache.rejected++;
    cf_log(2, "note: cached binary for %s (%s) is unusable: %s; rebuilding from source", label, path, why);
    return CF_ERR_IO;
  }
  return CF_OK;
}

static void cache_store(cf_context *ctx, cl_program p, const char *dir, const char *path, const char *label) {
  size_t bin_len = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bin_len, &bin_len, NULL) != CL_SUCCESS || bin_len == 0) {
    cf_log(2, "note: driver gives no binary for %s; not cached", label);
    return;
  }
  unsigned char *buf = malloc(sizeof(cache_header) + bin_len);
  if (!buf) return;
  unsigned char *bin = buf + sizeof(cache_header);
  if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
    cache_header h;
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.size = bin_len;
    h.checksum = cf_hash64(CF_HASH_SEED, bin, bin_len);
    memcpy(buf, &h, sizeof h);
    int v = cf_verbosity();
    cf_set_verbosity(-1);  /* a read-only cache directory costs speed, never a run */
    cf_status st = cf_mkdirs_private(dir);
    if (st == CF_OK) st = cf_write_file_atomic(path, buf, sizeof h + bin_len);
    cf_set_verbosity(v);
    if (st == CF_OK) {
      ctx->cache.writes++;
      cf_cache_prune_default(dir);
    } else if (!ctx->cache_write_failed++)  /* once per context: the same reason holds for every program */
      cf_log(1, "note: kernel binaries are not cached (%s: %s); every run builds them again", label, cf_last_error());
    cf_clear_error();
  }
  free(buf);
}

/* ---------- building ---------- */

static cf_status build_failure(cf_context *ctx, cl_program p, cl_int err, const char *label) {
  size_t n = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(p, ctx->info.device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS && n > 0) {
    log = malloc(n + 1);
    if (log && clGetProgramBuildInfo(p, ctx->info.device, CL_PROGRAM_BUILD_LOG, n, log, NULL) == CL_SUCCESS) log[n] = 0;
    else if (log) log[0] = 0;
  }
  cf_status st = cf_report(err, "clBuildProgram", __FILE__, __LINE__,
                           "kernel source: %s.cl\ndevice: %s (%s, driver %s)\noptions: \"%s\" plus the #define block:\n%s"
                           "build log:\n%s",
                           label, ctx->info.name, ctx->info.platform_name, ctx->info.driver_version, ctx->build_options,
                           ctx->defines, log && log[0] ? log : "(the driver gave no build log)");
  free(log);
  return st;
}

cf_status cf_program_build_source(cf_context *ctx, const char *label, const char *source, cl_program *out) {
  *out = NULL;
  double t0 = cf_now();
  size_t n = strlen(ctx->defines) + strlen(source) + 16;
  char *full = malloc(n);
  if (!full) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  /* #line keeps build-log line numbers equal to the .cl file's. */
  snprintf(full, n, "%s#line 1\n%s", ctx->defines, source);

  const char *dir = cf_cache_dir();
  char path[4200] = "";
  if (dir) {
    char key[33];
    cache_key(ctx, full, key);
    snprintf(path, sizeof path, "%s/%s-%s.bin", dir, label, key);
    if (cache_load(ctx, path, label, out) == CF_OK) {
      ctx->cache.hits++;
      cf_cache_touch(path);
      ctx->cache.last_load_ms = 1e3 * (cf_now() - t0);
      free(full);
      return CF_OK;
    }
  }
  ctx->cache.misses++;
  cl_int err;
  const char *srcs[] = {full};
  cl_program p = clCreateProgramWithSource(ctx->cl, 1, srcs, NULL, &err);
  cf_status st = CF_OK;
  CF_CHECK_GOTO(err, st, done);
  err = clBuildProgram(p, 1, &ctx->info.device, ctx->build_options, NULL, NULL);
  if (err != CL_SUCCESS) {
    st = build_failure(ctx, p, err, label);
    clReleaseProgram(p);
    goto done;
  }
  if (dir) cache_store(ctx, p, dir, path, label);
  *out = p;
  ctx->cache.last_load_ms = 1e3 * (cf_now() - t0);
done:
  free(full);
  return st;
}

static void release_program(cf_loaded_program *lp) {
  for (cl_uint k = 0; lp->kernels && k < lp->nkernels; k++) CF_RELEASE(clReleaseKernel, lp->kernels[k]);
  free(lp->kernels);
  free(lp->kernel_names);
  CF_RELEASE(clReleaseProgram, lp->program);
  memset(lp, 0, sizeof *lp);
}

/* The program built from src with the context's #define block, its kernels made and named; the
 * least CL_KERNEL_WORK_GROUP_SIZE among them in *least. */
static cf_status build_kernels(cf_context *ctx, const char *name, const char *src, cf_loaded_program *lp,
                               size_t *least) {
  cf_status st;
  memset(lp, 0, sizeof *lp);
  snprintf(lp->name, sizeof lp->name, "%s", name);
  lp->wg = ctx->wg;
  CF_TRY(cf_program_build_source(ctx, name, src, &lp->program));
  CF_CHECK_GOTO(clCreateKernelsInProgram(lp->program, 0, NULL, &lp->nkernels), st, fail);
  lp->kernels = calloc(lp->nkernels ? lp->nkernels : 1, sizeof *lp->kernels);
  lp->kernel_names = calloc(lp->nkernels ? lp->nkernels : 1, sizeof *lp->kernel_names);
  if (!lp->kernels || !lp->kernel_names) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto fail; }
  if (lp->nkernels) CF_CHECK_GOTO(clCreateKernelsInProgram(lp->program, lp->nkernels, lp->kernels, NULL), st, fail);
  *least = ctx->info.max_work_group;
  for (cl_uint k = 0; k < lp->nkernels; k++) {
    size_t kwg = 0;
    CF_CHECK_GOTO(clGetKernelInfo(lp->kernels[k], CL_KERNEL_FUNCTION_NAME, sizeof lp->kernel_names[k],
                                  lp->kernel_names[k], NULL), st, fail);
    CF_CHECK_GOTO(clGetKernelWorkGroupInfo(lp->kernels[k], ctx->info.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg,
                                           NULL), st, fail);
    if (kwg < *least) *least = kwg;
  }
  if (*least < ctx->kernel_wg_floor) ctx->kernel_wg_floor = *least;
  return CF_OK;
fail:
  release_program(lp);
  return st;
}

static size_t power_of_2_within(size_t n) {
  size_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/* A program whose kernel allows fewer work-items than CF_WG (CL_KERNEL_WORK_GROUP_SIZE: registers
 * or local memory a GPU's kernel needs) gets a smaller work-group: CF_WG is lowered for the context
 * and the program rebuilt with it, when its source uses CF_WG (a program that does not keeps its
 * binary and launches the smaller groups). Programs built before keep theirs (cf_program_wg). */
static cf_status load_program(cf_context *ctx, const char *name, cf_loaded_program **out) {
  for (int i = 0; i < ctx->nprograms; i++)
    if (!strcmp(ctx->programs[i].name, name)) { *out = &ctx->programs[i]; return CF_OK; }
  if (strlen(name) >= sizeof ctx->programs[0].name) return CF_FAIL(CF_ERR_INVALID_ARG, "program name too long: %s", name);
  if (ctx->nprograms == ctx->cap_programs) {
    int cap = ctx->cap_programs ? 2 * ctx->cap_programs : 16;
    cf_loaded_program *g = realloc(ctx->programs, (size_t)cap * sizeof *g);
    if (!g) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    ctx->programs = g;
    ctx->cap_programs = cap;
  }
  char *src;
  CF_TRY(cf_program_source(name, &src));
  cf_loaded_program lp;
  size_t least = 0;
  cf_status st;
  while ((st = build_kernels(ctx, name, src, &lp, &least)) == CF_OK && least < lp.wg) {
    cf_log(2, "note: %s: a kernel allows %zu work-items (CL_KERNEL_WORK_GROUP_SIZE) on %s, fewer than CF_WG %zu",
           name, least, ctx->info.name, lp.wg);
    if (!strstr(src, "CF_WG")) {
      lp.wg = power_of_2_within(least);
      break;
    }
    release_program(&lp);
    cf_context_set_wg(ctx, power_of_2_within(least));
  }
  free(src);
  if (st != CF_OK) return st;
  ctx->programs[ctx->nprograms] = lp;
  *out = &ctx->programs[ctx->nprograms++];
  return CF_OK;
}

size_t cf_program_wg(cf_context *ctx, const char *program) {
  cf_loaded_program *lp;
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* a failed build is the launch's to report, which meets it again */
  cf_status st = load_program(ctx, program, &lp);
  cf_set_verbosity(v);
  if (st == CF_OK) return lp->wg;
  cf_clear_error();
  return ctx->wg;
}

cf_status cf_kernel_get(cf_context *ctx, const char *program, const char *kernel, cl_kernel *out) {
  *out = NULL;
  cf_loaded_program *lp = NULL;
  CF_TRY(load_program(ctx, program, &lp));
  for (cl_uint k = 0; k < lp->nkernels; k++)
    if (!strcmp(lp->kernel_names[k], kernel)) { *out = lp->kernels[k]; return CF_OK; }
  return CF_FAIL(CF_ERR_NOT_FOUND, "no kernel '%s' in cl/%s.cl", kernel, program);
}

/* ---------- launching ---------- */

void cf_launch_begin_at(cf_launch *L, cf_context *ctx, const char *program, const char *kernel, const char *file,
                        int line) {
  L->ctx = ctx;
  L->name = kernel;
  L->nargs = 0;
  L->file = file;
  L->line = line;
  L->status = cf_kernel_get(ctx, program, kernel, &L->kernel);
}

static void set_arg(cf_launch *L, size_t size, const void *value) {
  if (L->status != CF_OK) return;
  cl_int err = clSetKernelArg(L->kernel, L->nargs, size, value);
  if (err != CL_SUCCESS) {
    char call[160];
    snprintf(call, sizeof call, "clSetKernelArg(%s, argument %u)", L->name, L->nargs);
    L->status = cf_report(err, call, L->file, L->line, NULL);
  }
  L->nargs++;
}

void cf_arg_mem(cf_launch *L, cf_mem m) {
  cl_uint off = (cl_uint)m.off;
  if (m.off > 0xffffffffu && L->status == CF_OK)
    L->status = cf_report(CF_ERR_INVALID_ARG, NULL, L->file, L->line, "offset %zu too large for %s", m.off, L->name);
  set_arg(L, sizeof m.buf, &m.buf);
  set_arg(L, sizeof off, &off);
}
void cf_arg_buf(cf_launch *L, cl_mem buf) { set_arg(L, sizeof buf, &buf); }
void cf_arg_int(cf_launch *L, int v) { cl_int x = v; set_arg(L, sizeof x, &x); }
void cf_arg_uint(cf_launch *L, unsigned v) { cl_uint x = v; set_arg(L, sizeof x, &x); }
void cf_arg_float(cf_launch *L, float v) { cl_float x = v; set_arg(L, sizeof x, &x); }

float cf_dropout_scale(cf_dropout d) { return 1.0f / (1.0f - d.p); }

void cf_arg_dropout(cf_launch *L, cf_dropout d) {
  cf_arg_float(L, d.p);
  cf_arg_float(L, cf_dropout_scale(d));
  cf_arg_uint(L, d.seed);
  cf_arg_uint(L, d.step);
  cf_arg_uint(L, d.tensor_id);
  cf_arg_uint(L, d.group0);
}
void cf_arg_local(cf_launch *L, size_t bytes) {
  if (bytes > L->ctx->info.local_mem && L->status == CF_OK)  /* said plainly, not as the driver's code */
    L->status = cf_report(CF_ERR_INVALID_ARG, NULL, L->file, L->line, "%s, argument %u: %zu bytes of local memory "
                          "asked for; %s has %llu (CL_DEVICE_LOCAL_MEM_SIZE)", L->name, L->nargs, bytes,
                          L->ctx->info.name, L->ctx->info.local_mem);
  set_arg(L, bytes, NULL);
}
void cf_arg_mem_list(cf_launch *L, const cf_mem *m, size_t n) {
  for (size_t i = 0; i < n; i++) cf_arg_mem(L, m[i]);
}
void cf_arg_int_list(cf_launch *L, const int *v, size_t n) {
  for (size_t i = 0; i < n; i++) cf_arg_int(L, v[i]);
}
void cf_arg_uint_list(cf_launch *L, const unsigned *v, size_t n) {
  for (size_t i = 0; i < n; i++) cf_arg_uint(L, v[i]);
}

/* A work-group the device allows: each extent within CL_DEVICE_MAX_WORK_ITEM_SIZES, the items within
 * CL_DEVICE_MAX_WORK_GROUP_SIZE; else an error naming the kernel, the size and the limit, before the
 * driver's bare CL_INVALID_WORK_GROUP_SIZE. The kernel's own CL_KERNEL_WORK_GROUP_SIZE is asked only
 * past the least of the loaded kernels' and, when exceeded, noted (once a context) and kept in *kwg for
 * the enqueue's error: Mesa rusticl 22.3 says 32 for llvmpipe's kernels yet runs larger groups right,
 * so it is not enforced here. */
static cf_status check_local(cf_launch *L, cl_uint dims, const size_t *local, size_t *kwg) {
  cf_context *ctx = L->ctx;
  size_t items = 1;
  for (cl_uint d = 0; d < dims; d++) {
    if (d < 3 && local[d] > ctx->max_item[d])
      return cf_report(CF_ERR_INVALID_ARG, NULL, L->file, L->line, "%s: a work-group %zu wide in dimension %u; %s "
                       "allows %zu (CL_DEVICE_MAX_WORK_ITEM_SIZES)", L->name, local[d], d, ctx->info.name,
                       ctx->max_item[d]);
    items *= local[d];
  }
  if (items > ctx->info.max_work_group)
    return cf_report(CF_ERR_INVALID_ARG, NULL, L->file, L->line, "%s: a work-group of %zu items; %s allows %zu "
                     "(CL_DEVICE_MAX_WORK_GROUP_SIZE)", L->name, items, ctx->info.name, ctx->info.max_work_group);
  if (items <= ctx->kernel_wg_floor) return CF_OK;
  cl_int err = clGetKernelWorkGroupInfo(L->kernel, ctx->info.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *kwg, kwg, NULL);
  if (err != CL_SUCCESS) return cf_report(err, "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)", L->file, L->line,
                                          "%s", L->name);
  if (items > *kwg && !ctx->wg_over_noted++)
    cf_log(2, "note: %s: a work-group of %zu items, past the %zu of CL_KERNEL_WORK_GROUP_SIZE on %s (the driver is "
           "left to refuse it)", L->name, items, *kwg, ctx->info.name);
  if (items <= *kwg) *kwg = 0;
  return CF_OK;
}

cf_status cf_launch_run(cf_launch *L, cl_uint dims, const size_t *global, const size_t *local) {
  if (L->status != CF_OK) return L->status;
  size_t kwg = 0;  /* nonzero: the kernel's CL_KERNEL_WORK_GROUP_SIZE, which this launch exceeds */
  if (local) CF_TRY(check_local(L, dims, local, &kwg));
  size_t g[3];
  for (cl_uint d = 0; d < dims; d++) {
    if (global[d] == 0) return CF_OK;  /* nothing to do */
    g[d] = local ? cf_round_up(global[d], local[d]) : global[d];
  }
  cl_int err = clEnqueueNDRangeKernel(L->ctx->queue, L->kernel, dims, NULL, g, local, 0, NULL,
                                      cf_profile_slot(L->ctx, L->name));
  if (err != CL_SUCCESS) {
    char call[160];
    snprintf(call, sizeof call, "clEnqueueNDRangeKernel(%s)", L->name);
    if (kwg) return cf_report(err, call, L->file, L->line, "the work-group is larger than this kernel's "
                              "CL_KERNEL_WORK_GROUP_SIZE on %s, %zu", L->ctx->info.name, kwg);
    return cf_report(err, call, L->file, L->line, NULL);
  }
  return CF_OK;
}

/* ---------- profiling ---------- */

void cf_profile_start(cf_context *ctx) {
  cf_profile_collect(ctx, NULL, 0);  /* drop anything pending */
  ctx->prof_on = ctx->profiling;
}

cl_event *cf_profile_slot(cf_context *ctx, const char *name) {
  if (!ctx->prof_on) return NULL;
  if (ctx->nprof == ctx->cap_prof) {
    int cap = ctx->cap_prof ? 2 * ctx->cap_prof : 1024;
    struct cf_prof_event *g = realloc(ctx->prof, (size_t)cap * sizeof *g);
    if (!g) return NULL;
    ctx->prof = g;
    ctx->cap_prof = cap;
  }
  snprintf(ctx->prof[ctx->nprof].name, sizeof ctx->prof[0].name, "%s", name);
  snprintf(ctx->prof[ctx->nprof].tag, sizeof ctx->prof[0].tag, "%s", ctx->prof_tag);
  ctx->prof[ctx->nprof].ev = NULL;
  return &ctx->prof[ctx->nprof++].ev;
}

static int by_ms(const void *a, const void *b) {
  double x = ((const cf_profile_entry *)a)->ms, y = ((const cf_profile_entry *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

void cf_profile_tag(cf_context *ctx, const char *tag) {
  if (ctx->prof_on) snprintf(ctx->prof_tag, sizeof ctx->prof_tag, "%s", tag ? tag : "");
}

int cf_profile_on(const cf_context *ctx) { return ctx->prof_on; }

/* Adds ms to the entry named `name` among out[0..*n), appending it while there is room. */
static void add_entry(cf_profile_entry *out, int *n, int max, const char *name, double ms) {
  int k = 0;
  while (k < *n && strcmp(out[k].name, name)) k++;
  if (k == *n && *n < max) {
    snprintf(out[*n].name, sizeof out[*n].name, "%s", name);
    out[*n].ms = 0;
    out[*n].calls = 0;
    (*n)++;
  }
  if (k < *n) {
    out[k].ms += ms;
    out[k].calls++;
  }
}

int cf_profile_collect_tags(cf_context *ctx, cf_profile_entry *out, int max, cf_profile_entry *by_tag, int max_tags,
                            int *ntags) {
  int n = 0, nt = 0;
  if (ctx->nprof) clFinish(ctx->queue);
  for (int i = 0; i < ctx->nprof; i++) {
    cl_event ev = ctx->prof[i].ev;
    if (!ev) continue;
    cl_ulong t0 = 0, t1 = 0;
    if (out && clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) == CL_SUCCESS &&
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) == CL_SUCCESS) {
      double ms = (double)(t1 - t0) * 1e-6;
      add_entry(out, &n, max, ctx->prof[i].name, ms);
      if (by_tag && ctx->prof[i].tag[0]) add_entry(by_tag, &nt, max_tags, ctx->prof[i].tag, ms);
    }
    clReleaseEvent(ev);
  }
  ctx->nprof = 0;
  ctx->prof_on = 0;
  ctx->prof_tag[0] = 0;
  if (out) qsort(out, (size_t)n, sizeof *out, by_ms);
  if (by_tag) qsort(by_tag, (size_t)nt, sizeof *by_tag, by_ms);
  if (ntags) *ntags = nt;
  return n;
}

int cf_profile_collect(cf_context *ctx, cf_profile_entry *out, int max) {
  return cf_profile_collect_tags(ctx, out, max, NULL, 0, NULL);
}
