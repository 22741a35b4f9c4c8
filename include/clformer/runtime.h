/* clformer/runtime.h: the OpenCL layer: devices and contexts, programs and kernel launches, buffers. */
#ifndef CLFORMER_RUNTIME_H
#define CLFORMER_RUNTIME_H

#include <stddef.h>
#include <stdio.h>
#include <CL/cl.h>
#include "clformer/base.h"

/* OpenCL devices: enumeration, selection by a spec string, and the context that owns the
 * chosen device's queue. Not here: kernels (program.h) and buffers (buffer.h). */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001 /* from cl_khr_icd: no platform installed */
#endif

typedef struct cf_device_info {
  int platform_index, device_index;   /* the P:D of the spec */
  cl_platform_id platform;
  cl_device_id device;
  char platform_name[256], platform_version[256];
  char name[256], vendor[256], driver_version[256], device_version[256], opencl_c_version[256];
  cl_device_type type;
  unsigned compute_units, clock_mhz;
  unsigned long long global_mem, local_mem, max_alloc;
  size_t max_work_group;
  int fp16, fp64;
  int host_unified;                   /* CL_DEVICE_HOST_UNIFIED_MEMORY: the device works in host memory */
} cf_device_info;

/* All devices of all platforms, in platform then device order. *list is malloc'd (free it).
 * Returns CL_PLATFORM_NOT_FOUND_KHR (-1001) when no OpenCL platform is installed. */
cf_status cf_device_list(cf_device_info **list, int *count);

/* Index into list of the device a spec names: "auto" (first GPU, else accelerator, else CPU),
 * "P:D", "gpu", "cpu", "accelerator", or a case-insensitive substring of platform or device
 * name (first match). NULL or "" means "auto". CF_ERR_NO_DEVICE when nothing matches. */
cf_status cf_device_select(const cf_device_info *list, int count, const char *spec, int *index);

/* The spec in force: the command line's, else $CLFORMER_DEVICE, else the config's, else "auto". */
const char *cf_device_spec_resolve(const char *cli_spec, const char *config_spec);

/* "GPU", "CPU", "accelerator", ... */
const char *cf_device_type_str(cl_device_type type);

/* Print the device table (or JSON) to f; marks the device `auto` picks. The JSON fails only when
 * out of memory or when f cannot be written. */
void cf_device_print_table(FILE *f, const cf_device_info *list, int count, int auto_index);
cf_status cf_device_print_json(FILE *f, const cf_device_info *list, int count, int auto_index);

typedef struct cf_context cf_context;

typedef struct cf_context_options {
  const char *device_spec;  /* NULL: $CLFORMER_DEVICE, else "auto" */
  int profiling;            /* create the queue with profiling enabled (bench) */
} cf_context_options;

/* Open the device the spec selects. On CF_ERR_NO_DEVICE the message lists the devices. */
cf_status cf_context_create(const cf_context_options *opts, cf_context **out);
void cf_context_free(cf_context *ctx); /* NULL is a no-op */

const cf_device_info *cf_context_device(const cf_context *ctx);
cl_context cf_context_cl(const cf_context *ctx);
cl_command_queue cf_context_queue(const cf_context *ctx);
/* Blocks until all queued work is done. */
cf_status cf_context_finish(cf_context *ctx);
/* Whether host transfers map buffers (zero-copy) instead of copying them: on where the device
 * shares host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: integrated GPUs, CPU devices), unless
 * $CLFORMER_ZERO_COPY says 0 (or 1 to map on any device). Set: for benchmarks comparing both. */
int cf_context_zero_copy(const cf_context *ctx);
void cf_context_set_zero_copy(cf_context *ctx, int on);

/* Kernel programs: the .cl sources in cl/ (embedded at build time, or read from
 * $CLFORMER_KERNEL_DIR), built once per context with a prepended #define block, cached as
 * binaries on disk, and a small argument builder for launching their kernels. */
/* The kernel named `kernel` from program `program` (cl/<program>.cl). The program is built on
 * first use (from the disk cache when possible); the kernel object is owned by the context. */
cf_status cf_kernel_get(cf_context *ctx, const char *program, const char *kernel, cl_kernel *out);

/* Build arbitrary source as a program (with the same #define block, options and cache) and
 * return it; the caller releases it. `label` names it in messages. Used by tests and tools. */
cf_status cf_program_build_source(cf_context *ctx, const char *label, const char *source,
                                  cl_program *out);

/* Names of all programs (the .cl files of cl/ compiled into this binary), NULL-terminated. */
const char *const *cf_program_names(void);

/* Source text of a program: $CLFORMER_KERNEL_DIR/<name>.cl when set, else the embedded copy.
 * *text is malloc'd. */
cf_status cf_program_source(const char *name, char **text);

/* The #define block prepended to every program on this context's device. */
const char *cf_program_defines(const cf_context *ctx);

