/* Double-precision references of the fused attention (cf_attention_fused_*): strided q, k, v,
 * Tq query and Tk key rows, the causal and key-length masks and dropout, one query row at a time
 * with the whole row of probabilities in hand (no tiling, no online softmax: what the device does
 * in pieces is done here at once). Slow, and meant to be. */
#include <math.h>
#include <stdlib.h>
#include "clformer/ref.h"

/* Dropout factor of element i of the (B, NH, Tq, Tk) matrix: 1/(1-p) if kept, else 0. */
static double keep_factor(cf_dropout drop, size_t i) {
  if (drop.p <= 0.0f) return 1.0;
  return cf_dropout_keep(drop, (uint32_t)i) ? 1.0 / (1.0 - drop.p) : 0.0;
}

/* Keys query t of sequence b sees: j < key_end. */
static int key_end(const cf_attention_dims *d, const int *key_len, int b, int t) {
  int end = d->Tk;
  if (key_len) end = key_len[b] < 0 ? 0 : key_len[b] < end ? key_len[b] : end;
  if (d->causal && t + d->Tk - d->Tq + 1 < end) end = t + d->Tk - d->Tq + 1;
  return end > 0 ? end : 0;
}

static const float *row_at(const float *x, int ld, int rows, int b, int t, int h, int HS) {
  return x + ((size_t)b * rows + t) * ld + (size_t)h * HS;
}

/* P[j] for j < n (n = key_end), the row's probabilities; returns the logsumexp (0 when n == 0). */
static double probs_row(double *P, const float *q, const float *k, const cf_attention_dims *d, int b, int h, int t,
                        int n) {
  const float *qr = row_at(q, d->ldq, d->Tq, b, t, h, d->HS);
  double m = -INFINITY, sum = 0;
  for (int j = 0; j < n; j++) {
    const float *kr = row_at(k, d->ldk, d->Tk, b, j, h, d->HS);
    double s = 0;
    for (int c = 0; c < d->HS; c++) s += (double)qr[c] * kr[c];
    P[j] = s * d->scale;
    if (P[j] > m) m = P[j];
  }
  for (int j = 0; j < n; j++) sum += (P[j] = exp(P[j] - m));
  for (int j = 0; j < n; j++) P[j] /= sum;
  return n > 0 ? m + log(sum) : 0.0;
}

void ref_attention_fused_forward(double *out, double *lse, const float *q, const float *k, const float *v,
                                 const int *key_len, const cf_attention_dims *d, cf_dropout drop) {
  double *P = malloc(((size_t)d->Tk + 1) * sizeof *P);
  if (!P) return;
  for (int b = 0; b < d->B; b++)
    for (int h = 0; h < d->NH; h++)
      for (int t = 0; t < d->Tq; t++) {
        int n = key_end(d, key_len, b, t);
        size_t row = ((size_t)b * d->NH + h) * d->Tq + t;
        lse[row] = probs_row(P, q, k, d, b, h, t, n);
        double *o = out + ((size_t)b * d->Tq + t) * d->ldo + (size_t)h * d->HS;
        for (int c = 0; c < d->HS; c++) o[c] = 0;
        for (int j = 0; j < n; j++) {
          double pj = P[j] * keep_factor(drop, row * d->Tk + j);
          const float *vr = row_at(v, d->ldv, d->Tk, b, j, h, d->HS);
          for (int c = 0; c < d->HS; c++) o[c] += pj * vr[c];
        }
      }
  free(P);
}

/* Zero head channels of every row of a (B, rows, ld) gradient (other channels left as they are). */
static void zero_heads(double *g, int ld, int rows, const cf_attention_dims *d) {
  for (size_t r = 0; r < (size_t)d->B * rows; r++)
    for (int c = 0; c < d->NH * d->HS; c++) g[r * ld + c] = 0;
}

/* One query row's share of the gradients. */
static void backward_row(double *dq, double *dk, double *dv, const float *dout, const float *q, const float *k,
                         const float *v, const double *P, double *dP, const cf_attention_dims *d, int b, int h, int t,
                         int n, cf_dropout drop) {
  size_t row = ((size_t)b * d->NH + h) * d->Tq + t, HS = (size_t)d->HS;
  const float *dy = dout + ((size_t)b * d->Tq + t) * d->ldo + h * HS, *qr = row_at(q, d->ldq, d->Tq, b, t, h, d->HS);
  double dot = 0, *dqr = dq + ((size_t)b * d->Tq + t) * d->ldq + h * HS;
  for (int j = 0; j < n; j++) {
    const float *vr = row_at(v, d->ldv, d->Tk, b, j, h, d->HS);
    double keep = keep_factor(drop, row * d->Tk + j), dpd = 0, *dvr = dv + ((size_t)b * d->Tk + j) * d->ldv + h * HS;
    for (size_t c = 0; c < HS; c++) {
      dpd += (double)dy[c] * vr[c]; /* dL/dP_drop */
      dvr[c] += P[j] * keep * dy[c];
    }
    dP[j] = dpd * keep;
    dot += P[j] * dP[j];
  }
  for (int j = 0; j < n; j++) {
    double ds = d->scale * P[j] * (dP[j] - dot); /* dL/d(q.k_j) */
    const float *kr = row_at(k, d->ldk, d->Tk, b, j, h, d->HS);
    double *dkr = dk + ((size_t)b * d->Tk + j) * d->ldk + h * HS;
    for (size_t c = 0; c < HS; c++) {
      dqr[c] += ds * kr[c];
      dkr[c] += ds * qr[c];
    }
  }
}

void ref_attention_fused_backward(double *dq, double *dk, double *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const int *key_len, const cf_attention_dims *d,
                                  cf_dropout drop) {
  double *P = malloc(((size_t)d->Tk + 1) * sizeof *P), *dP = malloc(((size_t)d->Tk + 1) * sizeof *dP);
  if (!P || !dP) { free(P); free(dP); return; }
  zero_heads(dq, d->ldq, d->Tq, d);
  zero_heads(dk, d->ldk, d->Tk, d);
  zero_heads(dv, d->ldv, d->Tk, d);
  for (int b = 0; b < d->B; b++)
    for (int h = 0; h < d->NH; h++)
      for (int t = 0; t < d->Tq; t++) {
        int n = key_end(d, key_len, b, t);
        probs_row(P, q, k, d, b, h, t, n);
        backward_row(dq, dk, dv, dout, q, k, v, P, dP, d, b, h, t, n, drop);
      }
  free(P);
  free(dP);
}
