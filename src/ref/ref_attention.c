/* Double-precision references for causal multi-head self-attention, straight from the fused
 * (B, T, 3C) layout, one query row at a time. Slow (no blocking) and meant to be: tests and the
 * self-test compare the device against it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "clformer/base.h"

/* Dropout factor of element i of att (B, NH, T, T): 1/(1-p) if kept, else 0. */
static double keep_factor(cf_dropout drop, size_t i) {
  if (drop.p <= 0.0f) return 1.0;
  return cf_dropout_keep(drop, (uint32_t)i) ? 1.0 / (1.0 - drop.p) : 0.0;
}

/* The probabilities of query row (b, h, t) over keys 0..T-1 into P (0 where masked). */
static void probs_row(double *P, const float *inp, const int *key_mask, int b, int h, int t, int T, int C, int NH) {
  int HS = C / NH;
  double scale = 1.0 / sqrt((double)HS), m = -INFINITY;
  const float *q = inp + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
  for (int j = 0; j < T; j++) {
    P[j] = -INFINITY;
    if (j > t || (key_mask && !key_mask[(size_t)b * T + j])) continue;
    const float *k = inp + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
    double s = 0;
    for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
    P[j] = s * scale;
    if (P[j] > m) m = P[j];
  }
  double sum = 0;
  for (int j = 0; j < T; j++) {
    P[j] = P[j] == -INFINITY ? 0.0 : exp(P[j] - m);
    sum += P[j];
  }
  for (int j = 0; j < T; j++) P[j] = sum > 0 ? P[j] / sum : 0.0;
}

void ref_attention_forward(double *out, double *att, const float *inp, const int *key_mask, int B, int T, int C,
                           int NH, cf_dropout drop) {
  int HS = C / NH;
  double *P = malloc((size_t)T * sizeof *P);
  if (!P) return;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        probs_row(P, inp, key_mask, b, h, t, T, C, NH);
        size_t row = ((size_t)b * NH + h) * T + t;
        if (att) memcpy(att + row * T, P, (size_t)T * sizeof *P);
        double *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
        for (int d = 0; d < HS; d++) o[d] = 0;
        for (int j = 0; j <= t; j++) {
          double pj = P[j] * keep_factor(drop, row * T + j);
          const float *v = inp + ((size_t)b * T + j) * 3 * C + 2 * (size_t)C + (size_t)h * HS;
          for (int d = 0; d < HS; d++) o[d] += pj * v[d];
        }
      }
  free(P);
}

void ref_attention_backward(double *dinp, const float *dout, const float *inp, const int *key_mask, int B, int T,
                            int C, int NH, cf_dropout drop) {
  int HS = C / NH;
  double scale = 1.0 / sqrt((double)HS);
  double *P = malloc((size_t)T * sizeof *P), *dP = malloc((size_t)T * sizeof *dP);
  if (!P || !dP) { free(P); free(dP); return; }
  memset(dinp, 0, (size_t)B * T * 3 * C * sizeof *dinp);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        probs_row(P, inp, key_mask, b, h, t, T, C, NH);
        size_t row = ((size_t)b * NH + h) * T + t, tok = (size_t)b * T + t;
        const float *dy = dout + tok * C + (size_t)h * HS;
        const float *q = inp + tok * 3 * C + (size_t)h * HS;
        double *dq = dinp + tok * 3 * C + (size_t)h * HS;
        double dot = 0;
        for (int j = 0; j <= t; j++) {
          size_t key = (size_t)b * T + j;
          const float *v = inp + key * 3 * C + 2 * (size_t)C + (size_t)h * HS;
          double *dv = dinp + key * 3 * C + 2 * (size_t)C + (size_t)h * HS;
          double keep = keep_factor(drop, row * T + j), dpd = 0;
          for (int d = 0; d < HS; d++) {
            dpd += (double)dy[d] * v[d];       /* dL/dP_drop */
            dv[d] += P[j] * keep * dy[d];
          }
          dP[j] = dpd * keep;                  /* dL/dP */
          dot += P[j] * dP[j];
        }
        for (int j = 0; j <= t; j++) {
          double dpre = scale * P[j] * (dP[j] - dot);  /* dL/d(q.k_j) */
          size_t key = (size_t)b * T + j;
          const float *k = inp + key * 3 * C + C + (size_t)h * HS;
          double *dk = dinp + key * 3 * C + C + (size_t)h * HS;
          for (int d = 0; d < HS; d++) {
            dq[d] += dpre * k[d];
            dk[d] += dpre * q[d];
          }
        }
      }
  free(P);
  free(dP);
}
