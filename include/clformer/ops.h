/* clformer/ops.h: the Transformer's ops on the device, forward and backward launchers side by side. */
#ifndef CLFORMER_OPS_H
#define CLFORMER_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/gemm.h"  /* cf_activation */
#include "clformer/runtime.h"

/* Elementwise ops: activations, bias, the fused bias + activation of the FFN, inverted dropout
 * keyed by Philox, residual adds (plain and fused with dropout) and small helpers (scale, add,
 * copy). Device ops, their double-precision references, and the family's self-test.
 * Flat sizes n are element counts below 2^31; every cf_mem carries its own offset. */

/* "relu", "gelu_tanh", "gelu_erf"; NULL for an unknown value. */
const char *cf_activation_name(cf_activation act);

/* ---------- activations ---------- */

/* out = act(inp); out may alias inp. */
cf_status cf_activation_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem inp /* (n) */, size_t n,
                                cf_activation act);
/* dinp = dout * act'(inp), overwritten; dinp may alias dout. ReLU'(0) = 0. */
cf_status cf_activation_backward(cf_context *ctx, cf_mem dinp /* (n) */, cf_mem dout /* (n) */,
                                 cf_mem inp /* (n) */, size_t n, cf_activation act);

/* ---------- bias ---------- */

/* x[n, c] += bias[c], in place. */
cf_status cf_bias_forward(cf_context *ctx, cf_mem x /* (N, C) */, cf_mem bias /* (C) */, int N, int C);
/* dbias[c] += sum over rows of dout[n, c], in a fixed order (deterministic). */
cf_status cf_bias_backward(cf_context *ctx, cf_mem dbias /* (C) */, cf_mem dout /* (N, C) */, int N, int C);

/* The FFN's first layer after its GEMM, in one pass: pre += bias (in place, kept for backward)
 * and out = act(pre). out may be pre itself (each element is read and written by one item): pre
 * then ends as act(pre + bias). */
cf_status cf_bias_act_forward(cf_context *ctx, cf_mem out /* (N, C) */, cf_mem pre /* (N, C) in/out */,
                              cf_mem bias /* (C) */, int N, int C, cf_activation act);
/* dpre = (dout * the mask of d) * act'(pre) (overwritten; dpre may alias dout) and dbias += column
 * sums of dpre, in one pass and a fixed order: the backward of act then dropout d, the same bits as
 * cf_dropout_backward(dout, d) before it (d.p == 0: no mask). `pre` is the biased pre-activation
 * bias_act_forward left. */
cf_status cf_bias_act_backward(cf_context *ctx, cf_mem dpre /* (N, C) */, cf_mem dbias /* (C) */,
                               cf_mem dout /* (N, C) */, cf_mem pre /* (N, C) */, int N, int C,
                               cf_activation act, cf_dropout d);
/* The same for ReLU from its output out = dropout d of relu(pre): dpre = dout * d's scale where
 * out > 0, else zero, with no mask drawn (out's zeros are the dropped elements and pre <= 0): the
 * same bits as cf_bias_act_backward from pre with d's mask. */
cf_status cf_bias_relu_backward_from_output(cf_context *ctx, cf_mem dpre /* (N, C) */, cf_mem dbias /* (C) */,
                                            cf_mem dout /* (N, C) */, cf_mem out /* (N, C) */, int N, int C,
                                            cf_dropout d);

/* ---------- dropout ---------- */


/* 1 when element i is kept under d (the host twin of the device mask). */
int cf_dropout_keep(cf_dropout d, uint32_t i);

/* x = dropout(x), in place. p == 0 is an exact identity and launches nothing. */
cf_status cf_dropout_forward(cf_context *ctx, cf_mem x /* (n) */, size_t n, cf_dropout d);
/* dx = dropout(dx) with the same mask, in place; p == 0 launches nothing. */
cf_status cf_dropout_backward(cf_context *ctx, cf_mem dx /* (n) */, size_t n, cf_dropout d);

/* ---------- residual ---------- */

/* out = inp1 + inp2; out may alias either input. */
cf_status cf_residual_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem inp1 /* (n) */,
                              cf_mem inp2 /* (n) */, size_t n);
/* out = res + dropout(branch), one pass; out may alias res or branch. With p == 0 it is the
 * plain residual. The dropout element index counts from branch's offset. */
