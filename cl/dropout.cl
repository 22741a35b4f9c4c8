// Inverted dropout, the mask regenerated from Philox (never stored). One work-item per 64
// elements (16 Philox calls in 16-lane vectors, see cf_dropout_factors64); the last, partial
// chunk goes group by group. Dropped elements are multiplied by 0 (a NaN stays NaN, as in a
// framework that multiplies by the mask).
#include "philox.clh"
#include "dropout.clh"

// out (n) = in (n) * mask * scale; out may alias in (the in-place forward and backward).
__kernel void dropout_forward(__global float *out, uint out_off, __global const float *in, uint in_off, int n,
                              float p, float scale, uint seed, uint step, uint tensor_id) {
  uint i = 64u * get_global_id(0);
  if (i >= (uint)n) return;
  __global float *y = out + out_off + i;
  __global const float *x = in + in_off + i;
  if (i + 64u <= (uint)n) {
    float16 f[4];
    cf_dropout_factors64(seed, step, tensor_id, i / 4u, p, scale, f);
    for (int k = 0; k < 4; k++) vstore16(vload16(k, x) * f[k], k, y);
    return;
  }
  for (uint j = 0; i + j < (uint)n; j += 4) {
    float4 f = cf_dropout_factors(seed, step, tensor_id, (i + j) / 4u, p, scale);
    float fj[4] = {f.x, f.y, f.z, f.w};
    for (uint k = 0; k < 4u && i + j + k < (uint)n; k++) y[j + k] = x[j + k] * fj[k];
  }
}
