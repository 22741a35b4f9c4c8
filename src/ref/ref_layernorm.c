/* Double-precision LayerNorm references (float inputs as the device saw them), plain and fused
 * with the residual add and dropout in front of it. */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/ref.h"

/* The rows of x, given in float (xf) or in double (xd, when xf is NULL). */
static void ln_forward(double *out, double *mean, double *rstd, const float *xf, const double *xd,
                       const float *weight, const float *bias, int N, int C, float eps) {
#define X(c) (xf ? (double)xf[(size_t)n * C + (c)] : xd[(size_t)n * C + (c)])
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += X(c);
    m /= C;
    for (int c = 0; c < C; c++) v += (X(c) - m) * (X(c) - m);
    double r = 1.0 / sqrt(v / C + (double)eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (X(c) - m) * r * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = r;
  }
#undef X
}

void ref_layernorm_forward(double *out, double *mean, double *rstd, const float *inp, const float *weight,
                           const float *bias, int N, int C, float eps) {
  ln_forward(out, mean, rstd, inp, NULL, weight, bias, N, C, eps);
}

/* dinp = (or += when accumulate) the input gradient; dweight, dbias += */
static void ln_backward(double *dinp, double *dweight, double *dbias, const float *dout, const float *inp,
                        const float *weight, const float *mean, const float *rstd, int N, int C, int accumulate) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    double m = mean[n], r = rstd[n], mg = 0, mgx = 0;
    for (int c = 0; c < C; c++) {
      double g = (double)dy[c] * weight[c], xhat = ((double)x[c] - m) * r;
      mg += g;
      mgx += g * xhat;
      dweight[c] += dy[c] * xhat;
      dbias[c] += dy[c];
    }
    mg /= C;
    mgx /= C;
    for (int c = 0; c < C; c++) {
      double g = (double)dy[c] * weight[c], xhat = ((double)x[c] - m) * r;
      double d = r * (g - mg - xhat * mgx);
      dinp[(size_t)n * C + c] = accumulate ? dinp[(size_t)n * C + c] + d : d;
    }
  }
}

void ref_layernorm_backward(double *dinp, double *dweight, double *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int N, int C) {
  ln_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, 0);
}

void ref_residual_dropout_layernorm_forward(double *out, double *mean, double *rstd, double *res, const float *inp,
                                            const float *branch, const float *weight, const float *bias, int N, int C,
                                            float eps, cf_dropout d) {
  size_t NC = (size_t)N * C;
  ref_residual_dropout_forward(res, inp, branch, NC, d);
  ln_forward(out, mean, rstd, NULL, res, weight, bias, N, C, eps);
}

void ref_residual_dropout_layernorm_backward(double *dinp, double *dbranch, double *dweight, double *dbias,
                                             const float *dout, const float *res, const float *weight,
                                             const float *mean, const float *rstd, int N, int C, cf_dropout d) {
  size_t NC = (size_t)N * C;
  double scale = cf_dropout_scale(d);  /* the device's float factor, exactly */
  ln_backward(dinp, dweight, dbias, dout, res, weight, mean, rstd, N, C, 1);
  for (size_t i = 0; i < NC; i++) dbranch[i] = cf_dropout_keep(d, (uint32_t)i) ? dinp[i] * scale : dinp[i] * 0.0;
}
