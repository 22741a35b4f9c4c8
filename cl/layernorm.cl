// LayerNorm over the last dimension (C) of an (N, C) tensor.
// Row kernels run one work-group of CF_WG work-items per row and reduce in local memory with a
// fixed tree, so results do not depend on scheduling. The host launches exactly N groups, so the
// row kernels need no row guard (and have none: an early return ahead of a barrier, although
// uniform over the group, crashed PoCL 3's work-group compiler in layernorm_backward). Statistics are two-pass (mean, then the
// mean of squared deviations), never E[x^2] - E[x]^2. Weight gradients are summed over rows by a
// separate column-reduction kernel, again in a fixed order: no atomics anywhere.

// Sum of v over the work-group (1-D, CF_WG items); every item gets the total. `red` holds CF_WG
// values; the trailing barrier lets the caller reuse it at once.
inline float ln_group_sum(float v, __local float *red) {
  int lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = CF_WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float total = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

inline float2 ln_group_sum2(float2 v, __local float2 *red) {
  int lid = get_local_id(0);
  red[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = CF_WG / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float2 total = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

// out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C). One work-group per row.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void layernorm_forward(__global float *out, uint out_off, __global float *mean, uint mean_off,
                       __global float *rstd, uint rstd_off, __global const float *inp, uint inp_off,
                       __global const float *weight, uint weight_off, __global const float *bias, uint bias_off,
                       int N, int C, float eps) {
  __local float red[CF_WG];
  int row = get_group_id(0), lid = get_local_id(0);
  __global const float *x = inp + inp_off + (size_t)row * C;
  __global float *y = out + out_off + (size_t)row * C;
  __global const float *w = weight + weight_off, *b = bias + bias_off;

  float s = 0.0f;
  for (int c = lid; c < C; c += CF_WG) s += x[c];
  float m = ln_group_sum(s, red) / (float)C;
  float v = 0.0f;
  for (int c = lid; c < C; c += CF_WG) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = 1.0f / sqrt(ln_group_sum(v, red) / (float)C + eps);
  for (int c = lid; c < C; c += CF_WG) y[c] = (x[c] - m) * r * w[c] + b[c];
  if (lid == 0) {
    mean[mean_off + row] = m;
    rstd[rstd_off + row] = r;
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
  int row = get_group_id(0), lid = get_local_id(0);
  size_t base = (size_t)row * C;
  __global const float *x = inp + inp_off + base, *dy = dout + dout_off + base, *w = weight + weight_off;
  __global float *dx = dinp + dinp_off + base;
  float m = mean[mean_off + row], r = rstd[rstd_off + row];

  float2 acc = (float2)(0.0f, 0.0f);
  for (int c = lid; c < C; c += CF_WG) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    acc += (float2)(g, g * xhat);
  }
  float2 means = ln_group_sum2(acc, red) / (float)C;
  for (int c = lid; c < C; c += CF_WG) {
    float g = dy[c] * w[c], xhat = (x[c] - m) * r;
    float d = r * (g - means.x - xhat * means.y);
    dx[c] = accumulate ? dx[c] + d : d;
  }
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
