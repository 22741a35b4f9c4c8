// Activations (ReLU, GELU with the tanh approximation, exact GELU with erf), bias add, and the
// FFN's fused bias + activation, forward and backward. `act` follows cf_activation:
// 0 ReLU, 1 GELU (tanh), 2 GELU (erf). Bias gradients are column sums over rows in a fixed order
// (CF_WG items per group: ACT_TX columns by ACT_TY row lanes, lanes combined by a fixed tree).

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)
#define GELU_A 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT2PI 0.3989422804014327f

inline float act_forward(float x, int act) {
  if (act == 0) return x < 0.0f ? 0.0f : x;  // NaN passes through
  if (act == 1) return x / (1.0f + exp(-2.0f * GELU_K * (x + GELU_A * x * x * x)));  // 0.5(1+tanh u) = 1/(1+e^-2u)
  return 0.5f * x * (1.0f + erf(x * INV_SQRT2));
}

// act'(x). The tanh form is written with s = 1/(1+e^-2u) = 0.5(1+tanh u), so that
// 0.5(1 - tanh(u)^2) = 2 e s^2 keeps its accuracy where tanh(u) is near +-1; e is computed from
// u clamped to +-40 (never inf), and beyond that the exact limits 0 and 1 are returned.
// (exp is several times faster than tanh and cosh on PoCL.)
inline float act_grad(float x, int act) {
  if (act == 0) return x > 0.0f ? 1.0f : 0.0f;
  if (act == 1) {
    float x2 = x * x, u = GELU_K * x * (1.0f + GELU_A * x2);
    float e = exp(-2.0f * clamp(u, -40.0f, 40.0f)), s = 1.0f / (1.0f + e);
    float g = s + 2.0f * GELU_K * x * (1.0f + 3.0f * GELU_A * x2) * (e * s) * s;
    return u <= -40.0f ? 0.0f : u >= 40.0f ? 1.0f : g;  // NaN falls through to g
  }
  return 0.5f * (1.0f + erf(x * INV_SQRT2)) + x * exp(-0.5f * x * x) * INV_SQRT2PI;
}

// out (n) = act(inp (n)); out may alias inp.
__kernel void activation_forward(__global float *out, uint out_off, __global const float *inp, uint inp_off, int n,
                                 int act) {
  int i = get_global_id(0);
  if (i < n) out[out_off + i] = act_forward(inp[inp_off + i], act);
}

// dinp (n) = dout (n) * act'(inp (n)); dinp may alias dout.
__kernel void activation_backward(__global float *dinp, uint dinp_off, __global const float *dout, uint dout_off,
                                  __global const float *inp, uint inp_off, int n, int act) {
  int i = get_global_id(0);
  if (i < n) dinp[dinp_off + i] = dout[dout_off + i] * act_grad(inp[inp_off + i], act);
}

// x (N, C) += bias (C). Global size (C, N).
__kernel void bias_forward(__global float *x, uint x_off, __global const float *bias, uint bias_off, int N, int C) {
  int c = get_global_id(0), n = get_global_id(1);
  if (c < C && n < N) x[x_off + (size_t)n * C + c] += bias[bias_off + c];
}

// pre (N, C) += bias (C) in place, out (N, C) = act(pre). Global size (C, N).
__kernel void bias_act_forward(__global float *out, uint out_off, __global float *pre, uint pre_off,
                               __global const float *bias, uint bias_off, int N, int C, int act) {
  int c = get_global_id(0), n = get_global_id(1);
  if (c < C && n < N) {
    size_t i = (size_t)n * C + c;
    float p = pre[pre_off + i] + bias[bias_off + c];
    pre[pre_off + i] = p;
    out[out_off + i] = act_forward(p, act);
  }
}

#define ACT_TX (CF_WG < 32 ? CF_WG : 32)
#define ACT_TY (CF_WG / ACT_TX)

// Combine the ACT_TY row lanes of each column by a fixed tree; the total is valid for ty == 0.
inline float column_total(float acc, __local float *red) {
  int lid = get_local_id(0), ty = lid / ACT_TX;
  red[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = ACT_TY / 2; s > 0; s >>= 1) {
    if (ty < s) red[lid] += red[lid + s * ACT_TX];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return red[lid];
}

// dbias (C) += sum over rows of dout (N, C). One group per ACT_TX columns.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void bias_backward(__global float *dbias, uint dbias_off, __global const float *dout, uint dout_off, int N, int C) {
  __local float red[CF_WG];
  int lid = get_local_id(0), tx = lid % ACT_TX, ty = lid / ACT_TX;
  int c = get_group_id(0) * ACT_TX + tx;
  float acc = 0.0f;
  if (c < C)
    for (int n = ty; n < N; n += ACT_TY) acc += dout[dout_off + (size_t)n * C + c];
  float total = column_total(acc, red);
  if (ty == 0 && c < C) dbias[dbias_off + c] += total;
}

// dpre (N, C) = dout (N, C) * act'(pre (N, C)) and dbias (C) += its column sums, in one pass.
// Each element is read and written by one item, so dpre may alias dout.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void bias_act_backward(__global float *dpre, uint dpre_off, __global float *dbias, uint dbias_off,
                       __global const float *dout, uint dout_off, __global const float *pre, uint pre_off, int N,
                       int C, int act) {
  __local float red[CF_WG];
  int lid = get_local_id(0), tx = lid % ACT_TX, ty = lid / ACT_TX;
  int c = get_group_id(0) * ACT_TX + tx;
  float acc = 0.0f;
  if (c < C)
    for (int n = ty; n < N; n += ACT_TY) {
      size_t i = (size_t)n * C + c;
      float g = dout[dout_off + i] * act_grad(pre[pre_off + i], act);
      dpre[dpre_off + i] = g;
      acc += g;
    }
  float total = column_total(acc, red);
  if (ty == 0 && c < C) dbias[dbias_off + c] += total;
}
