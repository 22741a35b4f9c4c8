// Causal multi-head self-attention around the batched GEMMs: the softmax (forward, and backward
// fused into one kernel) and the regeneration of the dropout mask. The GEMMs themselves (q.k^T,
// P.v and their gradients, each head read and written in place) are in src/ops/attention.c.
// Every pointer comes with an element offset. Flat indices are int: tensors < 2^31 elements.
#include "philox.clh"
#include "dropout.clh"
#include "vecmath.clh"

// ---------- dropout ----------

// pdrop = att * mask / (1-p) over the flat (B, NH, T, T) tensor of n elements; one work-item per
// CF_DROPOUT_ITEM elements (cl/dropout.clh).
__kernel void attention_dropout(__global float *pdrop, uint pdrop_off, __global const float *att, uint att_off,
                                int n, float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  uint i = CF_DROPOUT_ITEM * get_global_id(0);
  if (i >= (uint)n) return;
  cf_dropout_item(pdrop + pdrop_off + i, 0, att + att_off + i, i, (uint)n, p, inv_keep, seed, step, tensor_id, group0);
}

// ---------- softmax ----------

#if CF_DEVICE_IS_CPU

// On CPUs (PoCL runs barriers and per-row work-groups slowly) the softmax kernels take one row
// (b, h, t) per work-item instead, walking it with 16-float vectors; same arguments, same
// results up to the order of the sums (fixed, so still deterministic). The host launches
// B*NH*T items (src/ops/attention.c).

#define ATT_LANES ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

// dst[j] = src[j] * dropout factor of flat element base + j, for at least j < n and at most
// j < T (dst may be src; entries n <= j < T may be scaled too: the callers overwrite them or
// know them 0). When base is a multiple of 4, 64 entries (16 Philox groups) at a time in 16-lane
// vectors, else group by group. Returns the end of what it wrote.
inline int att_dropout_row(__global float *dst, __global const float *src, uint base, int n, int T, float p,
                           float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  int j = 0;
  if (base % 4u == 0u) {
    for (; j < n; j += 64) {
      float16 f[4];
      cf_dropout_factors64(seed, step, tensor_id, group0, (base + (uint)j) / 4u, p, inv_keep, f);
      if (j + 64 <= T) {
        for (int k = 0; k < 4; k++) vstore16(vload16(k, src + j) * f[k], k, dst + j);
      } else {
        __private const float *fs = (__private const float *)f;
        for (int k = 0; j + k < n; k++) dst[j + k] = src[j + k] * fs[k];
        return n;
      }
    }
    return j;
  }
  while (j < n) {
    uint i = base + (uint)j;
    float4 f = cf_dropout_factors(seed, step, tensor_id, group0, i / 4u, p, inv_keep);
    float fj[4] = {f.x, f.y, f.z, f.w};
    for (uint k = i % 4u; k < 4u && j < n; k++, j++) dst[j] = src[j] * fj[k];
  }
  return n;
}

// dst[j] = 0 for from <= j < T.
inline void att_zero(__global float *dst, int from, int T) {
  int j = from;
  for (; j + 16 <= T; j += 16) vstore16((float16)(0.0f), 0, dst + j);
  for (; j < T; j++) dst[j] = 0.0f;
}

