/* The runtime layer, internal: the context's layout and the kernel binary cache's housekeeping. */
#ifndef CLFORMER_RUNTIME_RUNTIME_H
#define CLFORMER_RUNTIME_RUNTIME_H

#include "base/base.h"
#include "clformer/runtime.h"

typedef struct cf_loaded_program {
  char name[64];
  cl_program program;
  cl_uint nkernels;
  cl_kernel *kernels;
  char (*kernel_names)[64];
  size_t wg;                     /* its work-group size: CF_WG as it was built (cf_program_wg) */
} cf_loaded_program;

/* Per-context state of an upper layer (the GEMM layer's scratch, for one): the runtime holds it and
 * frees it first when the context goes, knowing nothing of what it is. */
typedef void (*cf_context_ext_free_fn)(cf_context *ctx, void *state);
#define CF_CONTEXT_EXT_SLOTS 8

struct cf_context {
  cf_device_info info;
  cl_context cl;
  cl_command_queue queue;
  cl_command_queue transfer_queue; /* host transfers that must not wait for the compute queue (made on first use) */
  int zero_copy;                   /* cf_context_zero_copy */
  int profiling;
  size_t wg;                     /* CF_WG: work-group size for reductions */
  size_t max_item[3];            /* CL_DEVICE_MAX_WORK_ITEM_SIZES, the first three dimensions */
  size_t kernel_wg_floor;        /* the least CL_KERNEL_WORK_GROUP_SIZE of the kernels loaded so far:
                                    a launch's work-group within it needs no query */
  int wg_over_noted;             /* a launch past its kernel's CL_KERNEL_WORK_GROUP_SIZE was noted */
  int cpu_shapes;                /* CF_DEVICE_IS_CPU: kernels take their CPU shapes (cf_context_cpu_shapes) */
  char defines[512];             /* prepended to every program */
  char build_options[128];
  cf_loaded_program *programs;   /* built on first use */
  int nprograms, cap_programs;
  cf_cache_stats cache;
  int cache_write_failed;        /* writes into the binary cache that failed (noted once) */
  /* per-launch events while profiling is on (cf_profile_start), each with the tag in force */
  struct cf_prof_event { char name[48], tag[CF_PROFILE_TAG]; cl_event ev; } *prof;
  int nprof, cap_prof, prof_on;
  char prof_tag[CF_PROFILE_TAG];   /* cf_profile_tag; "" none */
  struct cf_context_ext { const void *key; void *state; cf_context_ext_free_fn free; } ext[CF_CONTEXT_EXT_SLOTS];
};

/* The state an upper layer stored under key (the address of a static object of that layer), or NULL. */
void *cf_context_ext(const cf_context *ctx, const void *key);
/* Store state under key (replacing none: one slot per key); free_fn runs at cf_context_free. */
cf_status cf_context_ext_set(cf_context *ctx, const void *key, void *state, cf_context_ext_free_fn free_fn);
/* The state under key, made on first use: `bytes` zeroed bytes, released with free() with the
 * context (for state that holds no resources of its own). */
cf_status cf_context_ext_zeroed(cf_context *ctx, const void *key, size_t bytes, void **out);

/* Set the CF_WG of programs built from now on (and the #define block that carries it). */
void cf_context_set_wg(cf_context *ctx, size_t wg);

/* The second queue on the device, for maps that must not wait behind the compute queue's work
 * (an in-order queue runs a map after everything enqueued before it); made on first use. */
cf_status cf_context_transfer_queue(cf_context *ctx, cl_command_queue *out);

/* Cache housekeeping (src/runtime/cache.c): mark an entry used (a hit), and prune with the default limits
 * (after a write). */
void cf_cache_touch(const char *path);
void cf_cache_prune_default(const char *dir);

#endif
