/* clformer/base.h: status codes and the counter-based random numbers every layer shares. */
#ifndef CLFORMER_BASE_H
#define CLFORMER_BASE_H

#include <stdint.h>

/* Status codes. OpenCL's negative codes pass through unchanged, CLBlast's own codes
 * (-1024..-1007, -2050..-2039) too; clformer's own codes live in -5000..-5099.
 * cf_status_str() names every one of them. */
typedef int cf_status;

enum {
  CF_OK = 0,
  CF_ERR_INVALID_ARG = -5001,   /* a caller passed a bad argument */
  CF_ERR_NO_DEVICE = -5002,     /* a device spec matched no device */
  CF_ERR_IO = -5003,            /* a file could not be read or written */
  CF_ERR_NO_MEMORY = -5004,     /* host malloc failed */
  CF_ERR_CONFIG = -5005,        /* a configuration value is invalid */
  CF_ERR_NOT_FOUND = -5006,     /* a named kernel, program or tensor does not exist */
  CF_ERR_SHAPE = -5007,         /* tensor shapes do not fit */
  CF_ERR_NONFINITE = -5008,     /* NaN or Inf where a finite value is required */
  CF_ERR_CHECKPOINT = -5009,    /* a checkpoint is truncated, corrupt or does not match */
  CF_ERR_SELFTEST = -5010,      /* the device failed the kernel self-test */
  CF_ERR_DATA = -5011,          /* training data is missing or unusable */
  CF_ERR_MPI = -5012,           /* an MPI call failed, or another rank of the job did */
};

/* Symbolic name of a status code ("CL_INVALID_WORK_GROUP_SIZE", "CLBlastInvalidDimension", ...). */
const char *cf_status_str(cf_status status);

/* The text of the most recent error reported by this thread (call, file:line, name, and
 * any build log); "" if none. Valid until the next error. */
const char *cf_last_error(void);
void cf_clear_error(void);

/* Verbosity of library messages on stderr: -1 silent, 0 errors only, 1 notes (default), 2 debug.
 * Each thread has its own, starting from CLFORMER_VERBOSE. */
void cf_set_verbosity(int level);
int cf_verbosity(void);

/* Philox4x32-10 on the host: the twin of cl/philox.clh, for references and tests. */
void cf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Words for elements 4*group .. 4*group+3: key (seed, tensor_id), counter (group, step, 0, 0). */
void cf_random_bits(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t group, uint32_t out[4]);
/* Element i's uniform in [0, 1): word i%4 of group i/4, top 24 bits. */
float cf_random_uniform(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t i);

#endif
