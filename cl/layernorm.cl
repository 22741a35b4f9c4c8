// LayerNorm over the last dimension (C) of an (N, C) tensor, and LayerNorm fused with the residual
// add (and the branch's dropout) in front of it: res = inp + dropout(branch), out = LN(res), one pass.
#include "philox.clh"
#include "dropout.clh"
#include "reduce.clh"

// Row kernels run one work-group of CF_WG work-items per row and reduce in local memory with a
// fixed tree, so results do not depend on scheduling. The host launches exactly N groups, so the
// row kernels need no row guard (and have none: an early return ahead of a barrier, although
// uniform over the group, crashed PoCL 3's work-group compiler in layernorm_backward). Statistics are two-pass (mean, then the
// mean of squared deviations), never E[x^2] - E[x]^2. Weight gradients are summed over rows by a
// separate column-reduction kernel, again in a fixed order: no atomics anywhere.

// On CPUs (CF_DEVICE_IS_CPU) the same kernels take one row per work-item instead, walking it with
// 16-float vectors (PoCL runs barriers in loops and per-row groups slowly), and the column
// reduction gives each item 64 columns to walk down all rows in order. Same arguments, same
// results up to the order of the sums (still fixed: deterministic).
#if CF_DEVICE_IS_CPU

inline float ln_hsum16(float16 v) {
  float8 a = v.lo + v.hi;
  float4 b = a.lo + a.hi;
  float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// The LayerNorm of one row: y (C) from x (C); returns (mean, rstd). The body of layernorm_forward,
// shared with the fused kernel so that both compute the same bits.
inline float2 ln_row_forward(__global float *y, __global const float *x, __global const float *w,
                             __global const float *b, int C, float eps) {
  int c16 = C / 16 * 16;
  float16 s16 = (float16)(0.0f);
  for (int c = 0; c < c16; c += 16) s16 += vload16(0, x + c);
  float s = ln_hsum16(s16);
  for (int c = c16; c < C; c++) s += x[c];
  float m = s / (float)C;
  float16 v16 = (float16)(0.0f);
  for (int c = 0; c < c16; c += 16) {
    float16 d = vload16(0, x + c) - m;
    v16 += d * d;
  }
  float v = ln_hsum16(v16);
  for (int c = c16; c < C; c++) v += (x[c] - m) * (x[c] - m);
  float r = 1.0f / sqrt(v / (float)C + eps);
  for (int c = 0; c < c16; c += 16)
    vstore16((vload16(0, x + c) - m) * r * vload16(0, w + c) + vload16(0, b + c), 0, y + c);
  for (int c = c16; c < C; c++) y[c] = (x[c] - m) * r * w[c] + b[c];
  return (float2)(m, r);
}

// out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C). One row per work-item.
__kernel void layernorm_forward(__global float *out, uint out_off, __global float *mean, uint mean_off,
                                __global float *rstd, uint rstd_off, __global const float *inp, uint inp_off,
                                __global const float *weight, uint weight_off, __global const float *bias,
                                uint bias_off, int N, int C, float eps) {
  int row = get_global_id(0);
  if (row >= N) return;
  size_t base = (size_t)row * C;
  float2 mr = ln_row_forward(out + out_off + base, inp + inp_off + base, weight + weight_off, bias + bias_off, C, eps);
  mean[mean_off + row] = mr.x;
  rstd[rstd_off + row] = mr.y;
}

// The input gradient of one row: dx (C) = or += (accumulate) rstd * (g - mean_c(g) - xhat *
// mean_c(g * xhat)) with g = dy * w and xhat = (x - m) * r. Reads dy[c] before it writes dx[c], so
// dx may alias dy. The body of layernorm_backward, shared with the fused kernel.
inline void ln_row_backward(__global float *dx, __global const float *dy, __global const float *x,
                            __global const float *w, float m, float r, int C, int accumulate) {
  int c16 = C / 16 * 16;
  float16 a16 = (float16)(0.0f), b16 = (float16)(0.0f);
  for (int c = 0; c < c16; c += 16) {
    float16 g = vload16(0, dy + c) * vload16(0, w + c), xhat = (vload16(0, x + c) - m) * r;
    a16 += g;
    b16 += g * xhat;
  }
  float sg = ln_hsum16(a16), sgx = ln_hsum16(b16);
  for (int c = c16; c < C; c++) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    sg += g;
    sgx += g * xhat;
  }
  float mg = sg / (float)C, mgx = sgx / (float)C;
  for (int c = 0; c < c16; c += 16) {
    float16 g = vload16(0, dy + c) * vload16(0, w + c), xhat = (vload16(0, x + c) - m) * r;
    float16 d = r * (g - mg - xhat * mgx);
    vstore16(accumulate ? vload16(0, dx + c) + d : d, 0, dx + c);
  }
  for (int c = c16; c < C; c++) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    float d = r * (g - mg - xhat * mgx);
    dx[c] = accumulate ? dx[c] + d : d;
  }
}

