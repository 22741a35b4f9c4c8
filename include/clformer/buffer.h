/* Device buffers: create, copy to and from the host, fill. Thin checked wrappers. */
#ifndef CLFORMER_BUFFER_H
#define CLFORMER_BUFFER_H

#include "clformer/program.h"

cf_status cf_buffer_create(cf_context *ctx, size_t bytes, cl_mem *out);
void cf_buffer_free(cl_mem buf); /* NULL is a no-op */
/* Blocking copies of n floats (or 4-byte ints) at m. */
cf_status cf_write(cf_context *ctx, cf_mem m, const void *src, size_t n);
cf_status cf_read(cf_context *ctx, cf_mem m, void *dst, size_t n);
/* Set n floats at m to value (one kernel, no host copy). */
cf_status cf_fill(cf_context *ctx, cf_mem m, float value, size_t n);

#endif
