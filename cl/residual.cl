// Residual adds: plain, and fused with the branch's dropout (one pass over memory).
#include "philox.clh"
#include "dropout.clh"

// out (n) = inp1 (n) + inp2 (n); out may alias either input.
__kernel void residual_forward(__global float *out, uint out_off, __global const float *inp1, uint inp1_off,
                               __global const float *inp2, uint inp2_off, int n) {
  int i = get_global_id(0);
  if (i < n) out[out_off + i] = inp1[inp1_off + i] + inp2[inp2_off + i];
}

// out (n) = res (n) + branch (n) * mask * scale, 4 elements per item (one Philox call).
// out may alias res or branch.
__kernel void residual_dropout_forward(__global float *out, uint out_off, __global const float *res, uint res_off,
                                       __global const float *branch, uint branch_off, int n, float p, float scale,
                                       uint seed, uint step, uint tensor_id) {
  uint g = get_global_id(0), i = 4 * g;
  if (i >= (uint)n) return;
  float4 f = cf_dropout_factors(seed, step, tensor_id, g, p, scale);
  __global float *y = out + out_off + i;
  __global const float *r = res + res_off + i, *b = branch + branch_off + i;
  if (i + 4 <= (uint)n) {
    vstore4(vload4(0, r) + vload4(0, b) * f, 0, y);
  } else {
    y[0] = r[0] + b[0] * f.x;
    if (i + 1 < (uint)n) y[1] = r[1] + b[1] * f.y;
    if (i + 2 < (uint)n) y[2] = r[2] + b[2] * f.z;
  }
}