// dinp (N, C) = or += (accumulate) the input gradient; dout (N, C), inp (N, C), weight (C),
// mean (N), rstd (N). With g = dout * weight and xhat = (x - mean) * rstd:
//   dinp = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
// One row per work-item, which reads dout[c] before it writes dinp[c]: dinp may alias dout.
__kernel void layernorm_backward(__global float *dinp, uint dinp_off, __global const float *dout, uint dout_off,
                                 __global const float *inp, uint inp_off, __global const float *weight,
                                 uint weight_off, __global const float *mean, uint mean_off,
                                 __global const float *rstd, uint rstd_off, int N, int C, int accumulate) {
  int row = get_global_id(0);
  if (row >= N) return;
  size_t base = (size_t)row * C;
  ln_row_backward(dinp + dinp_off + base, dout + dout_off + base, inp + inp_off + base, weight + weight_off,
                  mean[mean_off + row], rstd[rstd_off + row], C, accumulate);
}

// y[c] = r[c] + x[c] * mask(i0 + c) * scale (r NULL: no addend) for the C elements of a row that
// starts at element i0 of a flat tensor: the dropout of cl/dropout.clh, in 64-element blocks of
// the flat index as cf_dropout_item takes them (16 Philox groups per call); a block the row cuts
// is applied element by element. y may alias r or x.
inline void ln_dropout_row(__global float *y, __global const float *r, __global const float *x, uint i0, int C,
                           float p, float scale, uint seed, uint step, uint tensor_id, uint group0) {
  uint end = i0 + (uint)C;
  for (uint b0 = i0 / 64u * 64u; b0 < end; b0 += 64u) {
    float16 f[4];
    cf_dropout_factors64(seed, step, tensor_id, group0, b0 / 4u, p, scale, f);
    if (b0 >= i0 && b0 + 64u <= end) {
      uint c = b0 - i0;
      for (int k = 0; k < 4; k++)
        vstore16(r ? vload16(k, r + c) + vload16(k, x + c) * f[k] : vload16(k, x + c) * f[k], k, y + c);
    } else {
      float fa[64];
      for (int k = 0; k < 4; k++) vstore16(f[k], k, fa);
      for (uint i = max(b0, i0); i < min(b0 + 64u, end); i++) {
        uint c = i - i0;
        y[c] = r ? r[c] + x[c] * fa[i - b0] : x[c] * fa[i - b0];
      }
    }
  }
}