typedef struct cf_cache_stats {
  int hits, misses, rejected, writes;
  double last_load_ms;   /* wall time of the most recent program load (build or cache) */
} cf_cache_stats;
cf_cache_stats cf_context_cache_stats(const cf_context *ctx);
/* Directory used for cached binaries, or NULL when caching is off (CLFORMER_CACHE=off); the
 * string is the calling thread's, valid until its next call. */
const char *cf_cache_dir(void);
/* Removes this cache's entries in dir that are unused for max_age_days, then the least recently
 * used until they total at most max_bytes; other files are left alone. Returns how many went.
 * Runs by itself after each cache write (60 days, CLFORMER_CACHE_MAX_MB or 256 MB). */
int cf_cache_prune(const char *dir, double max_age_days, size_t max_bytes);

/* The work-group size programs built from now on are compiled for (CF_WG in the #define block). */
size_t cf_context_wg(const cf_context *ctx);
/* A program's work-group size: the CF_WG it was built with (the program is built on first use), at
 * most the least CL_KERNEL_WORK_GROUP_SIZE of its kernels. Launches of its reduction kernels use it. */
size_t cf_program_wg(cf_context *ctx, const char *program);
/* A work-group of `want` items for a kernel of `program` that may take any size: at most its cf_program_wg. */
static inline size_t cf_program_local(cf_context *ctx, const char *program, size_t want) {
  size_t wg = cf_program_wg(ctx, program);
  return want < wg ? want : wg;
}
/* Whether kernels take their CPU shapes (a row per work-item, wide vectors, no barriers) or their
 * GPU shapes (work-groups of CF_WG with local-memory reductions): CF_DEVICE_IS_CPU in every
 * program, and the launch grids. The device type decides; CLFORMER_KERNEL_SHAPES=gpu|cpu
 * overrides it, so the GPU code paths can be checked on a CPU device (slowly, but exactly). */
int cf_context_cpu_shapes(const cf_context *ctx);

/* A device memory location: a buffer and an offset in floats (or ints) from its start.
 * Passed to kernels as (pointer, offset) pairs; no sub-buffers, whose origins must be aligned. */
typedef struct cf_mem {
  cl_mem buf;
  size_t off;
} cf_mem;

static inline cf_mem cf_at(cl_mem buf, size_t off) { cf_mem m = {buf, off}; return m; }
static inline cf_mem cf_shift(cf_mem m, size_t by) { m.off += by; return m; }

/* Launching a kernel: begin, add arguments in order, run. The first failure is kept and
 * reported by cf_launch_run (naming the kernel and argument), so call sites stay flat:
 *   cf_launch L; cf_launch_begin(&L, ctx, "layernorm", "layernorm_forward");
 *   cf_arg_mem(&L, out); cf_arg_int(&L, C); cf_arg_float(&L, eps);
 *   return cf_launch_run(&L, 1, global, local);
 * Runs of buffers or ints go in one call, in the same order as one call each:
 *   CF_ARG_MEMS(&L, out, mean, rstd, inp); CF_ARG_INTS(&L, N, C, accumulate);      */
typedef struct cf_launch {
  cf_context *ctx;
  cl_kernel kernel;
  const char *name;
  cl_uint nargs;
  cf_status status;
  const char *file;
  int line;
} cf_launch;

#define cf_launch_begin(L, ctx, program, kernel) cf_launch_begin_at(L, ctx, program, kernel, __FILE__, __LINE__)
void cf_launch_begin_at(cf_launch *L, cf_context *ctx, const char *program, const char *kernel,
                        const char *file, int line);
void cf_arg_mem(cf_launch *L, cf_mem m);        /* two arguments: buffer, uint offset */
void cf_arg_buf(cf_launch *L, cl_mem buf);      /* one argument: buffer alone */
void cf_arg_int(cf_launch *L, int v);
void cf_arg_uint(cf_launch *L, unsigned v);
void cf_arg_float(cf_launch *L, float v);
void cf_arg_local(cf_launch *L, size_t bytes);
/* n cf_arg_mem / cf_arg_int calls in order; errors still name the failing argument's index. */
void cf_arg_mem_list(cf_launch *L, const cf_mem *m, size_t n);
void cf_arg_int_list(cf_launch *L, const int *v, size_t n);
void cf_arg_uint_list(cf_launch *L, const unsigned *v, size_t n);
/* The argument lists of long kernel signatures, counted by the compiler. */
#define CF_ARG_MEMS(L, ...) \
  cf_arg_mem_list((L), (const cf_mem[]){__VA_ARGS__}, sizeof((const cf_mem[]){__VA_ARGS__}) / sizeof(cf_mem))
#define CF_ARG_INTS(L, ...) \
  cf_arg_int_list((L), (const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int))
