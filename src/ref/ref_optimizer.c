/* Double-precision references for the optimizers, norms and clipping. */
#include <math.h>
#include "clformer/ops.h"
#include "clformer/ref.h"

double ref_clip_scale(double norm, double clip_norm) {
  if (!(clip_norm > 0)) return 1.0;
  return fmin(1.0, clip_norm / (norm + 1e-6));
}

void ref_adam_update(double *params_out, double *m_out, double *v_out, const float *params, const float *grads,
                     const float *m, const float *v, size_t n, const cf_adam *h, const float *grad_norm,
                     float clip_norm) {
  double s = grad_norm ? ref_clip_scale(*grad_norm, clip_norm) : 1.0;
  double b1 = h->beta1, b2 = h->beta2, lr = h->lr, wd = h->weight_decay;
  double bc1 = 1.0 - pow(b1, h->step), bc2 = 1.0 - pow(b2, h->step);
  for (size_t i = 0; i < n; i++) {
    double p = params[i], g = s * grads[i];
    if (!h->decoupled) g += wd * p;
    double mi = b1 * m[i] + (1 - b1) * g, vi = b2 * v[i] + (1 - b2) * g * g;
    if (h->decoupled) p -= lr * wd * p;
    p -= lr * (mi / bc1) / (sqrt(vi / bc2) + h->eps);
    params_out[i] = p;
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

void ref_sgd_update(double *params_out, double *buf_out, const float *params, const float *grads, const float *buf,
                    size_t n, float lr, float momentum, float weight_decay, const float *grad_norm, float clip_norm) {
  double s = grad_norm ? ref_clip_scale(*grad_norm, clip_norm) : 1.0;
  for (size_t i = 0; i < n; i++) {
    double p = params[i], g = s * grads[i] + (double)weight_decay * p;
    if (buf_out) {
      g = (double)momentum * (buf ? buf[i] : 0.0) + g;
      buf_out[i] = g;
    }
    params_out[i] = p - (double)lr * g;
  }
}

double ref_global_norm(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
  return sqrt(s);
}

void ref_segment_norms(double *out, const float *x, const size_t *offsets, const size_t *counts, int nseg) {
  for (int s = 0; s < nseg; s++) out[s] = ref_global_norm(x + offsets[s], counts[s]);
}

void ref_clip_by_norm(double *out, const float *x, size_t n, float norm, float clip_norm) {
  double s = ref_clip_scale(norm, clip_norm);
  for (size_t i = 0; i < n; i++) out[i] = s * x[i];
}

void ref_divergence_watch(double *state_out, const float *state, float loss, float norm, float loss_limit) {
  for (int i = 0; i < 3; i++) state_out[i] = state[i];
  if (state[0] != 0) state_out[0] = 2;
  else if (!isfinite(loss) || !isfinite(norm) || loss > loss_limit)
    state_out[0] = 1, state_out[1] = loss, state_out[2] = norm;
}

void ref_nonfinite_segments(double *flags_out, const float *flags, const float *state, const float *x,
                            const size_t *offsets, const size_t *counts, int nseg) {
  for (int s = 0; s < nseg; s++) {
    flags_out[s] = flags[s];
    if (state[0] != 1) continue;
    flags_out[s] = 0;
    for (size_t i = 0; i < counts[s]; i++)
      if (!isfinite(x[offsets[s] + i])) flags_out[s] = 1;
  }
}
