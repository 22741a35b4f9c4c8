/* Device enumeration, selection by spec, and the context (device + context + in-order queue). */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "runtime/runtime.h"

static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t n) {
  buf[0] = 0;
  if (clGetDeviceInfo(d, what, n, buf, NULL) != CL_SUCCESS) snprintf(buf, n, "?");
  buf[n - 1] = 0;
}

static int has_extension(cl_device_id d, const char *ext) {
  size_t n = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
  char *s = malloc(n + 1);
  if (!s) return 0;
  int found = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
    s[n] = 0;
    size_t len = strlen(ext);
    for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
      found = (p == s || p[-1] == ' ') && (p[len] == ' ' || p[len] == 0);
  }
  free(s);
  return found;
}

static cf_status fill_info(cf_device_info *di, cl_platform_id p, cl_device_id d, int pi, int dj) {
  memset(di, 0, sizeof *di);
  di->platform_index = pi;
  di->device_index = dj;
  di->platform = p;
  di->device = d;
  CF_CHECK(clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof di->platform_name, di->platform_name, NULL));
  CF_CHECK(clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof di->platform_version, di->platform_version, NULL));
  info_str(d, CL_DEVICE_NAME, di->name, sizeof di->name);
  info_str(d, CL_DEVICE_VENDOR, di->vendor, sizeof di->vendor);
  info_str(d, CL_DRIVER_VERSION, di->driver_version, sizeof di->driver_version);
  info_str(d, CL_DEVICE_VERSION, di->device_version, sizeof di->device_version);
  info_str(d, CL_DEVICE_OPENCL_C_VERSION, di->opencl_c_version, sizeof di->opencl_c_version);
  cl_uint u;
  cl_ulong ul;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof di->type, &di->type, NULL));
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL));
  di->compute_units = u;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL));
  di->clock_mhz = u;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, NULL));
  di->global_mem = ul;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ul, &ul, NULL));
  di->local_mem = ul;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ul, &ul, NULL));
  di->max_alloc = ul;
  CF_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof di->max_work_group, &di->max_work_group, NULL));
  di->fp16 = has_extension(d, "cl_khr_fp16");
  di->fp64 = has_extension(d, "cl_khr_fp64");
  /* Deprecated since OpenCL 2.0 but still answered; a driver that refuses it is taken as discrete. */
  cl_bool unified = CL_FALSE;
  if (clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) == CL_SUCCESS)
    di->host_unified = unified == CL_TRUE;
  return CF_OK;
}

cf_status cf_device_list(cf_device_info **list, int *count) {
  *list = NULL;
  *count = 0;
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0))
    return CF_FAIL(CL_PLATFORM_NOT_FOUND_KHR,
                   "no OpenCL platform is installed; install a driver, e.g. "
                   "`apt-get install pocl-opencl-icd ocl-icd-libopencl1` for the CPU, or your GPU vendor's OpenCL ICD");
  CF_CHECK(err);
  cl_platform_id *plats = calloc(np, sizeof *plats);
  if (!plats) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  cf_status st = CF_OK;
  cf_device_info *out = NULL;
  int n = 0;
  CF_CHECK_GOTO(clGetPlatformIDs(np, plats, NULL), st, done);
  for (cl_uint p = 0; p < np; p++) {
    cl_uint nd = 0;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (err == CL_DEVICE_NOT_FOUND || nd == 0) continue;  /* a platform without devices is not an error */
    CF_CHECK_GOTO(err, st, done);
    cl_device_id *devs = calloc(nd, sizeof *devs);
    cf_device_info *grown = realloc(out, (size_t)(n + (int)nd) * sizeof *out);
    if (!devs || !grown) {
      free(devs);
      st = CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
      goto done;
    }
    out = grown;
    err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, devs, NULL);
    if (err != CL_SUCCESS) {
      free(devs);
      CF_CHECK_GOTO(err, st, done);
    }
    for (cl_uint d = 0; d < nd; d++) {
      st = fill_info(&out[n], plats[p], devs[d], (int)p, (int)d);
      if (st != CF_OK) { free(devs); goto done; }
      n++;
    }
    free(devs);
  }
