/* Optimizers over one flat parameter buffer and its gradient buffer (Adam, AdamW, SGD with
 * momentum), global and per-segment L2 norms, and clipping by a norm held on the device, so a
 * training step needs no host round trip. Not here: the parameter layout (the model's table). */
#ifndef CLFORMER_OPTIMIZER_H
#define CLFORMER_OPTIMIZER_H

#include "clformer/program.h"
#include "clformer/selftest.h"

typedef struct cf_adam {
  float lr, beta1, beta2, eps, weight_decay;
  int decoupled;  /* 0: Adam with L2 (g += wd * p); 1: AdamW (p -= lr * wd * p) */
  int step;       /* 1-based, for bias correction */
} cf_adam;

/* One step over n elements. When grad_norm.buf is set and clip_norm > 0, gradients are first
 * scaled by min(1, clip_norm / (grad_norm[0] + 1e-6)), the norm read on the device. Then
 *   g = s*grad (+ wd*p for Adam);  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
 *   p -= lr*wd*p (AdamW);  p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps).
 * grads are left unchanged. */
cf_status cf_adam_update(cf_context *ctx, cf_mem params,  // (n)
                         cf_mem grads,                    // (n)
                         cf_mem m, cf_mem v,              // (n) each, Adam's moments
                         size_t n, const cf_adam *h,
                         cf_mem grad_norm,                // (1), or buf NULL
                         float clip_norm);

/* PyTorch's SGD: g = s*grad + wd*p; buf = momentum*buf + g; p -= lr*buf (buf starts at zero, so
 * the first step is buf = g). momentum_buf.buf may be NULL when momentum == 0 (p -= lr*g). */
cf_status cf_sgd_update(cf_context *ctx, cf_mem params,  // (n)
                        cf_mem grads,                    // (n)
                        cf_mem momentum_buf,             // (n), or buf NULL when momentum == 0
                        size_t n, float lr, float momentum, float weight_decay,
                        cf_mem grad_norm,                // (1), or buf NULL
                        float clip_norm);

/* out[0] = sqrt(sum x^2) over n elements: per-work-group partials into scratch, then one
 * work-group sums them in a fixed order (bit-identical on repeat). scratch holds
 * cf_norm_scratch_floats(n) floats. */
cf_status cf_global_norm(cf_context *ctx, cf_mem out,  // (1)
                         cf_mem x,                     // (n)
                         size_t n, cf_mem scratch);
size_t cf_norm_scratch_floats(size_t n);

/* out[s] = L2 norm of x[offsets[s] .. offsets[s] + counts[s]) (0 for an empty segment). Two
 * launches whatever nseg is: one over all segments' blocks, one finishing per segment. A small
 * block table is written into scratch first (a blocking write, so use this for analysis, not in
 * the hot loop). scratch holds cf_segment_norms_scratch_floats(counts, nseg) floats. */
cf_status cf_segment_norms(cf_context *ctx, cf_mem out,  // (nseg)
                           cf_mem x,                     // flat buffer holding every segment
                           const size_t *offsets, const size_t *counts, int nseg, cf_mem scratch);
size_t cf_segment_norms_scratch_floats(const size_t *counts, int nseg);

/* x *= min(1, clip_norm / (norm[0] + 1e-6)), norm read on the device; nothing when clip_norm <= 0. */
cf_status cf_clip_by_norm(cf_context *ctx, cf_mem x,  // (n)
                          size_t n, cf_mem norm,      // (1)
                          float clip_norm);

/* Double references. The outputs are the state after one step from the float state given;
 * grad_norm NULL means no clipping. */
void ref_adam_update(double *params_out, double *m_out, double *v_out, const float *params, const float *grads,
                     const float *m, const float *v, size_t n, const cf_adam *h, const float *grad_norm,
                     float clip_norm);
void ref_sgd_update(double *params_out, double *buf_out, const float *params, const float *grads,
                    const float *buf /* NULL: zeros */, size_t n, float lr, float momentum, float weight_decay,
                    const float *grad_norm, float clip_norm);
/* The clip factor min(1, clip / (norm + 1e-6)), 1 when clip_norm <= 0. */
double ref_clip_scale(double norm, double clip_norm);
double ref_global_norm(const float *x, size_t n);
void ref_segment_norms(double *out, const float *x, const size_t *offsets, const size_t *counts, int nseg);
void ref_clip_by_norm(double *out, const float *x, size_t n, float norm, float clip_norm);

cf_status cf_selftest_optimizer(cf_context *ctx, cf_selftest *t);

#endif