cf_status cf_residual_dropout_forward(cf_context *ctx, cf_mem out /* (n) */, cf_mem res /* (n) */,
                                      cf_mem branch /* (n) */, size_t n, cf_dropout d);
/* Backward of the above: dres = dout (no kernel: callers reuse dout) and
 * dbranch = dropout(dout), written here; with p == 0 a copy, or nothing when dbranch is dout. */
cf_status cf_residual_dropout_backward(cf_context *ctx, cf_mem dbranch /* (n) */, cf_mem dout /* (n) */,
                                       size_t n, cf_dropout d);

/* ---------- helpers ---------- */

/* x *= alpha, in place. */
cf_status cf_scale(cf_context *ctx, cf_mem x /* (n) */, size_t n, float alpha);
/* y += x. */
cf_status cf_add_inplace(cf_context *ctx, cf_mem y /* (n) */, cf_mem x /* (n) */, size_t n);
/* dst = src (clEnqueueCopyBuffer; the ranges must not overlap unless identical). */
cf_status cf_copy(cf_context *ctx, cf_mem dst /* (n) */, cf_mem src /* (n) */, size_t n);

/* LayerNorm over the last dimension, plain and fused with the residual add (and dropout) in front
 * of it: device ops, their double-precision references and the family's self-test. A row per
 * work-item on CPUs, a work-group per row elsewhere; statistics by two passes (never
 * E[x^2]-E[x]^2).
 * Not here: where LayerNorm sits in a block (Pre-LN or Post-LN), which is the model's business. */
/* out = (inp - mean) * rstd * weight + bias, row by row; mean and rstd are saved for backward.
 * N >= 0 rows, C >= 1 channels, eps > 0. */
cf_status cf_layernorm_forward(cf_context *ctx, cf_mem out /* (N, C) */, cf_mem mean /* (N) */,
                               cf_mem rstd /* (N) */, cf_mem inp /* (N, C) */, cf_mem weight /* (C) */,
                               cf_mem bias /* (C) */, int N, int C, float eps);

/* dinp = dL/dinp (overwritten when accumulate == 0, added to when accumulate == 1; dinp may
 * alias dout). dweight and dbias are always added to (+=), in a fixed order: deterministic. */
cf_status cf_layernorm_backward(cf_context *ctx, cf_mem dinp /* (N, C) */, cf_mem dweight /* (C) */,
                                cf_mem dbias /* (C) */, cf_mem dout /* (N, C) */, cf_mem inp /* (N, C) */,
                                cf_mem weight /* (C) */, cf_mem mean /* (N) */, cf_mem rstd /* (N) */,
                                int N, int C, int accumulate);

/* The residual add in front of a LayerNorm, fused with it: res = inp + dropout(branch), then
 * out, mean, rstd = LayerNorm(res), in one pass. The same bits as cf_residual_dropout_forward(res,
 * inp, branch) followed by cf_layernorm_forward(out, mean, rstd, res): the dropout element index is
 * n*C + c, counted from branch's offset; p == 0 is the plain sum. res may alias inp or branch. */
cf_status cf_residual_dropout_layernorm_forward(cf_context *ctx, cf_mem out /* (N, C) */, cf_mem mean /* (N) */,
                                                cf_mem rstd /* (N) */, cf_mem res /* (N, C) */,
                                                cf_mem inp /* (N, C) */, cf_mem branch /* (N, C) */,
                                                cf_mem weight /* (C) */, cf_mem bias /* (C) */, int N, int C,
                                                float eps, cf_dropout d);

/* Its backward, in one pass over the rows: dinp = dL/dres, which is also dL/dinp (overwritten when
 * accumulate == 0, added to when accumulate == 1, as cf_layernorm_backward; dinp may alias dout),
 * then dbranch = dropout(dinp) with the forward's mask (dbranch aliases nothing). dweight and
 * dbias are added to (+=). The same bits as cf_layernorm_backward followed by
 * cf_residual_dropout_backward. With p == 0, dbranch is a copy of dinp, or nothing when it is dinp. */
cf_status cf_residual_dropout_layernorm_backward(cf_context *ctx, cf_mem dinp /* (N, C) */,
                                                 cf_mem dbranch /* (N, C) */, cf_mem dweight /* (C) */,
                                                 cf_mem dbias /* (C) */, cf_mem dout /* (N, C) */,
                                                 cf_mem res /* (N, C) */, cf_mem weight /* (C) */,
                                                 cf_mem mean /* (N) */, cf_mem rstd /* (N) */, int N, int C,
                                                 int accumulate, cf_dropout d);