done:
  free(plats);
  if (st != CF_OK) { free(out); return st; }
  if (n == 0) {
    free(out);
    return CF_FAIL(CL_DEVICE_NOT_FOUND, "OpenCL platforms exist but none has a device");
  }
  *list = out;
  *count = n;
  return CF_OK;
}

const char *cf_device_type_str(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  return "other";
}

static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return 1;
  }
  return n == 0;
}

static int first_of_type(const cf_device_info *list, int count, cl_device_type t) {
  for (int i = 0; i < count; i++)
    if (list[i].type & t) return i;
  return -1;
}

cf_status cf_device_select(const cf_device_info *list, int count, const char *spec, int *index) {
  *index = -1;
  if (!spec || !*spec || !strcasecmp(spec, "auto")) {
    int i = first_of_type(list, count, CL_DEVICE_TYPE_GPU);
    if (i < 0) i = first_of_type(list, count, CL_DEVICE_TYPE_ACCELERATOR);
    if (i < 0) i = first_of_type(list, count, CL_DEVICE_TYPE_CPU);
    if (i < 0 && count > 0) i = 0;
    *index = i;
  } else if (!strcasecmp(spec, "gpu")) {
    *index = first_of_type(list, count, CL_DEVICE_TYPE_GPU);
  } else if (!strcasecmp(spec, "cpu")) {
    *index = first_of_type(list, count, CL_DEVICE_TYPE_CPU);
  } else if (!strcasecmp(spec, "accelerator")) {
    *index = first_of_type(list, count, CL_DEVICE_TYPE_ACCELERATOR);
  } else {
    int p, d, used = 0;
    if (sscanf(spec, "%d:%d%n", &p, &d, &used) == 2 && spec[used] == 0) {
      for (int i = 0; i < count; i++)
        if (list[i].platform_index == p && list[i].device_index == d) *index = i;
    } else {
      for (int i = 0; i < count && *index < 0; i++)
        if (contains_nocase(list[i].name, spec) || contains_nocase(list[i].platform_name, spec) ||
            contains_nocase(list[i].platform_version, spec) || contains_nocase(list[i].vendor, spec))
          *index = i;
    }
  }
  if (*index >= 0) return CF_OK;
  char names[4096];
  size_t off = 0;
  for (int i = 0; i < count && off < sizeof names; i++)
    off += (size_t)snprintf(names + off, sizeof names - off, "\n  %d:%d  %s  (%s, %s)", list[i].platform_index,
                            list[i].device_index, list[i].name, list[i].platform_name,
                            cf_device_type_str(list[i].type));
  return CF_FAIL(CF_ERR_NO_DEVICE,
                 "device spec '%s' matches no OpenCL device (use auto, P:D, gpu, cpu, accelerator, or part of a "
                 "device or platform name); the devices are:%s", spec, names);
}

const char *cf_device_spec_resolve(const char *cli_spec, const char *config_spec) {
  if (cli_spec && *cli_spec) return cli_spec;
  const char *env = getenv("CLFORMER_DEVICE");
  if (env && *env) return env;
  if (config_spec && *config_spec) return config_spec;
  return "auto";
}

static void mib(char *buf, size_t n, unsigned long long bytes) {
  if (bytes >= (1ULL << 30)) snprintf(buf, n, "%.1f GiB", (double)bytes / (1 << 30));
  else if (bytes >= (1ULL << 20)) snprintf(buf, n, "%.0f MiB", (double)bytes / (1 << 20));
  else snprintf(buf, n, "%.0f KiB", (double)bytes / 1024);
}

