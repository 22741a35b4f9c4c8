/* Double-precision references for the embeddings (the device's fp32 twin is cl/embedding.cl). */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/ref.h"

double ref_sinusoid(int t, int c, int C) {
  double w = pow(10000.0, -(double)(c & ~1) / (double)C);
  return (c & 1) ? cos(t * w) : sin(t * w);
}

void ref_embedding_forward(double *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C,
                           int V, float token_scale) {
  for (int n = 0; n < B * T; n++) {
    int t = n % T, tok = tokens[n];
    int valid = tok >= 0 && tok < V;
    for (int c = 0; c < C; c++) {
      double e = valid ? (double)token_scale * wte[(size_t)tok * C + c] : 0.0;
      double p = wpe ? (double)wpe[(size_t)t * C + c] : ref_sinusoid(t, c, C);
      out[(size_t)n * C + c] = e + p;
    }
  }
}

void ref_embedding_backward(double *dwte, double *dwpe, const float *dout, const int *tokens, int B, int T, int C,
                            int V, float token_scale) {
  for (int n = 0; n < B * T; n++) {
    int t = n % T, tok = tokens[n];
    int valid = tok >= 0 && tok < V;
    for (int c = 0; c < C; c++) {
      double d = dout[(size_t)n * C + c];
      if (valid) dwte[(size_t)tok * C + c] += (double)token_scale * d;
      if (dwpe) dwpe[(size_t)t * C + c] += d;
    }
  }
}