// res (N, C) = inp (N, C) + dropout(branch (N, C)), then out (N, C), mean (N), rstd (N) = the
// LayerNorm of res with weight (C), bias (C). The same bits as residual_dropout_forward followed by
// layernorm_forward (mask element n*C + c of the flat tensor; p == 0: the plain sum). One row per
// work-item, which writes its row of res and reads it back (from cache): res may alias inp or branch.
__kernel void residual_dropout_layernorm_forward(__global float *out, uint out_off, __global float *mean,
                                                 uint mean_off, __global float *rstd, uint rstd_off,
                                                 __global float *res, uint res_off, __global const float *inp,
                                                 uint inp_off, __global const float *branch, uint branch_off,
                                                 __global const float *weight, uint weight_off,
                                                 __global const float *bias, uint bias_off, int N, int C, float eps,
                                                 float p, float scale, uint seed, uint step, uint tensor_id, uint group0) {
  int row = get_global_id(0);
  if (row >= N) return;
  size_t base = (size_t)row * C;
  __global float *r = res + res_off + base;
  __global const float *x = inp + inp_off + base, *br = branch + branch_off + base;
  if (p > 0.0f) {
    ln_dropout_row(r, x, br, (uint)base, C, p, scale, seed, step, tensor_id, group0);
  } else {
    int c16 = C / 16 * 16;
    for (int c = 0; c < c16; c += 16) vstore16(vload16(0, x + c) + vload16(0, br + c), 0, r + c);
    for (int c = c16; c < C; c++) r[c] = x[c] + br[c];
  }
  float2 mr = ln_row_forward(out + out_off + base, r, weight + weight_off, bias + bias_off, C, eps);
  mean[mean_off + row] = mr.x;
  rstd[rstd_off + row] = mr.y;
}

// Backward of the above, after layernorm_backward_params: dinp (N, C) = or += (accumulate) the
// LayerNorm's input gradient (= dres, which is also d(inp)), as layernorm_backward computes it;
// then dbranch (N, C) = dropout(dinp) with the forward's mask. dout (N, C), res (N, C),
// weight (C), mean (N), rstd (N). dinp may alias dout; dbranch aliases nothing.
__kernel void residual_dropout_layernorm_backward(__global float *dinp, uint dinp_off, __global float *dbranch,
                                                  uint dbranch_off, __global const float *dout, uint dout_off,
                                                  __global const float *res, uint res_off,
                                                  __global const float *weight, uint weight_off,
                                                  __global const float *mean, uint mean_off,
                                                  __global const float *rstd, uint rstd_off, int N, int C,
                                                  int accumulate, float p, float scale, uint seed, uint step,
                                                  uint tensor_id, uint group0) {
  int row = get_global_id(0);
  if (row >= N) return;
  size_t base = (size_t)row * C;
  __global float *dx = dinp + dinp_off + base;
  ln_row_backward(dx, dout + dout_off + base, res + res_off + base, weight + weight_off, mean[mean_off + row],
                  rstd[rstd_off + row], C, accumulate);
  ln_dropout_row(dbranch + dbranch_off + base, 0, dx, (uint)base, C, p, scale, seed, step, tensor_id, group0);
}

// dweight[c] += sum_n dout[n,c] * xhat[n,c] and dbias[c] += sum_n dout[n,c]: one item per 64
// columns (global size ceil(C / 64)), rows summed in order. 64 columns are 256 contiguous bytes
// of each row (with 16, rows 4 KB apart made every load a TLB miss); the last item takes its
// columns 16 at a time, then one by one.
inline void ln_params16(__global float *dw, __global float *db, __global const float *dy, __global const float *x,
                        __global const float *mean, __global const float *rstd, int N, int C, int c) {
  float16 aw = (float16)(0.0f), ab = (float16)(0.0f);
  for (int n = 0; n < N; n++) {
    size_t i = (size_t)n * C + c;
    float16 g = vload16(0, dy + i);
    aw += g * ((vload16(0, x + i) - mean[n]) * rstd[n]);
    ab += g;
  }
  vstore16(vload16(0, dw + c) + aw, 0, dw + c);
  vstore16(vload16(0, db + c) + ab, 0, db + c);
}