void cf_device_print_table(FILE *f, const cf_device_info *l, int count, int auto_index) {
  fprintf(f, "%-4s %-5s %-28s %-40s %-18s %-11s %4s %6s %10s %9s %6s %-13s %-20s %4s %4s\n", "", "P:D", "platform",
          "device", "vendor", "type", "CUs", "MHz", "global", "local", "maxWG", "OpenCL C", "driver", "fp16", "fp64");
  for (int i = 0; i < count; i++) {
    char g[32], lm[32], pd[16];
    mib(g, sizeof g, l[i].global_mem);
    mib(lm, sizeof lm, l[i].local_mem);
    snprintf(pd, sizeof pd, "%d:%d", l[i].platform_index, l[i].device_index);
    const char *cver = strncmp(l[i].opencl_c_version, "OpenCL C ", 9) ? l[i].opencl_c_version : l[i].opencl_c_version + 9;
    fprintf(f, "%-4s %-5s %-28.28s %-40.40s %-18.18s %-11s %4u %6u %10s %9s %6zu %-13.13s %-20.20s %4s %4s\n",
            i == auto_index ? "auto" : "", pd, l[i].platform_name, l[i].name, l[i].vendor,
            cf_device_type_str(l[i].type), l[i].compute_units, l[i].clock_mhz, g, lm, l[i].max_work_group, cver,
            l[i].driver_version, l[i].fp16 ? "yes" : "no", l[i].fp64 ? "yes" : "no");
  }
}

/* One device's row of `devices --json`; NULL when out of memory. */
static json_t *device_json(const cf_device_info *d, int is_auto) {
  char id[32];
  snprintf(id, sizeof id, "%d:%d", d->platform_index, d->device_index);
  return json_pack("{s:s, s:o, s:o, s:o, s:o, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:b, s:b, s:b, s:b}", "id", id,
                   "platform", cf_json_str(d->platform_name), "platform_version", cf_json_str(d->platform_version),
                   "name", cf_json_str(d->name), "vendor", cf_json_str(d->vendor), "type", cf_device_type_str(d->type),
                   "compute_units", (json_int_t)d->compute_units, "clock_mhz", (json_int_t)d->clock_mhz,
                   "global_mem_bytes", (json_int_t)d->global_mem, "local_mem_bytes", (json_int_t)d->local_mem,
                   "max_alloc_bytes", (json_int_t)d->max_alloc, "max_work_group_size", (json_int_t)d->max_work_group,
                   "opencl_c_version", cf_json_str(d->opencl_c_version), "driver_version",
                   cf_json_str(d->driver_version), "fp16", d->fp16, "fp64", d->fp64, "host_unified_memory",
                   d->host_unified, "auto", is_auto);
}

cf_status cf_device_print_json(FILE *f, const cf_device_info *l, int count, int auto_index) {
  char id[32];
  snprintf(id, sizeof id, "%d:%d", auto_index >= 0 ? l[auto_index].platform_index : -1,
           auto_index >= 0 ? l[auto_index].device_index : -1);
  json_t *devices = json_array();
  for (int i = 0; devices && i < count; i++)
    if (json_array_append_new(devices, device_json(&l[i], i == auto_index))) {
      json_decref(devices);
      devices = NULL;
    }
  json_t *doc = devices ? json_pack("{s:s, s:o}", "auto", id, "devices", devices) : NULL;
  cf_status st = cf_json_write(doc, f, "the device list");
  json_decref(doc);
  return st;
}

/* Work-group size for reductions: the largest power of two <= min(256, device max). */
static size_t pick_wg(size_t max_wg) {
  size_t wg = 1;
  while (wg * 2 <= max_wg && wg * 2 <= 256) wg *= 2;
  return wg;
}

/* The device's largest work-group extent in each of the first three dimensions (a device with
 * fewer dimensions gets 1 in the others). */