/* Each value converted to unsigned: the caller has checked that it fits. */
#define CF_ARG_UINTS(L, ...) \
  cf_arg_uint_list((L), (const unsigned[]){__VA_ARGS__}, sizeof((const unsigned[]){__VA_ARGS__}) / sizeof(unsigned))
/* Enqueue with the given global size; local may be NULL. Global sizes are rounded up to
 * multiples of local, so kernels bounds-check. */
cf_status cf_launch_run(cf_launch *L, cl_uint dims, const size_t *global, const size_t *local);

/* A dropout mask, generated where it is applied (cl/dropout.clh) by the ops and by the GEMM's
 * epilogue, so it is described here, below both. */
/* Inverted dropout with probability p in [0, 1). Element i (counted from the cf_mem's offset)
 * is kept iff cf_uniform24(word i%4 of cf_random_bits(seed, step, tensor_id, group0 + i/4)) >= p,
 * and kept elements are scaled by 1/(1-p) (in float). The mask is regenerated, never stored.
 * group0 (usually 0) makes the tensor a slice of a larger one that starts 4*group0 elements
 * earlier: a model's micro-batch passes its rows' place in the step's global batch, so a row's
 * mask is the same whichever rank or micro-batch computes it. */
typedef struct cf_dropout {
  float p;
  uint32_t seed, step, tensor_id;
  uint32_t group0; /* the Philox group of element 0 */
} cf_dropout;
/* The factor kept elements are multiplied by: 1/(1-p) in float, exactly as the device uses it. */
float cf_dropout_scale(cf_dropout d);
/* Six arguments: p, the scale, seed, step, tensor_id, group0 (cl/dropout.clh's order). */
void cf_arg_dropout(cf_launch *L, cf_dropout d);

/* Per-operation timing from OpenCL profiling events (the context must be created with
 * profiling = 1). Between start and collect, every launch records an event; collect waits, sums
 * the device time per kernel name (largest first) and returns the number of entries. An upper
 * layer may tag the launches of one operation (the GEMM layer: its product's shape,
 * cf_gemm_signature): cf_profile_collect_tags also sums the tagged events per tag into by_tag
 * (*ntags entries, largest first; name then holds the tag). */
#define CF_PROFILE_TAG 48
typedef struct cf_profile_entry {
  char name[48];
  double ms;
  int calls;
} cf_profile_entry;
void cf_profile_start(cf_context *ctx);
int cf_profile_collect(cf_context *ctx, cf_profile_entry *out, int max);
int cf_profile_collect_tags(cf_context *ctx, cf_profile_entry *out, int max, cf_profile_entry *by_tag, int max_tags,
                            int *ntags);
/* The tag of the launches that follow (NULL or "": none), while profiling; nothing otherwise. */
void cf_profile_tag(cf_context *ctx, const char *tag);
int cf_profile_on(const cf_context *ctx);  /* whether launches now record events */
/* Where a caller that enqueues outside cf_launch_run (e.g. a BLAS) stores its event; NULL when
 * not profiling. */
cl_event *cf_profile_slot(cf_context *ctx, const char *name);

/* Round n up to a multiple of m. */
static inline size_t cf_round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Device buffers: create, copy to and from the host, fill. Thin checked wrappers. */
cf_status cf_buffer_create(cf_context *ctx, size_t bytes, cl_mem *out);
/* A buffer the host maps without a copy where the device shares its memory (CL_MEM_ALLOC_HOST_PTR),
 * when the context maps (cf_context_zero_copy); otherwise what cf_buffer_create makes. */
cf_status cf_buffer_create_mappable(cf_context *ctx, size_t bytes, cl_mem *out);
void cf_buffer_free(cl_mem buf); /* NULL is a no-op */
/* Bytes of the buffers cf_buffer_create made that the driver has not destroyed yet, all contexts
 * together (a buffer counts until its last reference goes, queued kernels' included). */
unsigned long long cf_buffer_live_bytes(void);
/* Blocking copies of n floats (or 4-byte ints) at m. */
cf_status cf_write(cf_context *ctx, cf_mem m, const void *src, size_t n);
cf_status cf_read(cf_context *ctx, cf_mem m, void *dst, size_t n);
/* rows runs of `width` floats, row i from src + i * src_pitch to dst + i * dst_pitch (floats), on
 * the queue (not blocking); the two regions must not overlap. */
cf_status cf_copy_rows(cf_context *ctx, cf_mem dst, size_t dst_pitch, cf_mem src, size_t src_pitch, size_t width,
                       size_t rows);
/* n floats at m mapped for the host to read, once the queue's work before is done (blocking);
 * cf_unmap gives them back. The device must not write them meanwhile. */
cf_status cf_map_read(cf_context *ctx, cf_mem m, size_t n, const float **host);
cf_status cf_unmap(cf_context *ctx, cl_mem buf, const void *host);
/* Set n floats at m to value (one kernel, no host copy). */
cf_status cf_fill(cf_context *ctx, cf_mem m, float value, size_t n);

#endif
