/* Device buffers: checked create, blocking copies, fill. */
#include "runtime/runtime.h"

cf_status cf_buffer_create(cf_context *ctx, size_t bytes, cl_mem *out) {
  *out = NULL;
  if (bytes == 0) bytes = 4;  /* zero-size buffers are invalid in OpenCL; keep callers simple */
  if (bytes > ctx->info.max_alloc)
    return CF_FAIL(CL_INVALID_BUFFER_SIZE, "a buffer of %zu bytes exceeds the device's largest allocation (%llu bytes)",
                   bytes, ctx->info.max_alloc);
  cl_int err;
  *out = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS)
    return cf_report(err, "clCreateBuffer", __FILE__, __LINE__, "%zu bytes (%.1f MiB) asked for", bytes,
                     (double)bytes / 1048576.0);
  return CF_OK;
}

void cf_buffer_free(cl_mem buf) { CF_RELEASE(clReleaseMemObject, buf); }

cf_status cf_write(cf_context *ctx, cf_mem m, const void *src, size_t n) {
  if (n == 0) return CF_OK;
  CF_CHECK(clEnqueueWriteBuffer(ctx->queue, m.buf, CL_TRUE, m.off * 4, n * 4, src, 0, NULL, NULL));
  return CF_OK;
}

cf_status cf_read(cf_context *ctx, cf_mem m, void *dst, size_t n) {
  if (n == 0) return CF_OK;
  CF_CHECK(clEnqueueReadBuffer(ctx->queue, m.buf, CL_TRUE, m.off * 4, n * 4, dst, 0, NULL, NULL));
  return CF_OK;
}

cf_status cf_fill(cf_context *ctx, cf_mem m, float value, size_t n) {
  cf_launch L;
  cf_launch_begin(&L, ctx, "elementwise", "fill");
  cf_arg_mem(&L, m);
  cf_arg_float(&L, value);
  cf_arg_int(&L, (int)n);
  size_t global = n, local = 64;
  return cf_launch_run(&L, 1, &global, &local);
}