static cl_int item_sizes(const cf_device_info *d, size_t out[3]) {
  cl_uint dims = 0;
  size_t v[16] = {0};
  cl_int err = clGetDeviceInfo(d->device, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, sizeof dims, &dims, NULL);
  if (err == CL_SUCCESS && dims > 16) dims = 16;
  if (err == CL_SUCCESS) err = clGetDeviceInfo(d->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof *v, v, NULL);
  for (int i = 0; i < 3; i++) out[i] = i < (int)dims ? v[i] : 1;
  return err;
}

/* Map rather than copy where the device works in host memory, unless $CLFORMER_ZERO_COPY says. */
static cf_status zero_copy_choice(const cf_device_info *d, int *on) {
  const char *v = getenv("CLFORMER_ZERO_COPY");
  *on = d->host_unified;
  if (!v || !*v || !strcmp(v, "auto")) return CF_OK;
  if (strcmp(v, "0") && strcmp(v, "1"))
    return CF_FAIL(CF_ERR_INVALID_ARG, "CLFORMER_ZERO_COPY must be auto, 0 or 1, not '%s'", v);
  *on = v[0] == '1';
  return CF_OK;
}

cf_status cf_context_create(const cf_context_options *opts, cf_context **out) {
  *out = NULL;
  cf_device_info *list;
  int count, index;
  CF_TRY(cf_device_list(&list, &count));
  const char *spec = cf_device_spec_resolve(opts ? opts->device_spec : NULL, NULL);
  cf_status st = cf_device_select(list, count, spec, &index);
  if (st != CF_OK) { free(list); return st; }
  cf_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) { free(list); return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory"); }
  ctx->info = list[index];
  free(list);
  ctx->profiling = opts ? opts->profiling : 0;
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->info.platform, 0};
  ctx->cl = clCreateContext(props, 1, &ctx->info.device, NULL, NULL, &err);
  CF_CHECK_GOTO(err, st, fail);
  /* clCreateCommandQueue is deprecated in 2.0 but is the 1.2 entry point every driver has. */
  ctx->queue = clCreateCommandQueue(ctx->cl, ctx->info.device, ctx->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  CF_CHECK_GOTO(err, st, fail);
  CF_CHECK_GOTO(item_sizes(&ctx->info, ctx->max_item), st, fail);
  ctx->kernel_wg_floor = ctx->info.max_work_group;
  ctx->wg = pick_wg(ctx->info.max_work_group);
  ctx->cpu_shapes = (ctx->info.type & CL_DEVICE_TYPE_CPU) != 0;
  if ((st = zero_copy_choice(&ctx->info, &ctx->zero_copy)) != CF_OK) goto fail;
  const char *shapes = getenv("CLFORMER_KERNEL_SHAPES");
  if (shapes && *shapes && strcmp(shapes, "auto")) {
    if (strcmp(shapes, "gpu") && strcmp(shapes, "cpu")) {
      st = CF_FAIL(CF_ERR_INVALID_ARG, "CLFORMER_KERNEL_SHAPES must be auto, cpu or gpu, not '%s'", shapes);
      goto fail;
    }
    ctx->cpu_shapes = !strcmp(shapes, "cpu");
  }
  cf_context_set_wg(ctx, ctx->wg);
  /* Ask for OpenCL C 1.2 explicitly where the device offers it; 1.1 devices get the default. */
  snprintf(ctx->build_options, sizeof ctx->build_options, "%s",
           strstr(ctx->info.opencl_c_version, "OpenCL C 1.0") || strstr(ctx->info.opencl_c_version, "OpenCL C 1.1")
               ? "" : "-cl-std=CL1.2");
  *out = ctx;
  return CF_OK;
fail:
  cf_context_free(ctx);
  return st;
}

