/* Double-precision references for softmax cross-entropy with label smoothing. */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/ref.h"

static int counted(int t, int V, int ignore_index) { return t != ignore_index && t >= 0 && t < V; }

/* log sum exp of a row, max-subtracted. */
static double row_lse(const float *x, int V) {
  double m = -INFINITY, s = 0;
  for (int v = 0; v < V; v++) m = fmax(m, (double)x[v]);
  for (int v = 0; v < V; v++) s += exp((double)x[v] - m);
  return m + log(s);
}

void ref_crossentropy_forward(double *loss, double *losses, const float *logits, const int *targets, int N, int V,
                              double smoothing, int ignore_index) {
  double sum = 0;
  int count = 0;
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    int t = targets[n];
    if (!counted(t, V, ignore_index)) { losses[n] = 0; continue; }
    double lse = row_lse(x, V), l = 0;
    for (int v = 0; v < V; v++) {
      double q = smoothing / V + (v == t ? 1.0 - smoothing : 0.0);
      l -= q * ((double)x[v] - lse);
    }
    losses[n] = l;
    sum += l;
    count++;
  }
  *loss = count ? sum / count : 0.0;
}

void ref_crossentropy_backward(double *dlogits, const float *logits, const int *targets, int N, int V,
                               double smoothing, int ignore_index, double dloss) {
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    double *dx = dlogits + (size_t)n * V;
    int t = targets[n];
    if (!counted(t, V, ignore_index)) {
      for (int v = 0; v < V; v++) dx[v] = 0;
      continue;
    }
    double lse = row_lse(x, V);
    for (int v = 0; v < V; v++) {
      double q = smoothing / V + (v == t ? 1.0 - smoothing : 0.0);
      dx[v] = dloss * (exp((double)x[v] - lse) - q);
    }
  }
}