__kernel void layernorm_backward_params(__global float *dweight, uint dweight_off, __global float *dbias,
                                        uint dbias_off, __global const float *dout, uint dout_off,
                                        __global const float *inp, uint inp_off, __global const float *mean,
                                        uint mean_off, __global const float *rstd, uint rstd_off, int N, int C) {
  int c0 = get_global_id(0) * 64;
  if (c0 >= C) return;
  __global const float *dy = dout + dout_off, *x = inp + inp_off, *mu = mean + mean_off, *rs = rstd + rstd_off;
  __global float *dw = dweight + dweight_off, *db = dbias + dbias_off;
  if (c0 + 64 <= C) {
    float16 w0 = (float16)(0.0f), w1 = w0, w2 = w0, w3 = w0, b0 = w0, b1 = w0, b2 = w0, b3 = w0;
    for (int n = 0; n < N; n++) {
      size_t i = (size_t)n * C + c0;
      float m = mu[n], r = rs[n];
      float16 g0 = vload16(0, dy + i), g1 = vload16(1, dy + i), g2 = vload16(2, dy + i), g3 = vload16(3, dy + i);
      w0 += g0 * ((vload16(0, x + i) - m) * r);
      w1 += g1 * ((vload16(1, x + i) - m) * r);
      w2 += g2 * ((vload16(2, x + i) - m) * r);
      w3 += g3 * ((vload16(3, x + i) - m) * r);
      b0 += g0;
      b1 += g1;
      b2 += g2;
      b3 += g3;
    }
    vstore16(vload16(0, dw + c0) + w0, 0, dw + c0);
    vstore16(vload16(1, dw + c0) + w1, 1, dw + c0);
    vstore16(vload16(2, dw + c0) + w2, 2, dw + c0);
    vstore16(vload16(3, dw + c0) + w3, 3, dw + c0);
    vstore16(vload16(0, db + c0) + b0, 0, db + c0);
    vstore16(vload16(1, db + c0) + b1, 1, db + c0);
    vstore16(vload16(2, db + c0) + b2, 2, db + c0);
    vstore16(vload16(3, db + c0) + b3, 3, db + c0);
    return;
  }
  int c = c0;
  for (; c + 16 <= C; c += 16) ln_params16(dw, db, dy, x, mu, rs, N, C, c);
  for (; c < C; c++) {
    float aw = 0.0f, ab = 0.0f;
    for (int n = 0; n < N; n++) {
      size_t i = (size_t)n * C + c;
      aw += dy[i] * ((x[i] - mu[n]) * rs[n]);
      ab += dy[i];
    }
    dw[c] += aw;
    db[c] += ab;
  }
}

#else  // one work-group per row

// The LayerNorm of one row by the work-group: y (C) from x (C); every item gets (mean, rstd). The
// body of layernorm_forward, shared with the fused kernel so that both compute the same bits.
inline float2 ln_group_forward(__global float *y, __global const float *x, __global const float *w,
                               __global const float *b, int C, float eps, __local float *red) {
  int lid = get_local_id(0);
  float s = 0.0f;
  for (int c = lid; c < C; c += CF_WG) s += x[c];
  float m = cf_group_sum(s, red) / (float)C;
  float v = 0.0f;
  for (int c = lid; c < C; c += CF_WG) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = 1.0f / sqrt(cf_group_sum(v, red) / (float)C + eps);
  for (int c = lid; c < C; c += CF_WG) y[c] = (x[c] - m) * r * w[c] + b[c];
  return (float2)(m, r);
}

// out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C). One work-group per row.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void layernorm_forward(__global float *out, uint out_off, __global float *mean, uint mean_off,
                       __global float *rstd, uint rstd_off, __global const float *inp, uint inp_off,
                       __global const float *weight, uint weight_off, __global const float *bias, uint bias_off,
                       int N, int C, float eps) {
  __local float red[CF_WG];
  int row = get_group_id(0);
  size_t base = (size_t)row * C;
  float2 mr = ln_group_forward(out + out_off + base, inp + inp_off + base, weight + weight_off, bias + bias_off, C,
                               eps, red);
  if (get_local_id(0) == 0) {
    mean[mean_off + row] = mr.x;
    rstd[rstd_off + row] = mr.y;
  }
}