/* Causal multi-head self-attention on the device, forward and backward, with an optional key
 * padding mask and optional (inverted) dropout on the attention probabilities.
 *
 * The input is the output of one fused QKV projection, inp (B, T, 3C): per token
 * [q (C) | k (C) | v (C)], head h owning channels h*HS .. h*HS+HS-1 of each, HS = C/NH.
 *
 * Forward: preatt = q.k^T (one batched GEMM over every sequence and head, reading each head where
 * it lies in inp, into att); softmax in place over att with scale 1/sqrt(HS), the causal mask and
 * the key mask (saved: att holds the probabilities P before dropout, its masked entries exactly
 * 0); out = P_drop.v (one batched GEMM writing each head's columns of out). No permutes: inp is
 * what the backward reads q, k and v from.
 *
 * Dropout: element i of att (B, NH, T, T) is kept iff
 * cf_uniform24(word i%4 of cf_random_bits(seed, step, tensor_id, i/4)) >= p, and scaled by
 * 1/(1-p). The mask is never stored. The softmax kernel writes P (into att, for the softmax
 * backward) and, when p > 0, P_drop (into the T x T part of the scratch, for y = P_drop.v) in
 * the same pass; the backward regenerates P_drop from att into the same scratch area for
 * dv = P_drop^T.dy and folds the mask into the softmax backward. So dropout costs no memory
 * beyond the scratch that the backward needs anyway, and no extra pass in the forward.
 * The flat index i must fit in 32 bits (B*NH*T*T < 2^32).
 *
 * Not here: the QKV and output projections (plain GEMMs), a fused (flash) backward. */
/* Dropout on the attention probabilities is a cf_dropout like any other (p == 0: nothing extra
 * runs); the flat index i is the element's within (B, NH, T, T). */

/* Floats of scratch both directions need (allocate once, pass to every call): B*NH*T*T. The
 * forward uses it only when dropout is on; the backward always. `dropout` is accepted for callers
 * that size for the forward only in the future; today the size does not depend on it. */
size_t cf_attention_scratch_floats(int B, int T, int C, int NH, int dropout);

/* key_mask: int (B, T), 0 marks a padded key position no query attends to; a cf_mem whose buf
 * is NULL means no padding. A query row whose keys are all masked gets all-zero probabilities
 * (and a zero output). */
cf_status cf_attention_forward(cf_context *ctx,
                               cf_mem out,      // (B, T, C)
                               cf_mem att,      // (B, NH, T, T) saved: probabilities before dropout
                               cf_mem scratch,  // cf_attention_scratch_floats(...)
                               cf_mem inp,      // (B, T, 3C), read again by the backward
                               cf_mem key_mask, // int (B, T) or buf NULL
                               int B, int T, int C, int NH, cf_dropout drop);

/* Overwrites dinp (no accumulation: attention has no weights; dinp must not overlap inp). inp,
 * att, key_mask and drop must be those of the forward. */
cf_status cf_attention_backward(cf_context *ctx,
                                cf_mem dinp,     // (B, T, 3C)
                                cf_mem scratch,  // cf_attention_scratch_floats(...)
                                cf_mem dout,     // (B, T, C)
                                cf_mem inp,      // (B, T, 3C)
                                cf_mem att,      // (B, NH, T, T)
                                cf_mem key_mask, // int (B, T) or buf NULL
                                int B, int T, int C, int NH, cf_dropout drop);

/* Fused multi-head attention (FlashAttention-2 style, cl/attention_fused.cl): out =
 * softmax(scale * q.k^T + masks) . v, tile by tile with an online softmax, so no Tq x Tk matrix is
 * ever in device memory; the forward saves out and the logsumexp of each query row, the backward
 * recomputes the probabilities from them. Self-attention (q, k, v side by side in one (B, T, 3C)
 * tensor: strides 3C) and cross-attention (Tq != Tk, q and k/v from different tensors) alike.
 * Masks: causal (query t sees keys j <= t + Tk - Tq) and a key length per sequence (keys
 * j >= key_len[b] are padding); a query row with no key gets a zero output and logsumexp 0.
 * Dropout on the probabilities is keyed like cf_attention_forward's: element
 * i = ((b*NH + h)*Tq + t)*Tk + j of the (B, NH, Tq, Tk) matrix (< 2^32 when p > 0), so with
 * Tq = Tk = T both paths draw the same mask. */
