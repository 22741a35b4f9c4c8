/* Double-precision references of the elementwise family (float inputs as the device saw them). */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/ref.h"

#define GELU_K 0.79788456080286535588  /* sqrt(2/pi) */
#define GELU_A 0.044715

double ref_activation(double x, cf_activation act) {
  switch (act) {
    case CF_ACT_RELU: return x < 0 ? 0.0 : x;
    case CF_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x)));
    case CF_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  }
  return NAN;
}

double ref_activation_grad(double x, cf_activation act) {
  switch (act) {
    case CF_ACT_RELU: return x > 0 ? 1.0 : 0.0;
    case CF_ACT_GELU_TANH: {
      double u = GELU_K * (x + GELU_A * x * x * x), t = tanh(u);
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
    }
    case CF_ACT_GELU_ERF:  /* 0.3989... = 1/sqrt(2 pi) */
      return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
  }
  return NAN;
}

void ref_activation_forward(double *out, const float *inp, size_t n, cf_activation act) {
  for (size_t i = 0; i < n; i++) out[i] = ref_activation(inp[i], act);
}

void ref_activation_backward(double *dinp, const float *dout, const float *inp, size_t n, cf_activation act) {
  for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * ref_activation_grad(inp[i], act);
}

void ref_bias_forward(double *out, const float *x, const float *bias, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (double)x[(size_t)n * C + c] + bias[c];
}

void ref_bias_backward(double *dbias, const float *dout, int N, int C) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) dbias[c] += dout[(size_t)n * C + c];
}

void ref_bias_act_forward(double *out, double *pre_out, const float *pre, const float *bias, int N, int C,
                          cf_activation act) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      pre_out[i] = (double)pre[i] + bias[c];
      out[i] = ref_activation(pre_out[i], act);
    }
}

void ref_bias_act_backward(double *dpre, double *dbias, const float *dout, const float *pre, int N, int C,
                           cf_activation act) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      dpre[i] = dout[i] * ref_activation_grad(pre[i], act);
      dbias[c] += dpre[i];
    }
}

void ref_dropout_forward(double *out, const float *x, size_t n, cf_dropout d) {
  double scale = cf_dropout_scale(d);  /* the device's float factor, exactly */
  for (size_t i = 0; i < n; i++) out[i] = cf_dropout_keep(d, (uint32_t)i) ? x[i] * scale : x[i] * 0.0;
}

void ref_dropout_backward(double *dx, const float *dout, size_t n, cf_dropout d) { ref_dropout_forward(dx, dout, n, d); }

void ref_residual_forward(double *out, const float *inp1, const float *inp2, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = (double)inp1[i] + inp2[i];
}

void ref_residual_dropout_forward(double *out, const float *res, const float *branch, size_t n, cf_dropout d) {
  ref_dropout_forward(out, branch, n, d);
  for (size_t i = 0; i < n; i++) out[i] += res[i];
}
