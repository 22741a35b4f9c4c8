// Optimizer steps over flat parameter buffers, L2 norms and clipping. The clip factor is read
// from a norm held on the device (use_norm = 0: no clipping), so no host round trip is needed.
#include "reduce.clh"

inline float clip_scale(__global const float *norm, uint norm_off, int use_norm, float clip_norm) {
  return use_norm ? fmin(1.0f, clip_norm / (norm[norm_off] + 1e-6f)) : 1.0f;
}

// Adam (decoupled = 0, L2 added to the gradient) or AdamW (decoupled = 1). bc1 = 1 - beta1^step,
// bc2 = 1 - beta2^step, computed on the host in double. The element step is written once for a
// float and for a float16 (CPUs: 16 elements per work-item, the last item one by one).
#define ADAM_STEP(T)                                                                                     \
  inline void adam_step_##T(T *p, T *mi, T *vi, T g, float lr, float beta1, float beta2, float eps,      \
                            float weight_decay, int decoupled, float bc1, float bc2) {                   \
    if (!decoupled) g += weight_decay * *p;                                                              \
    *mi = beta1 * *mi + (1.0f - beta1) * g;                                                              \
    *vi = beta2 * *vi + (1.0f - beta2) * g * g;                                                          \
    if (decoupled) *p -= lr * weight_decay * *p;                                                         \
    *p -= lr * (*mi / bc1) / (sqrt(*vi / bc2) + eps);                                                    \
  }
ADAM_STEP(float)
ADAM_STEP(float16)

__kernel void adam_update(__global float *params, uint params_off, __global const float *grads, uint grads_off,
                          __global float *m, uint m_off, __global float *v, uint v_off, uint n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int decoupled,
                          float bc1, float bc2,
                          __global const float *norm, uint norm_off, int use_norm, float clip_norm) {
  float cs = clip_scale(norm, norm_off, use_norm, clip_norm);
#if CF_DEVICE_IS_CPU
  size_t i = get_global_id(0) * 16;
  if (i >= n) return;
  __global float *pp = params + params_off + i, *mp = m + m_off + i, *vp = v + v_off + i;
  __global const float *gp = grads + grads_off + i;
  if (i + 16 <= n) {
    float16 p = vload16(0, pp), mi = vload16(0, mp), vi = vload16(0, vp);
    adam_step_float16(&p, &mi, &vi, vload16(0, gp) * cs, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2);
    vstore16(mi, 0, mp);
    vstore16(vi, 0, vp);
    vstore16(p, 0, pp);
    return;
  }
  for (size_t k = 0; i + k < n; k++) {
    float p = pp[k], mi = mp[k], vi = vp[k];
    adam_step_float(&p, &mi, &vi, gp[k] * cs, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2);
    mp[k] = mi;
    vp[k] = vi;
    pp[k] = p;
  }
#else
  size_t i = get_global_id(0);
  if (i >= n) return;
  float p = params[params_off + i], mi = m[m_off + i], vi = v[v_off + i];
  adam_step_float(&p, &mi, &vi, grads[grads_off + i] * cs, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2);
  m[m_off + i] = mi;
  v[v_off + i] = vi;
  params[params_off + i] = p;
#endif
}

// SGD with momentum, PyTorch's convention: buf = momentum * buf + g; p -= lr * buf.
// has_buf = 0 (momentum 0): p -= lr * g.
__kernel void sgd_update(__global float *params, uint params_off, __global const float *grads, uint grads_off,
                         __global float *buf, uint buf_off, int has_buf, uint n,
                         float lr, float momentum, float weight_decay,
                         __global const float *norm, uint norm_off, int use_norm, float clip_norm) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float p = params[params_off + i];
  float g = grads[grads_off + i] * clip_scale(norm, norm_off, use_norm, clip_norm) + weight_decay * p;
  if (has_buf) {
    g = momentum * buf[buf_off + i] + g;
    buf[buf_off + i] = g;
  }
  params[params_off + i] = p - lr * g;
}

