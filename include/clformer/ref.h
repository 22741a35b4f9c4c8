/* clformer/ref.h: double-precision references of every op, the yardstick of the self-test and the tests. */
#ifndef CLFORMER_REF_H
#define CLFORMER_REF_H

#include <stddef.h>
#include "clformer/ops.h"

/* Double-precision reference on the host, same conventions (C in double, updated in place). */
void ref_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, double alpha, const float *A, size_t lda,
              const float *B, size_t ldb, double beta, double *C, size_t ldc);
/* ---------- references (float inputs, double arithmetic and outputs) ----------
 * Weight-gradient references add into their outputs (+=) like the device ops; the rest write. */
double ref_activation(double x, cf_activation act);
double ref_activation_grad(double x, cf_activation act);
void ref_activation_forward(double *out, const float *inp, size_t n, cf_activation act);
void ref_activation_backward(double *dinp, const float *dout, const float *inp, size_t n, cf_activation act);
void ref_bias_forward(double *out /* (N, C) */, const float *x /* (N, C) */, const float *bias /* (C) */,
                      int N, int C);
void ref_bias_backward(double *dbias /* (C) += */, const float *dout /* (N, C) */, int N, int C);
/* pre_out = pre + bias, out = act(pre + bias). */
void ref_bias_act_forward(double *out /* (N, C) */, double *pre_out /* (N, C) */, const float *pre /* (N, C) */,
                          const float *bias /* (C) */, int N, int C, cf_activation act);
void ref_bias_act_backward(double *dpre /* (N, C) */, double *dbias /* (C) += */, const float *dout /* (N, C) */,
                           const float *pre /* (N, C) */, int N, int C, cf_activation act);
void ref_dropout_forward(double *out, const float *x, size_t n, cf_dropout d);
void ref_dropout_backward(double *dx, const float *dout, size_t n, cf_dropout d);
void ref_residual_forward(double *out, const float *inp1, const float *inp2, size_t n);
void ref_residual_dropout_forward(double *out, const float *res, const float *branch, size_t n, cf_dropout d);
/* Plain-C references: the same float inputs the device saw, computed and written in double.
 * Like the device ops, backward overwrites dinp and adds into dweight and dbias (callers start
 * them at the device buffers' initial values, or zero). */
void ref_layernorm_forward(double *out /* (N, C) */, double *mean /* (N) */, double *rstd /* (N) */,
                           const float *inp /* (N, C) */, const float *weight /* (C) */,
                           const float *bias /* (C) */, int N, int C, float eps);
void ref_layernorm_backward(double *dinp /* (N, C) */, double *dweight /* (C) */, double *dbias /* (C) */,
                            const float *dout /* (N, C) */, const float *inp /* (N, C) */,
                            const float *weight /* (C) */, const float *mean /* (N) */,
                            const float *rstd /* (N) */, int N, int C);
/* res = inp + dropout(branch) and out = LayerNorm(res), in double (res too: it is not rounded to
 * float before the LayerNorm). */
void ref_residual_dropout_layernorm_forward(double *out /* (N, C) */, double *mean /* (N) */,
                                            double *rstd /* (N) */, double *res /* (N, C) */, const float *inp /* (N, C) */,
                                            const float *branch /* (N, C) */, const float *weight /* (C) */,
                                            const float *bias /* (C) */, int N, int C, float eps, cf_dropout d);
/* dinp += the LayerNorm's input gradient (start it at zero, or at the device's initial dinp to
 * check accumulate), then dbranch = dropout(dinp); dweight and dbias are added to. */
void ref_residual_dropout_layernorm_backward(double *dinp /* (N, C) */, double *dbranch /* (N, C) */,
                                             double *dweight /* (C) */, double *dbias /* (C) */,
                                             const float *dout /* (N, C) */, const float *res /* (N, C) */,
                                             const float *weight /* (C) */, const float *mean /* (N) */,
                                             const float *rstd /* (N) */, int N, int C, cf_dropout d);
/* Plain-C references in double, computed directly from inp (B, T, 3C) (not via the permuted
 * layout), with the same causal mask, key mask (NULL: none) and dropout.
 * ref_attention_forward: out (B, T, C); att (B, NH, T, T) the probabilities before dropout,
 * may be NULL. ref_attention_backward: dinp (B, T, 3C) from dout (B, T, C). */
void ref_attention_forward(double *out, double *att, const float *inp, const int *key_mask,
                           int B, int T, int C, int NH, cf_dropout drop);
void ref_attention_backward(double *dinp, const float *dout, const float *inp, const int *key_mask,
                            int B, int T, int C, int NH, cf_dropout drop);
/* The fused attention's references (cf_attention_fused_*), same strides, masks (key_len NULL:
 * none) and dropout. Forward: out's head channels and lse (B, NH, Tq); backward: the head
 * channels of dq, dk, dv (laid out like q, k, v; they may share one array) from dout. */
void ref_attention_fused_forward(double *out, double *lse, const float *q, const float *k, const float *v,
                                 const int *key_len, const cf_attention_dims *d, cf_dropout drop);
void ref_attention_fused_backward(double *dq, double *dk, double *dv, const float *dout, const float *q,
                                  const float *k, const float *v, const int *key_len, const cf_attention_dims *d,
                                  cf_dropout drop);
/* Double references (same float inputs, double arithmetic and outputs). wpe NULL: sinusoidal. */
void ref_embedding_forward(double *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C,
                           int V, float token_scale);
/* Adds into dwte (V, C) and dwpe (T, C) (dwpe may be NULL). */
void ref_embedding_backward(double *dwte, double *dwpe, const float *dout, const int *tokens, int B, int T, int C,
                            int V, float token_scale);
/* The sinusoidal position value at (t, c) for C channels, in double. */
double ref_sinusoid(int t, int c, int C);
/* Double references. losses (N) and *loss (the mean) as the device defines them. */
void ref_crossentropy_forward(double *loss, double *losses, const float *logits, const int *targets, int N, int V,
                              double smoothing, int ignore_index);
void ref_crossentropy_backward(double *dlogits, const float *logits, const int *targets, int N, int V,
                               double smoothing, int ignore_index, double dloss);
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
/* The watch: state_out from state, loss and norm; flags_out (prior values kept when state[0] != 1). */
void ref_divergence_watch(double *state_out, const float *state, float loss, float norm, float loss_limit);
void ref_nonfinite_segments(double *flags_out, const float *flags, const float *state, const float *x,
                            const size_t *offsets, const size_t *counts, int nseg);
void ref_clip_by_norm(double *out, const float *x, size_t n, float norm, float clip_norm);

#endif