// att (B, NH, T, T) holds q.k^T on entry and the probabilities P = softmax(scale * q.k^T) over the
// keys j <= t with key_mask[b, j] != 0 on exit; every other entry is written 0, and a row without
// any valid key is all 0. When p > 0, also pdrop = P * dropout mask / (1-p). One row per item:
// max, then the exponentials written in place and summed, then the normalisation (the row stays
// in cache between the passes). The 16-float chunks that straddle the diagonal are masked by lane.
__kernel void attention_softmax_forward(__global float *att, uint att_off, __global float *pdrop, uint pdrop_off,
                                        __global const int *key_mask, uint key_mask_off, int has_mask,
                                        int B, int NH, int T, float scale,
                                        float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  int row = get_global_id(0);
  if (row >= B * NH * T) return;
  int t = row % T, b = row / (NH * T), n = t + 1, T16 = T / 16 * 16;
  int nv = min((n + 15) / 16 * 16, T16);  // the vector part: chunks holding causal entries
  __global float *a = att + att_off + (size_t)row * T;
  __global const int *km = key_mask + key_mask_off + (size_t)b * T;

  float m = -INFINITY, sum = 0.0f;
  if (has_mask) {
    for (int j = 0; j < n; j++)
      if (km[j]) m = fmax(m, a[j]);
    if (m > -INFINITY)
      for (int j = 0; j < n; j++) {
        float e = km[j] ? exp((a[j] - m) * scale) : 0.0f;
        a[j] = e;
        sum += e;
      }
  } else {
    float16 m16 = (float16)(-INFINITY);
    for (int j = 0; j < nv; j += 16)
      m16 = fmax(m16, select((float16)(-INFINITY), vload16(0, a + j), j + ATT_LANES < n));
    m = cf_hmax16(m16);
    for (int j = nv; j < n; j++) m = fmax(m, a[j]);
    if (m > -INFINITY) {
      float16 s16 = (float16)(0.0f);
      for (int j = 0; j < nv; j += 16) {
        float16 e = select((float16)(0.0f), cf_exp16_neg((vload16(0, a + j) - m) * scale), j + ATT_LANES < n);
        vstore16(e, 0, a + j);
        s16 += e;
      }
      sum = cf_hsum16(s16);
      for (int j = nv; j < n; j++) {
        float e = exp((a[j] - m) * scale);
        a[j] = e;
        sum += e;
      }
    }
  }
  float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  int end = n;  // a[end..T) is zeroed below
  if (inv > 0.0f) {
    if (!has_mask) {  // the vector part holds the exponentials, 0 past the diagonal
      for (int j = 0; j < nv; j += 16) vstore16(vload16(0, a + j) * inv, 0, a + j);
      for (int j = nv; j < n; j++) a[j] *= inv;
      end = max(nv, n);
    } else {
      for (int j = 0; j < n; j++) a[j] *= inv;
    }
  } else {
    end = 0;
  }
  att_zero(a, end, T);

  if (p > 0.0f) {
    __global float *pd = pdrop + pdrop_off + (size_t)row * T;
    att_zero(pd, att_dropout_row(pd, a, (uint)row * (uint)T, n, T, p, inv_keep, seed, step, tensor_id, group0), T);
  }
}

// The softmax backward, fused: datt holds dL/dP_drop on entry (dy.v^T) and dL/d(q.k^T) on exit:
// dP = dP_drop * mask / (1-p) (mask regenerated from Philox), then
// dpreatt = scale * P * (dP - sum_j P_j dP_j) on the causal entries j <= t, 0 elsewhere.
__kernel void attention_softmax_backward(__global float *datt, uint datt_off, __global const float *att,
                                         uint att_off, int B, int NH, int T, float scale,
                                         float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  int row = get_global_id(0);
  if (row >= B * NH * T) return;
  int t = row % T, n = t + 1, T16 = T / 16 * 16;
  int nv = min((n + 15) / 16 * 16, T16);
  __global float *g = datt + datt_off + (size_t)row * T;
  __global const float *a = att + att_off + (size_t)row * T;

  if (p > 0.0f) att_dropout_row(g, g, (uint)row * (uint)T, n, T, p, inv_keep, seed, step, tensor_id, group0);
  float16 d16 = (float16)(0.0f);
  for (int j = 0; j < nv; j += 16)
    d16 += select((float16)(0.0f), vload16(0, a + j) * vload16(0, g + j), j + ATT_LANES < n);
  float dot = cf_hsum16(d16);
  for (int j = nv; j < n; j++) dot += a[j] * g[j];
  for (int j = 0; j < nv; j += 16)
    vstore16(select((float16)(0.0f), scale * vload16(0, a + j) * (vload16(0, g + j) - dot), j + ATT_LANES < n), 0,
             g + j);
  for (int j = nv; j < n; j++) g[j] = scale * a[j] * (g[j] - dot);
  att_zero(g, max(nv, n), T);
}

#else  // one work-group per row

