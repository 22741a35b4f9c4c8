/* Double-precision LayerNorm references (float inputs as the device saw them). */
#include <math.h>
#include "clformer/layernorm.h"

void ref_layernorm_forward(double *out, double *mean, double *rstd, const float *inp, const float *weight,
                           const float *bias, int N, int C, float eps) {
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += ((double)x[c] - m) * ((double)x[c] - m);
    double r = 1.0 / sqrt(v / C + (double)eps);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = ((double)x[c] - m) * r * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = r;
  }
}

void ref_layernorm_backward(double *dinp, double *dweight, double *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int N, int C) {
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
      dinp[(size_t)n * C + c] = r * (g - mg - xhat * mgx);
    }
  }
}