typedef struct cf_attention_dims {
  int B, Tq, Tk, NH, HS;  /* sequences, query rows, key rows, heads, channels per head */
  int causal;             /* 1: the causal mask above */
  /* Row strides in floats: head h's channels of row t of sequence b of q are
   * q[(b*Tq + t)*ldq + h*HS ...]; k, v likewise (Tk rows); out and dout (ldo) */
  int ldq, ldk, ldv, ldo;
  float scale;            /* of q.k, usually 1/sqrt(HS) */
} cf_attention_dims;

/* Floats of scratch either direction needs: B*NH*Tq. */
size_t cf_attention_fused_scratch_floats(const cf_attention_dims *d);

/* key_len: int (B), or a cf_mem whose buf is NULL for no padding. */
cf_status cf_attention_fused_forward(cf_context *ctx,
                                     cf_mem out,      /* (B, Tq, ldo) head h's channels written */
                                     cf_mem lse,      /* (B, NH, Tq) saved: logsumexp of each row */
                                     cf_mem scratch,  /* cf_attention_fused_scratch_floats */
                                     cf_mem q,        /* (B, Tq, ldq) */
                                     cf_mem k,        /* (B, Tk, ldk) */
                                     cf_mem v,        /* (B, Tk, ldv) */
                                     cf_mem key_len, const cf_attention_dims *d, cf_dropout drop);

/* Overwrites dq, dk and dv (laid out like q, k and v; they may share one buffer, as the
 * (B, T, 3C) gradient of a fused projection does, but not with an input). out, lse, key_len and
 * drop must be the forward's. */
cf_status cf_attention_fused_backward(cf_context *ctx, cf_mem dq, cf_mem dk, cf_mem dv,
                                      cf_mem scratch,  /* cf_attention_fused_scratch_floats */
                                      cf_mem dout,     /* (B, Tq, ldo) */
                                      cf_mem q, cf_mem k, cf_mem v, cf_mem out, cf_mem lse, cf_mem key_len,
                                      const cf_attention_dims *d, cf_dropout drop);

/* Token and position embeddings: out[b,t,:] = token_scale * wte[tokens[b,t]] + pos[t], with
 * learned positions (a wpe table) or the fixed sinusoids of Vaswani et al. computed on the fly.
 * Not here: dropout on the sum (elementwise), the output projection tied to wte (gemm). */
/* wpe.buf == NULL selects sinusoidal positions: pos[t,2i] = sin(t * w_i), pos[t,2i+1] = cos(t * w_i),
 * w_i = 10000^(-2i/C); an odd C ends with a sine column. Token ids outside [0, V) are invalid (the
 * host checks them with cf_embedding_check_tokens where the data enters); the kernels never read
 * out of bounds for them: such a row gets a zero token part and contributes nothing to dwte. */
cf_status cf_embedding_forward(cf_context *ctx, cf_mem out,  // (B, T, C)
                               cf_mem tokens,                // int (B, T)
                               cf_mem wte,                   // (V, C)
                               cf_mem wpe,                   // (T_max >= T, C), or buf NULL: sinusoidal
                               int B, int T, int C, int V, float token_scale);

/* dwte += token_scale * sum over (b,t) with tokens[b,t] == v of dout[b,t,:] (repeated tokens sum);
 * dwpe += sum over b of dout[b,t,:] for t < T (skipped when dwpe.buf is NULL).
 * Deterministic without atomics, each dwte element a compensated sum in a fixed order. On CPUs one
 * work-item per (128 columns, range of token ids) sorts its range's rows by token in local memory
 * (a counting sort of the B*T ids) and reads each of their dout chunks once: cost one read of dout
 * plus ceil(C/128) * ranges scans of the ids (ranges ~8 / ceil(C/128), more when a range's arrays
 * would not fit in half the local memory); dwpe by one work-item per t. Elsewhere (and on a CPU
 * whose local memory cannot hold B*T ids) one work-group per (token, column tile) scans the B*T
 * tokens in order: V * ceil(C/CF_WG) * B*T compares plus one read of dout (trivial at V = 256; at
 * V = 50k and B*T = 8k ~1e9 integer compares, tens of ms on a GPU). */
cf_status cf_embedding_backward(cf_context *ctx, cf_mem dwte,  // (V, C) +=
                                cf_mem dwpe,                   // (T_max >= T, C) +=, or buf NULL
                                cf_mem dout,                   // (B, T, C)
                                cf_mem tokens,                 // int (B, T)
                                int B, int T, int C, int V, float token_scale);