void cf_context_free(cf_context *ctx) {
  if (!ctx) return;
  for (int i = 0; i < ctx->nprograms; i++) {
    cf_loaded_program *p = &ctx->programs[i];
    for (cl_uint k = 0; k < p->nkernels; k++) CF_RELEASE(clReleaseKernel, p->kernels[k]);
    free(p->kernels);
    free(p->kernel_names);
    CF_RELEASE(clReleaseProgram, p->program);
  }
  free(ctx->programs);
  for (int i = CF_CONTEXT_EXT_SLOTS - 1; i >= 0; i--)  /* upper layers' state first, newest first */
    if (ctx->ext[i].key && ctx->ext[i].free) ctx->ext[i].free(ctx, ctx->ext[i].state);
  cf_profile_collect(ctx, NULL, 0);
  free(ctx->prof);
  if (ctx->queue) clFinish(ctx->queue);
  if (ctx->transfer_queue) clFinish(ctx->transfer_queue);
  CF_RELEASE(clReleaseCommandQueue, ctx->transfer_queue);
  CF_RELEASE(clReleaseCommandQueue, ctx->queue);
  CF_RELEASE(clReleaseContext, ctx->cl);
  free(ctx);
}

const cf_device_info *cf_context_device(const cf_context *ctx) { return &ctx->info; }
int cf_context_zero_copy(const cf_context *ctx) { return ctx->zero_copy; }
void cf_context_set_zero_copy(cf_context *ctx, int on) { ctx->zero_copy = on != 0; }

cf_status cf_context_transfer_queue(cf_context *ctx, cl_command_queue *out) {
  if (!ctx->transfer_queue) {
    cl_int err;
    ctx->transfer_queue = clCreateCommandQueue(ctx->cl, ctx->info.device,
                                               ctx->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (err != CL_SUCCESS) return cf_report(err, "clCreateCommandQueue", __FILE__, __LINE__, "the transfer queue");
  }
  *out = ctx->transfer_queue;
  return CF_OK;
}

void *cf_context_ext(const cf_context *ctx, const void *key) {
  for (int i = 0; i < CF_CONTEXT_EXT_SLOTS; i++)
    if (ctx->ext[i].key == key) return ctx->ext[i].state;
  return NULL;
}

cf_status cf_context_ext_set(cf_context *ctx, const void *key, void *state, cf_context_ext_free_fn free_fn) {
  for (int i = 0; i < CF_CONTEXT_EXT_SLOTS; i++)
    if (!ctx->ext[i].key) {
      ctx->ext[i].key = key;
      ctx->ext[i].state = state;
      ctx->ext[i].free = free_fn;
      return CF_OK;
    }
  return CF_FAIL(CF_ERR_INVALID_ARG, "all %d context extension slots are taken", CF_CONTEXT_EXT_SLOTS);
}
static void free_state(cf_context *ctx, void *state) {
  (void)ctx;
  free(state);
}

cf_status cf_context_ext_zeroed(cf_context *ctx, const void *key, size_t bytes, void **out) {
  if ((*out = cf_context_ext(ctx, key))) return CF_OK;
  void *s = calloc(1, bytes);
  if (!s) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = cf_context_ext_set(ctx, key, s, free_state);
  if (st != CF_OK) {
    free(s);
    return st;
  }
  *out = s;
  return CF_OK;
}

cl_context cf_context_cl(const cf_context *ctx) { return ctx->cl; }
cl_command_queue cf_context_queue(const cf_context *ctx) { return ctx->queue; }
size_t cf_context_wg(const cf_context *ctx) { return ctx->wg; }

void cf_context_set_wg(cf_context *ctx, size_t wg) {
  ctx->wg = wg;
  snprintf(ctx->defines, sizeof ctx->defines,
           "/* clformer defines */\n#define CF_WG %zu\n#define CF_DEVICE_IS_CPU %d\n", ctx->wg, ctx->cpu_shapes);
}
int cf_context_cpu_shapes(const cf_context *ctx) { return ctx->cpu_shapes; }
const char *cf_program_defines(const cf_context *ctx) { return ctx->defines; }
cf_cache_stats cf_context_cache_stats(const cf_context *ctx) { return ctx->cache; }

cf_status cf_context_finish(cf_context *ctx) {
  CF_CHECK(clFinish(ctx->queue));
  return CF_OK;
}