// x *= min(1, clip_norm / (norm + 1e-6)).
__kernel void clip_by_norm(__global float *x, uint x_off, uint n,
                           __global const float *norm, uint norm_off, float clip_norm) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  x[x_off + i] *= clip_scale(norm, norm_off, 1, clip_norm);
}

#if CF_DEVICE_IS_CPU

// On CPUs one work-item per block (no barriers; blocks are the GPU path's: block j covers a
// contiguous range of ceil(count / nb) elements), summed with 16-float vectors in a fixed order.
inline float block_sumsq1(__global const float *x, uint count, uint j, uint nb) {
  uint chunk = (count + nb - 1) / nb;
  uint lo = min(count, j * chunk), hi = min(count, lo + chunk), i = lo;
  float16 s16 = (float16)(0.0f);
  for (; i + 16 <= hi; i += 16) {
    float16 xi = vload16(0, x + i);
    s16 += xi * xi;
  }
  float8 s8 = s16.lo + s16.hi;
  float4 s4 = s8.lo + s8.hi;
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  for (; i < hi; i++) s += x[i] * x[i];
  return s;
}

// Stage 1 of the global norm: partial[j] = sum of squares of block j of nb (items j >= nb idle).
__kernel void sumsq_partials(__global float *partial, uint partial_off, __global const float *x, uint x_off, uint n,
                             uint nb) {
  uint j = get_global_id(0);
  if (j < nb) partial[partial_off + j] = block_sumsq1(x + x_off, n, j, nb);
}

// Stage 2: out = sqrt(sum of the nb partials in order), one work-item.
__kernel void norm_finish(__global float *out, uint out_off, __global const float *partial, uint partial_off, uint nb) {
  if (get_global_id(0) != 0) return;
  float s = 0.0f;
  for (uint i = 0; i < nb; i++) s += partial[partial_off + i];
  out[out_off] = sqrt(s);
}

// Per-segment stage 1: item g (exactly one per block: local size 1) reads its row of the block
// table, (offset, count, j, nb), and writes the partial sum of squares of block j of its segment.
__kernel void segment_sumsq_partials(__global float *partial, uint partial_off, __global const uint *table,
                                     uint table_off, __global const float *x, uint x_off) {
  uint g = get_global_id(0);
  __global const uint *row = table + table_off + 4 * (size_t)g;
  partial[partial_off + g] = block_sumsq1(x + x_off + row[0], row[1], row[2], row[3]);
}

#else  // work-groups of CF_WG with a fixed tree

// Sum of squares of block j of nb over x[0, count): block j covers a contiguous range of
// ceil(count / nb) elements, work-item lid of the block takes every CF_WG-th float4 of it
// (coalesced on GPUs, cache-friendly on CPUs), then a fixed tree over the group. Every item
// gets the result.
inline float block_sumsq(__global const float *x, uint count, uint j, uint nb, __local float *red) {
  int lid = get_local_id(0);
  uint chunk = (count + nb - 1) / nb;
  uint lo = j * chunk, hi = min(count, lo + chunk);
  // float4 loads and four independent running sums (a single chain is bound by add latency),
  // then the < 4 leftover elements of the block
  float4 s4 = (float4)(0.0f);
  uint n4 = (hi - lo) / 4;
  for (uint g = lid; g < n4; g += CF_WG) {
    float4 xi = vload4(0, x + lo + 4 * g);
    s4 += xi * xi;
  }
  float s = (s4.x + s4.y) + (s4.z + s4.w);
  uint i = lo + 4 * n4 + lid;
  if (i < hi) s += x[i] * x[i];
  return cf_group_sum(s, red);
}

// Stage 1 of the global norm: partial[j] = sum of squares of block j of nb.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void sumsq_partials(__global float *partial, uint partial_off, __global const float *x, uint x_off, uint n, uint nb) {
  __local float red[CF_WG];
  uint j = get_group_id(0);
  float s = block_sumsq(x + x_off, n, j, nb, red);
  if (get_local_id(0) == 0) partial[partial_off + j] = s;
}

