// Inverted dropout, the mask regenerated from Philox (never stored). One work-item per
// CF_DROPOUT_ITEM elements (cl/dropout.clh: 64 on CPUs, 16 Philox calls in 16-lane vectors; 4
// elsewhere, one call); the last, partial item goes group by group. Dropped elements are
// multiplied by 0 (a NaN stays NaN, as in a framework that multiplies by the mask).
#include "philox.clh"
#include "dropout.clh"

// out (n) = in (n) * mask * scale; out may alias in (the in-place forward and backward).
__kernel void dropout_forward(__global float *out, uint out_off, __global const float *in, uint in_off, int n,
                              float p, float scale, uint seed, uint step, uint tensor_id, uint group0) {
  uint i = CF_DROPOUT_ITEM * get_global_id(0);
  if (i >= (uint)n) return;
  cf_dropout_item(out + out_off + i, 0, in + in_off + i, i, (uint)n, p, scale, seed, step, tensor_id, group0);
}
