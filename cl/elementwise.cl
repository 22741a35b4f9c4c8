// Elementwise helpers over flat float arrays. Every pointer comes with an element offset
// (the host passes (buffer, offset) pairs instead of sub-buffers).

__kernel void fill(__global float *x, uint x_off, float value, int n) {
  int i = get_global_id(0);
  if (i < n) x[x_off + i] = value;
}

// On CPUs an item fills FILL_CHUNK floats with 64-byte stores: an item per float made PoCL start a
// work-group per 64 floats, and zeroing kjv-small's 4.9M gradients ran at 21-25 GB/s.
#define FILL_CHUNK 4096
__kernel void fill_cpu(__global float *x, uint x_off, float value, int n) {
  size_t i0 = get_global_id(0) * (size_t)FILL_CHUNK, end = min(i0 + FILL_CHUNK, (size_t)n);
  __global float *p = x + x_off;
  size_t i = i0;
  for (; i + 16 <= end; i += 16) vstore16((float16)(value), 0, p + i);
  for (; i < end; i++) p[i] = value;
}

// x (n) *= alpha, in place.
__kernel void scale(__global float *x, uint x_off, float alpha, int n) {
  int i = get_global_id(0);
  if (i < n) x[x_off + i] *= alpha;
}