// Stage 2: out = sqrt(sum of the nb partials), one work-group.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void norm_finish(__global float *out, uint out_off, __global const float *partial, uint partial_off, uint nb) {
  __local float red[CF_WG];
  int lid = get_local_id(0);
  float s = 0.0f;
  for (uint i = lid; i < nb; i += CF_WG) s += partial[partial_off + i];
  float total = cf_group_sum(s, red);
  if (lid == 0) out[out_off] = sqrt(total);
}

// Per-segment stage 1: group g reads its row of the block table, (offset, count, j, nb), and
// writes the partial sum of squares of block j of its segment.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void segment_sumsq_partials(__global float *partial, uint partial_off, __global const uint *table, uint table_off,
                            __global const float *x, uint x_off) {
  __local float red[CF_WG];
  uint g = get_group_id(0);
  __global const uint *row = table + table_off + 4 * (size_t)g;
  float s = block_sumsq(x + x_off + row[0], row[1], row[2], row[3], red);
  if (get_local_id(0) == 0) partial[partial_off + g] = s;
}

#endif

// Per-segment stage 2: one work-item per segment sums its nb partials in order (nb is small).
// seg holds (first block, nb) per segment.
__kernel void segment_norms_finish(__global float *out, uint out_off, __global const float *partial, uint partial_off,
                                   __global const uint *seg, uint seg_off, int nseg) {
  int s = get_global_id(0);
  if (s >= nseg) return;
  uint first = seg[seg_off + 2 * s], nb = seg[seg_off + 2 * s + 1];
  float acc = 0.0f;
  for (uint k = 0; k < nb; k++) acc += partial[partial_off + first + k];
  out[out_off + s] = sqrt(acc);
}

// The divergence watch, once a training step with no host round trip. state[0] is 0 while every
// step so far had a finite gradient norm and a finite loss <= loss_limit, 1 at the first step that
// did not (state[1], state[2] then keep that step's loss and norm), 2 at every step after it.
__kernel void divergence_watch(__global float *state, uint state_off, __global const float *loss, uint loss_off,
                               __global const float *norm, uint norm_off, float loss_limit) {
  if (get_global_id(0) != 0) return;
  __global float *w = state + state_off;
  float l = loss[loss_off], g = norm[norm_off];
  if (w[0] != 0.0f) {
    w[0] = 2.0f;
    return;
  }
  if (isfinite(l) && isfinite(g) && l <= loss_limit) return;
  w[0] = 1.0f;
  w[1] = l;
  w[2] = g;
}

// At the step the watch has just found bad (state[0] == 1), item s writes flags[s] = 1 when
// segment s of x (table row s: offset, count) holds a NaN or an infinity, else 0. At any other
// step every item returns at once, so the scan costs only on that one step.
__kernel void nonfinite_segments(__global float *flags, uint flags_off, __global const float *state, uint state_off,
                                 __global const float *x, uint x_off, __global const uint *table, uint table_off,
                                 int nseg) {
  int s = get_global_id(0);
  if (s >= nseg || state[state_off] != 1.0f) return;
  uint off = table[table_off + 2 * s], count = table[table_off + 2 * s + 1];
  __global const float *p = x + x_off + off;
  // 64 floats a trip: Mesa's llvmpipe ends an item's loops after 65535 trips (a 1024 x 256 matrix
  // read a float a trip was never read past its first 65535)
  int bad = 0;
  uint i = 0;
  for (; i + 64 <= count && !bad; i += 64) {
    float16 a = vload16(0, p + i), b = vload16(1, p + i), c = vload16(2, p + i), d = vload16(3, p + i);
    bad = any(isnan(a) | isinf(a) | isnan(b) | isinf(b) | isnan(c) | isinf(c) | isnan(d) | isinf(d));
  }
  for (; i < count && !bad; i++) bad = !isfinite(p[i]);
  flags[flags_off + s] = bad ? 1.0f : 0.0f;
}
