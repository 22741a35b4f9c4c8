/* OpenCL devices: enumeration, selection by a spec string, and the context that owns the
 * chosen device's queue. Not here: kernels (program.h) and buffers (buffer.h). */
#ifndef CLFORMER_DEVICE_H
#define CLFORMER_DEVICE_H

#include <stddef.h>
#include <stdio.h>
#include <CL/cl.h>

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001 /* from cl_khr_icd: no platform installed */
#endif
#include "clformer/status.h"

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

/* Print the device table (or JSON) to f; marks the device `auto` picks. */
void cf_device_print_table(FILE *f, const cf_device_info *list, int count, int auto_index);
void cf_device_print_json(FILE *f, const cf_device_info *list, int count, int auto_index);

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

#endif
