// Elementwise helpers over flat float arrays. Every pointer comes with an element offset
// (the host passes (buffer, offset) pairs instead of sub-buffers).

__kernel void fill(__global float *x, uint x_off, float value, int n) {
  int i = get_global_id(0);
  if (i < n) x[x_off + i] = value;
}

// x (n) *= alpha, in place.
__kernel void scale(__global float *x, uint x_off, float alpha, int n) {
  int i = get_global_id(0);
  if (i < n) x[x_off + i] *= alpha;
}
