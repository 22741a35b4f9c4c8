/* Device buffers: checked create, blocking copies, fill, and the count of bytes alive. */
#include <stdatomic.h>
#include "runtime/runtime.h"

/* Bytes of buffers made here and not yet destroyed, in every context: the memory plan's test
 * compares it with the plan. A destructor callback counts a buffer out whoever releases it last
 * (the GEMM scratch is released directly, and queued kernels may hold a buffer past its free). */
static atomic_ullong live_bytes;

static void CL_CALLBACK count_out(cl_mem buf, void *bytes) {
  (void)buf;
  atomic_fetch_sub(&live_bytes, (unsigned long long)(uintptr_t)bytes);
}

unsigned long long cf_buffer_live_bytes(void) { return atomic_load(&live_bytes); }

static cf_status create(cf_context *ctx, cl_mem_flags flags, size_t bytes, cl_mem *out) {
  *out = NULL;
  if (bytes == 0) bytes = 4;  /* zero-size buffers are invalid in OpenCL; keep callers simple */
  if (bytes > ctx->info.max_alloc)
    return CF_FAIL(CL_INVALID_BUFFER_SIZE, "a buffer of %zu bytes exceeds the device's largest allocation (%llu bytes)",
                   bytes, ctx->info.max_alloc);
  cl_int err;
  *out = clCreateBuffer(ctx->cl, flags, bytes, NULL, &err);
  if (err != CL_SUCCESS)
    return cf_report(err, "clCreateBuffer", __FILE__, __LINE__, "%zu bytes (%.1f MiB) asked for", bytes,
                     (double)bytes / 1048576.0);
  if (clSetMemObjectDestructorCallback(*out, count_out, (void *)(uintptr_t)bytes) == CL_SUCCESS)
    atomic_fetch_add(&live_bytes, bytes);
  return CF_OK;
}

cf_status cf_buffer_create(cf_context *ctx, size_t bytes, cl_mem *out) {
  return create(ctx, CL_MEM_READ_WRITE, bytes, out);
}

cf_status cf_buffer_create_mappable(cf_context *ctx, size_t bytes, cl_mem *out) {
  return create(ctx, CL_MEM_READ_WRITE | (ctx->zero_copy ? CL_MEM_ALLOC_HOST_PTR : 0), bytes, out);
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

cf_status cf_copy_rows(cf_context *ctx, cf_mem dst, size_t dst_pitch, cf_mem src, size_t src_pitch, size_t width,
                       size_t rows) {
  if (rows == 0 || width == 0) return CF_OK;
  size_t src_origin[3] = {src.off * 4, 0, 0}, dst_origin[3] = {dst.off * 4, 0, 0}, region[3] = {width * 4, rows, 1};
  CF_CHECK(clEnqueueCopyBufferRect(ctx->queue, src.buf, dst.buf, src_origin, dst_origin, region, src_pitch * 4, 0,
                                   dst_pitch * 4, 0, 0, NULL, NULL));
  return CF_OK;
}

cf_status cf_map_read(cf_context *ctx, cf_mem m, size_t n, const float **host) {
  cl_int err;
  *host = clEnqueueMapBuffer(ctx->queue, m.buf, CL_TRUE, CL_MAP_READ, m.off * 4, (n ? n : 1) * 4, 0, NULL, NULL, &err);
  if (err != CL_SUCCESS) return cf_report(err, "clEnqueueMapBuffer", __FILE__, __LINE__, "%zu bytes to read", n * 4);
  return CF_OK;
}

cf_status cf_unmap(cf_context *ctx, cl_mem buf, const void *host) {
  CF_CHECK(clEnqueueUnmapMemObject(ctx->queue, buf, (void *)host, 0, NULL, NULL));
  return CF_OK;
}

cf_status cf_fill(cf_context *ctx, cf_mem m, float value, size_t n) {
  int cpu = cf_context_cpu_shapes(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "elementwise", cpu ? "fill_cpu" : "fill");
  cf_arg_mem(&L, m);
  cf_arg_float(&L, value);
  cf_arg_int(&L, (int)n);
  size_t global = cpu ? (n + 4095) / 4096 : n;  /* FILL_CHUNK floats an item on CPUs */
  size_t local = cpu ? 1 : cf_program_local(ctx, "elementwise", 64);
  return cf_launch_run(&L, 1, &global, &local);
}