/* Index of the first token outside [0, V), or -1 when all n are valid. */
long cf_embedding_check_tokens(const int *tokens, size_t n, int V);

/* Softmax cross-entropy with label smoothing and an ignore index, fused with the
 * (max-subtracted) softmax. Targets q = (1 - eps) * onehot(target) + eps / V, so
 * loss_row = -sum_v q_v log p_v. Not here: the logits projection (gemm). */
/* losses[n] = loss of row n, 0 for ignored rows; loss[0] = mean of losses over counted rows (0 if
 * none), reduced on the device in a fixed order. A row is counted when targets[n] != ignore_index;
 * targets outside [0, V) other than ignore_index are invalid: the kernels read nothing out of
 * bounds for them and treat them as ignored. Two launches: the rows (one per work-item on CPUs,
 * one work-group per row elsewhere), then one work-group for the mean. */
cf_status cf_crossentropy_forward(cf_context *ctx, cf_mem loss,  // (1)
                                  cf_mem losses,                 // (N)
                                  cf_mem logits,                 // (N, V)
                                  cf_mem targets,                // int (N)
                                  int N, int V, float smoothing, int ignore_index);

/* dlogits = dloss * (softmax(logits) - q) for counted rows, 0 for ignored rows (the caller passes
 * dloss = 1 / count for the mean). dlogits may be logits itself (in place); it is overwritten,
 * not accumulated. */
cf_status cf_crossentropy_backward(cf_context *ctx, cf_mem dlogits,  // (N, V), may alias logits
                                   cf_mem logits,                    // (N, V)
                                   cf_mem targets,                   // int (N)
                                   int N, int V, float smoothing, int ignore_index, float dloss);

/* Both of the above in one pass over the logits, for a training step (which needs both): loss and
 * losses as cf_crossentropy_forward, dlogits as cf_crossentropy_backward, bit for bit on CPUs
 * (one exp per logit instead of two, the logits read once). dlogits may be logits (in place). */
cf_status cf_crossentropy_forward_backward(cf_context *ctx, cf_mem loss,  // (1)
                                           cf_mem losses,                 // (N)
                                           cf_mem dlogits,                // (N, V), may alias logits
                                           cf_mem logits,                 // (N, V)
                                           cf_mem targets,                // int (N)
                                           int N, int V, float smoothing, int ignore_index, float dloss);

/* Number of rows with targets[n] != ignore_index. */
int cf_crossentropy_count(const int *targets, int N, int ignore_index);

/* Optimizers over one flat parameter buffer and its gradient buffer (Adam, AdamW, SGD with
 * momentum), global and per-segment L2 norms, and clipping by a norm held on the device, so a
 * training step needs no host round trip. Not here: the parameter layout (the model's table). */
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

/* The divergence watch, one launch a training step and no host round trip. state (3 floats, zero
 * at first): state[0] stays 0 while every norm seen was finite and every loss finite and <=
 * loss_limit, becomes 1 at the first call where not (state[1], state[2] := that loss and norm),
 * and 2 at every call after. */
cf_status cf_divergence_watch(cf_context *ctx, cf_mem state,  // (3), in place
                              cf_mem loss, cf_mem norm,       // (1) each
                              float loss_limit);
/* When state[0] == 1 (the watch has just found a bad step): flags[s] = 1 if x's segment s holds a
 * NaN or an infinity, else 0. Otherwise nothing is written. table: cf_segment_table's pairs,
 * uploaded once. */
cf_status cf_nonfinite_segments(cf_context *ctx, cf_mem flags,  // (nseg)
                                cf_mem state,                   // (3)
                                cf_mem x,                       // flat buffer holding every segment
                                cf_mem table,                   // uint (2 * nseg)
                                int nseg);
/* table[2s], table[2s + 1] = offsets[s], counts[s] as uint32 (CF_ERR_INVALID_ARG beyond 2^32). */
cf_status cf_segment_table(const size_t *offsets, const size_t *counts, int nseg, uint32_t *table);

/* x *= min(1, clip_norm / (norm[0] + 1e-6)), norm read on the device; nothing when clip_norm <= 0. */
cf_status cf_clip_by_norm(cf_context *ctx, cf_mem x,  // (n)
                          size_t n, cf_mem norm,      // (1)
                          float clip_norm);

#endif