// The input gradient of one row by the work-group: dx (C) = or += (accumulate)
// rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)) with g = dy * w and xhat = (x - m) * r. Each item
// reads dy[c] before it writes dx[c], so dx may alias dy. The body of layernorm_backward.
inline void ln_group_backward(__global float *dx, __global const float *dy, __global const float *x,
                              __global const float *w, float m, float r, int C, int accumulate,
                              __local float2 *red) {
  int lid = get_local_id(0);
  float2 acc = (float2)(0.0f, 0.0f);
  for (int c = lid; c < C; c += CF_WG) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    acc += (float2)(g, g * xhat);
  }
  float2 means = cf_group_sum2(acc, red) / (float)C;
  for (int c = lid; c < C; c += CF_WG) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    float d = r * (g - means.x - xhat * means.y);
    dx[c] = accumulate ? dx[c] + d : d;
  }
}

// dinp (N, C) = or += (accumulate) the input gradient; dout (N, C), inp (N, C), weight (C),
// mean (N), rstd (N). With g = dout * weight and xhat = (x - mean) * rstd:
//   dinp = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
// Each item reads dout[c] before it writes dinp[c], so dinp may alias dout.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void layernorm_backward(__global float *dinp, uint dinp_off, __global const float *dout, uint dout_off,
                        __global const float *inp, uint inp_off, __global const float *weight, uint weight_off,
                        __global const float *mean, uint mean_off, __global const float *rstd, uint rstd_off,
                        int N, int C, int accumulate) {
  __local float2 red[CF_WG];
  int row = get_group_id(0);
  size_t base = (size_t)row * C;
  ln_group_backward(dinp + dinp_off + base, dout + dout_off + base, inp + inp_off + base, weight + weight_off,
                    mean[mean_off + row], rstd[rstd_off + row], C, accumulate, red);
}

// y[c] = r[c] + x[c] * mask(i0 + c) * scale (r NULL: no addend) for the C elements of a row that
// starts at element i0 of a flat tensor, by the work-group: one Philox call per group of 4 flat
// elements (as the dropout kernels take them), groups dealt to the items in turn. y may alias r or x.
inline void ln_group_dropout(__global float *y, __global const float *r, __global const float *x, uint i0, int C,
                             float p, float scale, uint seed, uint step, uint tensor_id, uint group0) {
  uint end = i0 + (uint)C;
  for (uint g = i0 / 4u + get_local_id(0); 4u * g < end; g += CF_WG) {
    float4 f = cf_dropout_factors(seed, step, tensor_id, group0, g, p, scale);
    float fj[4] = {f.x, f.y, f.z, f.w};
    for (uint j = 0; j < 4u; j++) {
      uint i = 4u * g + j;
      if (i >= i0 && i < end) y[i - i0] = r ? r[i - i0] + x[i - i0] * fj[j] : x[i - i0] * fj[j];
    }
  }
}

