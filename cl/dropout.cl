// Inverted dropout, the mask regenerated from Philox (never stored). One work-item per group of
// 4 elements, the 4 words of one Philox call. Dropped elements are multiplied by 0 (a NaN stays
// NaN, as in a framework that multiplies by the mask).
#include "philox.clh"
#include "dropout.clh"

// out (n) = in (n) * mask * scale; out may alias in (the in-place forward and backward).
__kernel void dropout_forward(__global float *out, uint out_off, __global const float *in, uint in_off, int n,
                              float p, float scale, uint seed, uint step, uint tensor_id) {
  uint g = get_global_id(0), i = 4 * g;
  if (i >= (uint)n) return;
  float4 f = cf_dropout_factors(seed, step, tensor_id, g, p, scale);
  __global float *y = out + out_off + i;
  __global const float *x = in + in_off + i;
  if (i + 4 <= (uint)n) {
    vstore4(vload4(0, x) * f, 0, y);
  } else {
    y[0] = x[0] * f.x;
    if (i + 1 < (uint)n) y[1] = x[1] * f.y;
    if (i + 2 < (uint)n) y[2] = x[2] * f.z;
  }
}
