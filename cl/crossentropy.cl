// Softmax cross-entropy with label smoothing eps and an ignore index. One work-group per row
// of logits; the softmax statistics (max M, S = sum exp(x - M)) are combined across the group
// in fixed trees (deterministic).
// A row counts when 0 <= target < V and target != ignore_index; others get loss 0, grad 0.

#include "vecmath.clh"

#if CF_DEVICE_IS_CPU

// On CPUs one row per work-item (PoCL runs per-row work-groups and barriers slowly), walking the
// row with 16-float vectors; N items in small groups (the launcher). Same arguments.

// M = max x and SX = sum x over a row of V, in a fixed order; four independent vector chains (a
// single one waits on its own latency every step).
inline void row_max_sum(__global const float *x, int V, float *M, float *SX) {
  int V16 = V / 16 * 16, V64 = V / 64 * 64;
  float16 m0 = (float16)(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  float16 x0 = (float16)(0.0f), x1 = x0, x2 = x0, x3 = x0;
  for (int v = 0; v < V64; v += 64) {
    float16 a = vload16(0, x + v), b = vload16(1, x + v), c = vload16(2, x + v), d = vload16(3, x + v);
    m0 = a > m0 ? a : m0;  // one max instruction (fmax adds NaN handling to every step)
    m1 = b > m1 ? b : m1;
    m2 = c > m2 ? c : m2;
    m3 = d > m3 ? d : m3;
    x0 += a;
    x1 += b;
    x2 += c;
    x3 += d;
  }
  for (int v = V64; v < V16; v += 16) {
    float16 a = vload16(0, x + v);
    m0 = a > m0 ? a : m0;
    x0 += a;
  }
  float m = cf_hmax16(fmax(fmax(m0, m1), fmax(m2, m3))), sx = cf_hsum16((x0 + x1) + (x2 + x3));
  for (int v = V16; v < V; v++) {
    m = fmax(m, x[v]);
    sx += x[v];
  }
  *M = m;
  *SX = sx;
}

// S = sum exp(x - M) over the row, in a fixed order (two vector chains); when e is not NULL it
// also stores each exp(x[v] - M) to e[v] (e may be x: each element is read before it is written).
inline float row_exp_sum(__global const float *x, int V, float M, __global float *e) {
  int V16 = V / 16 * 16, V32 = V / 32 * 32;
  float16 s0 = (float16)(0.0f), s1 = s0;
  for (int v = 0; v < V32; v += 32) {
    float16 a = cf_exp16_neg(vload16(0, x + v) - M), b = cf_exp16_neg(vload16(1, x + v) - M);
    s0 += a;
    s1 += b;
    if (e) {
      vstore16(a, 0, e + v);
      vstore16(b, 1, e + v);
    }
  }
  for (int v = V32; v < V16; v += 16) {
    float16 a = cf_exp16_neg(vload16(0, x + v) - M);
    s0 += a;
    if (e) vstore16(a, 0, e + v);
  }
  float s = cf_hsum16(s0 + s1);
  for (int v = V16; v < V; v++) {
    float a = exp(x[v] - M);
    s += a;
    if (e) e[v] = a;
  }
  return s;
}

// M = max x, S = sum exp(x - M), SX = sum x over a row of V, in a fixed order.
inline void row_stats1(__global const float *x, int V, float *M, float *S, float *SX) {
  row_max_sum(x, V, M, SX);
  *S = row_exp_sum(x, V, *M, 0);
}

// losses[row] = -sum_v q_v log p_v = (1-eps) * (log S - (x_t - M)) + eps * (log S - (mean x - M)).
__kernel void crossentropy_forward(__global float *losses, uint losses_off,
                                   __global const float *logits, uint logits_off,
                                   __global const int *targets, uint targets_off,
                                   int V, float eps, int ignore_index, int N) {
  int row = get_global_id(0);
  if (row >= N) return;
  int t = targets[targets_off + row];
  float l = 0.0f;
  if (t != ignore_index && t >= 0 && t < V) {
    __global const float *x = logits + logits_off + (size_t)row * V;
    float M, S, SX;
    row_stats1(x, V, &M, &S, &SX);
    float logS = log(S);
    l = (1.0f - eps) * (logS - (x[t] - M)) + eps * (logS - (SX / (float)V - M));
  }
  losses[losses_off + row] = l;
}

inline void ce_count(float *s, int *cnt, __global const float *losses, int t, int n, int V, int ignore_index) {
  if (t != ignore_index && t >= 0 && t < V) {
    *s += losses[n];
    (*cnt)++;
  }
}

// loss[0] = sum(losses) / count of counted rows (0 when none). One work-item, rows in order.
__kernel void crossentropy_mean(__global float *loss, uint loss_off,
                                __global const float *losses, uint losses_off,
                                __global const int *targets, uint targets_off,
                                int N, int V, int ignore_index) {
  if (get_global_id(0) != 0) return;
  float s = 0.0f;
  int cnt = 0, n = 0;
  // 8 rows a trip, in order: Mesa's llvmpipe ends an item's loops after 65535 trips
  for (; n + 8 <= N; n += 8)
#pragma unroll
    for (int k = 0; k < 8; k++)
      ce_count(&s, &cnt, losses + losses_off, targets[targets_off + n + k], n + k, V, ignore_index);
  for (; n < N; n++) ce_count(&s, &cnt, losses + losses_off, targets[targets_off + n], n, V, ignore_index);
  loss[loss_off] = cnt > 0 ? s / (float)cnt : 0.0f;
}

// An ignored row's gradient.
inline void zero_row(__global float *dx, int V) {
  int V16 = V / 16 * 16;
  for (int v = 0; v < V16; v += 16) vstore16((float16)(0.0f), 0, dx + v);
  for (int v = V16; v < V; v++) dx[v] = 0.0f;
}

// dlogits[row, v] = dloss * (p_v - q_v), 0 on ignored rows. dlogits may be logits: the item reads
// its row (and x[t]) before it writes it.
__kernel void crossentropy_backward(__global float *dlogits, uint dlogits_off,
                                    __global const float *logits, uint logits_off,
                                    __global const int *targets, uint targets_off,
                                    int V, float eps, int ignore_index, float dloss, int N) {
  int row = get_global_id(0);
  if (row >= N) return;
  int t = targets[targets_off + row], V16 = V / 16 * 16;
  __global float *dx = dlogits + dlogits_off + (size_t)row * V;
  __global const float *x = logits + logits_off + (size_t)row * V;
  if (!(t != ignore_index && t >= 0 && t < V)) {
    zero_row(dx, V);
    return;
  }
  float M, S, SX;
  row_stats1(x, V, &M, &S, &SX);
  float invS = 1.0f / S, qoff = eps / (float)V;
  float pt = exp(x[t] - M) * invS;  // before a write can overwrite x[t]
  for (int v = 0; v < V16; v += 16) vstore16(dloss * (cf_exp16_neg(vload16(0, x + v) - M) * invS - qoff), 0, dx + v);
  for (int v = V16; v < V; v++) dx[v] = dloss * (exp(x[v] - M) * invS - qoff);
  dx[t] = dloss * (pt - (1.0f - eps + qoff));
}

// The forward and the backward of a row together (the trainer runs both): losses[row] as
// crossentropy_forward, dlogits[row] as crossentropy_backward, bit for bit, with one exp per
// element instead of two: the exps go to dx while they are summed, then are scaled in place (from
// cache). dlogits may be logits.
__kernel void crossentropy_forward_backward(__global float *losses, uint losses_off,
                                            __global float *dlogits, uint dlogits_off,
                                            __global const float *logits, uint logits_off,
                                            __global const int *targets, uint targets_off,
                                            int V, float eps, int ignore_index, float dloss, int N) {
  int row = get_global_id(0);
  if (row >= N) return;
  int t = targets[targets_off + row], V16 = V / 16 * 16;
  __global float *dx = dlogits + dlogits_off + (size_t)row * V;
  __global const float *x = logits + logits_off + (size_t)row * V;
  if (!(t != ignore_index && t >= 0 && t < V)) {
    zero_row(dx, V);
    losses[losses_off + row] = 0.0f;
    return;
  }
  float M, SX;
  row_max_sum(x, V, &M, &SX);
  float xt = x[t], et = exp(xt - M);  // before dx can overwrite x[t]; et as the backward has it
  float S = row_exp_sum(x, V, M, dx), invS = 1.0f / S, qoff = eps / (float)V, logS = log(S);
  losses[losses_off + row] = (1.0f - eps) * (logS - (xt - M)) + eps * (logS - (SX / (float)V - M));
  for (int v = 0; v < V16; v += 16) vstore16(dloss * (vload16(0, dx + v) * invS - qoff), 0, dx + v);
  for (int v = V16; v < V; v++) dx[v] = dloss * (dx[v] * invS - qoff);
  float pt = et * invS;  // rounded apart, as the backward has it (no fused multiply-add)
  dx[t] = dloss * (pt - (1.0f - eps + qoff));
}

#else  // one work-group per row

// Row statistics over the group, returned to every work-item: M = max x, S = sum exp(x - M),
// SX = sum x. Two passes over the row (the second mostly from cache) so that exp runs once per
// element; fixed trees across the group.
inline void row_stats(__global const float *x, int V, __local float *lm, __local float *ls, __local float *lx,
                      float *M, float *S, float *SX) {
  int lid = get_local_id(0);
  float m = -INFINITY, sx = 0.0f;
  for (int v = lid; v < V; v += CF_WG) {
    float xv = x[v];
    m = fmax(m, xv);
    sx += xv;
  }
  lm[lid] = m;
  lx[lid] = sx;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int stride = CF_WG / 2; stride > 0; stride >>= 1) {
    if (lid < stride) {
      lm[lid] = fmax(lm[lid], lm[lid + stride]);
      lx[lid] += lx[lid + stride];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float mx = lm[0];
  float s = 0.0f;
  for (int v = lid; v < V; v += CF_WG) s += exp(x[v] - mx);
  ls[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int stride = CF_WG / 2; stride > 0; stride >>= 1) {
    if (lid < stride) ls[lid] += ls[lid + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  *M = mx;
  *S = ls[0];
  *SX = lx[0];
}

// losses[row] = -sum_v q_v log p_v = (1-eps) * (log S - (x_t - M)) + eps * (log S - (mean x - M)).
// Ignored rows still run the (empty) reduction: every work-item reaches every barrier, with no
// early return before one (PoCL's barrier handling hangs on that pattern).
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void crossentropy_forward(__global float *losses, uint losses_off,
                          __global const float *logits, uint logits_off,
                          __global const int *targets, uint targets_off,
                          int V, float eps, int ignore_index, int N) {
  (void)N;
  __local float lm[CF_WG], ls[CF_WG], lx[CF_WG];
  int row = get_group_id(0);
  int t = targets[targets_off + row];
  int counted = t != ignore_index && t >= 0 && t < V;
  __global const float *x = logits + logits_off + (size_t)row * V;
  float M, S, SX;
  row_stats(x, counted ? V : 0, lm, ls, lx, &M, &S, &SX);
  if (get_local_id(0) == 0) {
    float l = 0.0f;
    if (counted) {
      float logS = log(S);
      float nll = logS - (x[t] - M);
      float smooth = logS - (SX / (float)V - M);
      l = (1.0f - eps) * nll + eps * smooth;
    }
    losses[losses_off + row] = l;
  }
}

// loss[0] = sum(losses) / count of counted rows (0 when none). One work-group, fixed order.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void crossentropy_mean(__global float *loss, uint loss_off,
                       __global const float *losses, uint losses_off,
                       __global const int *targets, uint targets_off,
                       int N, int V, int ignore_index) {
  __local float lsum[CF_WG];
  __local int lcnt[CF_WG];
  int lid = get_local_id(0);
  float s = 0.0f;
  int cnt = 0;
  for (int n = lid; n < N; n += CF_WG) {
    int t = targets[targets_off + n];
    if (t != ignore_index && t >= 0 && t < V) {
      s += losses[losses_off + n];
      cnt++;
    }
  }
  lsum[lid] = s;
  lcnt[lid] = cnt;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int stride = CF_WG / 2; stride > 0; stride >>= 1) {
    if (lid < stride) {
      lsum[lid] += lsum[lid + stride];
      lcnt[lid] += lcnt[lid + stride];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) loss[loss_off] = lcnt[0] > 0 ? lsum[0] / (float)lcnt[0] : 0.0f;
}

// dlogits[row, v] = dloss * (p_v - q_v), 0 on ignored rows. dlogits may be logits: each
// work-item reads and then writes only its own elements.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void crossentropy_backward(__global float *dlogits, uint dlogits_off,
                           __global const float *logits, uint logits_off,
                           __global const int *targets, uint targets_off,
                           int V, float eps, int ignore_index, float dloss, int N) {
  (void)N;
  __local float lm[CF_WG], ls[CF_WG], lx[CF_WG];
  int row = get_group_id(0), lid = get_local_id(0);
  int t = targets[targets_off + row];
  int counted = t != ignore_index && t >= 0 && t < V;
  __global float *dx = dlogits + dlogits_off + (size_t)row * V;
  __global const float *x = logits + logits_off + (size_t)row * V;
  float M, S, SX;
  row_stats(x, counted ? V : 0, lm, ls, lx, &M, &S, &SX);  // no early return: see crossentropy_forward
  float invS = 1.0f / S, qoff = eps / (float)V;
  for (int v = lid; v < V; v += CF_WG) {
    float p = exp(x[v] - M) * invS;
    float q = v == t ? 1.0f - eps + qoff : qoff;
    dx[v] = counted ? dloss * (p - q) : 0.0f;
  }
}

// crossentropy_forward and crossentropy_backward of a row in one launch (the trainer runs both),
// the logits read by one group. Every work-item reads x[t] before row_stats' barriers, so a dx
// written in place after them cannot change it.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void crossentropy_forward_backward(__global float *losses, uint losses_off,
                                   __global float *dlogits, uint dlogits_off,
                                   __global const float *logits, uint logits_off,
                                   __global const int *targets, uint targets_off,
                                   int V, float eps, int ignore_index, float dloss, int N) {
  (void)N;
  __local float lm[CF_WG], ls[CF_WG], lx[CF_WG];
  int row = get_group_id(0), lid = get_local_id(0);
  int t = targets[targets_off + row];
  int counted = t != ignore_index && t >= 0 && t < V;
  __global float *dx = dlogits + dlogits_off + (size_t)row * V;
  __global const float *x = logits + logits_off + (size_t)row * V;
  float xt = counted ? x[t] : 0.0f;
  float M, S, SX;
  row_stats(x, counted ? V : 0, lm, ls, lx, &M, &S, &SX);  // no early return: see crossentropy_forward
  if (lid == 0) {
    float l = 0.0f;
    if (counted) {
      float logS = log(S);
      l = (1.0f - eps) * (logS - (xt - M)) + eps * (logS - (SX / (float)V - M));
    }
    losses[losses_off + row] = l;
  }
  float invS = 1.0f / S, qoff = eps / (float)V;
  for (int v = lid; v < V; v += CF_WG) {
    float p = exp(x[v] - M) * invS;
    float q = v == t ? 1.0f - eps + qoff : qoff;
    dx[v] = counted ? dloss * (p - q) : 0.0f;
  }
}

#endif
