// Optimizer steps over flat parameter buffers, L2 norms and clipping. The clip factor is read
// from a norm held on the device (use_norm = 0: no clipping), so no host round trip is needed.

inline float clip_scale(__global const float *norm, uint norm_off, int use_norm, float clip_norm) {
  return use_norm ? fmin(1.0f, clip_norm / (norm[norm_off] + 1e-6f)) : 1.0f;
}

// Adam (decoupled = 0, L2 added to the gradient) or AdamW (decoupled = 1). bc1 = 1 - beta1^step,
// bc2 = 1 - beta2^step, computed on the host in double.
__kernel void adam_update(__global float *params, uint params_off, __global const float *grads, uint grads_off,
                          __global float *m, uint m_off, __global float *v, uint v_off, uint n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, int decoupled,
                          float bc1, float bc2,
                          __global const float *norm, uint norm_off, int use_norm, float clip_norm) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  float p = params[params_off + i];
  float g = grads[grads_off + i] * clip_scale(norm, norm_off, use_norm, clip_norm);
  if (!decoupled) g += weight_decay * p;
  float mi = beta1 * m[m_off + i] + (1.0f - beta1) * g;
  float vi = beta2 * v[v_off + i] + (1.0f - beta2) * g * g;
  m[m_off + i] = mi;
  v[v_off + i] = vi;
  if (decoupled) p -= lr * weight_decay * p;
  p -= lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
  params[params_off + i] = p;
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
  red[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = CF_WG / 2; h > 0; h >>= 1) {
    if (lid < h) red[lid] += red[lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return red[0];
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
  red[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = CF_WG / 2; h > 0; h >>= 1) {
    if (lid < h) red[lid] += red[lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[out_off] = sqrt(red[0]);
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
