/* clfault: a test-only OpenCL fault injector, LD_PRELOADed in front of the ICD loader
 * (libOpenCL.so.1), so that a device error can be made to happen at a chosen moment of a run.
 * It wraps clEnqueueNDRangeKernel and clCreateBuffer, counts their calls (the process's, CLBlast's
 * included) and makes one of them fail:
 *   CLFAULT_ENQUEUE_FAIL_AT=N        the Nth clEnqueueNDRangeKernel returns the error
 *   CLFAULT_CREATE_BUFFER_FAIL_AT=N  the Nth clCreateBuffer returns NULL with the error
 *   CLFAULT_ERROR=NAME               CL_OUT_OF_RESOURCES (default), CL_MEM_OBJECT_ALLOCATION_FAILURE or
 *                                    CL_OUT_OF_HOST_MEMORY
 *   CLFAULT_STICKY=1                 every call from the Nth on fails (a device that stays broken)
 *   CLFAULT_COUNT_FILE=PATH          at exit, write "enqueue E\ncreate_buffer B\n" (the calls made), so a
 *                                    test can aim N at a moment of a run measured beforehand
 *   CLFAULT_KERNEL_WG=N              every kernel allows at most N work-items: CL_KERNEL_WORK_GROUP_SIZE
 *                                    answers at most N, and a launch of larger work-groups fails with
 *                                    CL_INVALID_WORK_GROUP_SIZE, as a GPU driver's kernel that needs many
 *                                    registers would
 * Built only for the tests (CMakeLists.txt); nothing of it is installed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

static long n_enqueue, n_create;

static long env_long(const char *name) {
  const char *v = getenv(name);
  return v ? atol(v) : 0;
}

static cl_int fault_code(void) {
  const char *v = getenv("CLFAULT_ERROR");
  if (v && !strcmp(v, "CL_MEM_OBJECT_ALLOCATION_FAILURE")) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  if (v && !strcmp(v, "CL_OUT_OF_HOST_MEMORY")) return CL_OUT_OF_HOST_MEMORY;
  return CL_OUT_OF_RESOURCES;
}

/* Whether call number n (1-based) of the counter set by `env` fails. */
static int fails(const char *env, long n) {
  long at = env_long(env);
  return at > 0 && (n == at || (n > at && env_long("CLFAULT_STICKY")));
}

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "clfault: %s not found after the preload (%s)\n", name, dlerror());
    abort();
  }
  return f;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims,
                                                         const size_t *offset, const size_t *global,
                                                         const size_t *local, cl_uint nwait, const cl_event *wait,
                                                         cl_event *event) {
  static cl_int (*next)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,
                        const cl_event *, cl_event *);
  if (!next) *(void **)&next = real("clEnqueueNDRangeKernel");
  if (fails("CLFAULT_ENQUEUE_FAIL_AT", __atomic_add_fetch(&n_enqueue, 1, __ATOMIC_RELAXED))) return fault_code();
  long kernel_wg = env_long("CLFAULT_KERNEL_WG");
  size_t items = 1;
  for (cl_uint d = 0; local && d < dims; d++) items *= local[d];
  if (kernel_wg > 0 && local && items > (size_t)kernel_wg) return CL_INVALID_WORK_GROUP_SIZE;
  return next(q, k, dims, offset, global, local, nwait, wait, event);
}

CL_API_ENTRY cl_int CL_API_CALL clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id dev, cl_kernel_work_group_info what,
                                                         size_t size, void *value, size_t *size_ret) {
  static cl_int (*next)(cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *);
  if (!next) *(void **)&next = real("clGetKernelWorkGroupInfo");
  cl_int err = next(k, dev, what, size, value, size_ret);
  long kernel_wg = env_long("CLFAULT_KERNEL_WG");
  if (err == CL_SUCCESS && what == CL_KERNEL_WORK_GROUP_SIZE && value && kernel_wg > 0 && *(size_t *)value > (size_t)kernel_wg)
    *(size_t *)value = (size_t)kernel_wg;
  return err;
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size, void *host,
                                               cl_int *err) {
  static cl_mem (*next)(cl_context, cl_mem_flags, size_t, void *, cl_int *);
  if (!next) *(void **)&next = real("clCreateBuffer");
  if (fails("CLFAULT_CREATE_BUFFER_FAIL_AT", __atomic_add_fetch(&n_create, 1, __ATOMIC_RELAXED))) {
    if (err) *err = fault_code();
    return NULL;
  }
  return next(ctx, flags, size, host, err);
}

__attribute__((destructor)) static void write_counts(void) {
  const char *path = getenv("CLFAULT_COUNT_FILE");
  FILE *f = path ? fopen(path, "w") : NULL;
  if (!f) return;
  fprintf(f, "enqueue %ld\ncreate_buffer %ld\n", n_enqueue, n_create);
  fclose(f);
}