// res (N, C) = inp (N, C) + dropout(branch (N, C)), then out (N, C), mean (N), rstd (N) = the
// LayerNorm of res with weight (C), bias (C): the same bits as residual_dropout_forward followed by
// layernorm_forward. One work-group per row; the items share their row of res through global
// memory (a barrier between the passes): res may alias inp or branch.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void residual_dropout_layernorm_forward(__global float *out, uint out_off, __global float *mean, uint mean_off,
                                        __global float *rstd, uint rstd_off, __global float *res, uint res_off,
                                        __global const float *inp, uint inp_off, __global const float *branch,
                                        uint branch_off, __global const float *weight, uint weight_off,
                                        __global const float *bias, uint bias_off, int N, int C, float eps, float p,
                                        float scale, uint seed, uint step, uint tensor_id, uint group0) {
  __local float red[CF_WG];
  int row = get_group_id(0);
  size_t base = (size_t)row * C;
  __global float *r = res + res_off + base;
  __global const float *x = inp + inp_off + base, *br = branch + branch_off + base;
  if (p > 0.0f) {
    ln_group_dropout(r, x, br, (uint)base, C, p, scale, seed, step, tensor_id, group0);
  } else {
    for (int c = get_local_id(0); c < C; c += CF_WG) r[c] = x[c] + br[c];
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  float2 mr = ln_group_forward(out + out_off + base, r, weight + weight_off, bias + bias_off, C, eps, red);
  if (get_local_id(0) == 0) {
    mean[mean_off + row] = mr.x;
    rstd[rstd_off + row] = mr.y;
  }
}

// Backward of the above, after layernorm_backward_params: dinp (N, C) = or += (accumulate) the
// LayerNorm's input gradient (= dres, also d(inp)); then dbranch (N, C) = dropout(dinp). dout (N, C),
// res (N, C), weight (C), mean (N), rstd (N). dinp may alias dout; dbranch aliases nothing.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void residual_dropout_layernorm_backward(__global float *dinp, uint dinp_off, __global float *dbranch,
                                         uint dbranch_off, __global const float *dout, uint dout_off,
                                         __global const float *res, uint res_off, __global const float *weight,
                                         uint weight_off, __global const float *mean, uint mean_off,
                                         __global const float *rstd, uint rstd_off, int N, int C, int accumulate,
                                         float p, float scale, uint seed, uint step, uint tensor_id, uint group0) {
  __local float2 red[CF_WG];
  int row = get_group_id(0);
  size_t base = (size_t)row * C;
  __global float *dx = dinp + dinp_off + base;
  ln_group_backward(dx, dout + dout_off + base, res + res_off + base, weight + weight_off, mean[mean_off + row],
                    rstd[rstd_off + row], C, accumulate, red);
  barrier(CLK_GLOBAL_MEM_FENCE);
  ln_group_dropout(dbranch + dbranch_off + base, 0, dx, (uint)base, C, p, scale, seed, step, tensor_id, group0);
}

// Column reduction for the parameter gradients: dweight[c] += sum_n dout[n,c] * xhat[n,c] and
// dbias[c] += sum_n dout[n,c]. A work-group covers LN_TX columns with LN_TY row lanes; lane ty
// sums rows ty, ty + LN_TY, ... in order, then the lanes are combined by a fixed tree.
#define LN_TX (CF_WG < 32 ? CF_WG : 32)
#define LN_TY (CF_WG / LN_TX)
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void layernorm_backward_params(__global float *dweight, uint dweight_off, __global float *dbias, uint dbias_off,
                               __global const float *dout, uint dout_off, __global const float *inp, uint inp_off,
                               __global const float *mean, uint mean_off, __global const float *rstd, uint rstd_off,
                               int N, int C) {
  __local float2 red[CF_WG];
  int lid = get_local_id(0), tx = lid % LN_TX, ty = lid / LN_TX;
  int c = get_group_id(0) * LN_TX + tx;
  float2 acc = (float2)(0.0f, 0.0f);
  if (c < C) {
    for (int n = ty; n < N; n += LN_TY) {
      size_t i = (size_t)n * C + c;
      float dy = dout[dout_off + i], xhat = (inp[inp_off + i] - mean[mean_off + n]) * rstd[rstd_off + n];
      acc += (float2)(dy * xhat, dy);
    }
  }
  red[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = LN_TY / 2; s > 0; s >>= 1) {
    if (ty < s) red[lid] += red[lid + s * LN_TX];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (ty == 0 && c < C) {
    dweight[dweight_off + c] += red[lid].x;
    dbias[dbias_off + c] += red[lid].y;
  }
}

#endif