// Work-group reductions over a power-of-two local size <= CF_WG, in a fixed tree order
// (deterministic). Every work-item of the group must call them.
inline float wg_sum(__local float *red, float v) {
  int lid = get_local_id(0), lsz = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float wg_max(__local float *red, float v) {
  int lid = get_local_id(0), lsz = get_local_size(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// Rows of att (B, NH, T, T) are not aligned to the groups of 4 elements that share one Philox
// call, so the passes that need the dropout mask walk a row by those groups: work-item lid takes
// groups g0+lid, g0+lid+lsz, ... (g0 = the group of the row's first element), each covering
// row entries j0..j0+3 (j0 = 4g - row*T, possibly negative at the row's start).
#define FOR_ROW_QUADS(row, T, j0)                                                     \
  for (int g_ = (int)(((uint)(row) * (uint)(T)) / 4u) + (int)get_local_id(0), j0;     \
       j0 = 4 * g_ - (row) * (T), j0 < (T); g_ += (int)get_local_size(0))

// The 4 inverted-dropout factors (1/(1-p) if kept, else 0) of the elements of group g.
inline float4 attn_keep4(uint g, float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  uint4 w = cf_random_bits(seed, step, tensor_id, group0 + g);
  float4 u = (float4)(cf_uniform24(w.x), cf_uniform24(w.y), cf_uniform24(w.z), cf_uniform24(w.w));
  return select((float4)(0.0f), (float4)(inv_keep), u >= (float4)(p));
}

inline float quad_elem(float4 v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// One work-group per row (b, h, t) of att (B, NH, T, T), which holds q.k^T on entry and the
// probabilities P = softmax(scale * q.k^T) over the keys j <= t with key_mask[b, j] != 0 on exit;
// every other entry is written 0, and a row without any valid key is all 0. When p > 0, also
// pdrop = P * dropout mask / (1-p). The max and sum passes only read; the last pass recomputes
// the exponentials (cheaper than a write and a read of the row) and is the only one to write.
__kernel void attention_softmax_forward(__global float *att, uint att_off, __global float *pdrop, uint pdrop_off,
                                        __global const int *key_mask, uint key_mask_off, int has_mask,
                                        int B, int NH, int T, float scale,
                                        float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  __local float red[CF_WG];
  int row = get_group_id(0);
  int lid = get_local_id(0), lsz = get_local_size(0);
  int t = row % T, b = row / (NH * T);
  __global float *a = att + att_off + (size_t)row * T;
  __global const int *km = key_mask + key_mask_off + (size_t)b * T;

  float m = -INFINITY;
  for (int j = lid; j <= t; j += lsz)
    if (!has_mask || km[j]) m = fmax(m, a[j]);
  m = wg_max(red, m);

  float sum = 0.0f;
  if (m > -INFINITY)
    for (int j = lid; j <= t; j += lsz)
      if (!has_mask || km[j]) sum += exp((a[j] - m) * scale);
  sum = wg_sum(red, sum);
  float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  // The last pass writes entries that other items read above, and wg_sum's barriers fence only
  // local memory: without a global fence that is a data race (Oclgrind reports it).
  barrier(CLK_GLOBAL_MEM_FENCE);

  FOR_ROW_QUADS(row, T, j0) {
    float4 keep = (float4)(1.0f);
    if (p > 0.0f && j0 <= t) keep = attn_keep4((uint)(row * T + j0) / 4u, p, inv_keep, seed, step, tensor_id, group0);
    for (int k = 0; k < 4; k++) {
      int j = j0 + k;
      if (j < 0 || j >= T) continue;
      float pj = (j <= t && inv > 0.0f && (!has_mask || km[j])) ? exp((a[j] - m) * scale) * inv : 0.0f;
      a[j] = pj;
      if (p > 0.0f) pdrop[pdrop_off + (size_t)row * T + j] = pj * quad_elem(keep, k);
    }
  }
}

// The softmax backward, fused: datt holds dL/dP_drop on entry (dy.v^T) and dL/d(q.k^T) on exit:
// dP = dP_drop * mask / (1-p) (mask regenerated from Philox), then
// dpreatt = scale * P * (dP - sum_j P_j dP_j) on the causal entries j <= t, 0 elsewhere.
// Both passes use the same partition of the row, so each work-item rereads only its own writes.
__kernel void attention_softmax_backward(__global float *datt, uint datt_off, __global const float *att,
                                         uint att_off, int B, int NH, int T, float scale,
                                         float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  __local float red[CF_WG];
  int row = get_group_id(0);
  int t = row % T;
  __global float *g = datt + datt_off + (size_t)row * T;
  __global const float *a = att + att_off + (size_t)row * T;

  float dot = 0.0f;
  FOR_ROW_QUADS(row, T, j0) {
    if (j0 > t) continue;
    float4 keep = (float4)(1.0f);
    if (p > 0.0f) keep = attn_keep4((uint)(row * T + j0) / 4u, p, inv_keep, seed, step, tensor_id, group0);
    for (int k = 0; k < 4; k++) {
      int j = j0 + k;
      if (j < 0 || j > t) continue;
      float dp = g[j];
      if (p > 0.0f) g[j] = dp = dp * quad_elem(keep, k);
      dot += a[j] * dp;
    }
  }
  dot = wg_sum(red, dot);

  FOR_ROW_QUADS(row, T, j0) {
    for (int k = 0; k < 4; k++) {
      int j = j0 + k;
      if (j >= 0 && j < T) g[j] = j <= t ? scale * a[j] * (g[j] - dot) : 0.0f;
    }
  }
}

#endif
