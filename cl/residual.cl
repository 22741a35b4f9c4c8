// Residual adds: plain, and fused with the branch's dropout (one pass over memory).
#include "philox.clh"
#include "dropout.clh"

// out (n) = inp1 (n) + inp2 (n); out may alias either input.
__kernel void residual_forward(__global float *out, uint out_off, __global const float *inp1, uint inp1_off,
                               __global const float *inp2, uint inp2_off, int n) {
  int i = get_global_id(0);
  if (i < n) out[out_off + i] = inp1[inp1_off + i] + inp2[inp2_off + i];
}

// out (n) = res (n) + branch (n) * mask * scale, 64 elements per item (16 Philox calls in
// 16-lane vectors), the last partial chunk group by group. out may alias res or branch.
__kernel void residual_dropout_forward(__global float *out, uint out_off, __global const float *res, uint res_off,
                                       __global const float *branch, uint branch_off, int n, float p, float scale,
                                       uint seed, uint step, uint tensor_id) {
  uint i = 64u * get_global_id(0);
  if (i >= (uint)n) return;
  __global float *y = out + out_off + i;
  __global const float *r = res + res_off + i, *b = branch + branch_off + i;
  if (i + 64u <= (uint)n) {
    float16 f[4];
    cf_dropout_factors64(seed, step, tensor_id, i / 4u, p, scale, f);
    for (int k = 0; k < 4; k++) vstore16(vload16(k, r) + vload16(k, b) * f[k], k, y);
    return;
  }
  for (uint j = 0; i + j < (uint)n; j += 4) {
    float4 f = cf_dropout_factors(seed, step, tensor_id, (i + j) / 4u, p, scale);
    float fj[4] = {f.x, f.y, f.z, f.w};
    for (uint k = 0; k < 4u && i + j + k < (uint)n; k++) y[j + k] = r[j + k] + b[j + k] * fj[k];
  }
}
