// Residual adds: plain, and fused with the branch's dropout (one pass over memory).
#include "philox.clh"
#include "dropout.clh"

// out (n) = inp1 (n) + inp2 (n); out may alias either input.
__kernel void residual_forward(__global float *out, uint out_off, __global const float *inp1, uint inp1_off,
                               __global const float *inp2, uint inp2_off, int n) {
  int i = get_global_id(0);
  if (i < n) out[out_off + i] = inp1[inp1_off + i] + inp2[inp2_off + i];
}

// out (n) = res (n) + branch (n) * mask * scale, CF_DROPOUT_ITEM elements per item (see
// cl/dropout.clh). out may alias res or branch.
__kernel void residual_dropout_forward(__global float *out, uint out_off, __global const float *res, uint res_off,
                                       __global const float *branch, uint branch_off, int n, float p, float scale,
                                       uint seed, uint step, uint tensor_id, uint group0) {
  uint i = CF_DROPOUT_ITEM * get_global_id(0);
  if (i >= (uint)n) return;
  cf_dropout_item(out + out_off + i, res + res_off + i, branch + branch_off + i, i, (uint)n, p, scale, seed, step,
                  tensor_id, group0);
}
