/* Causal multi-head self-attention on the device, forward and backward, with an optional key
 * padding mask and optional (inverted) dropout on the attention probabilities.
 *
 * The input is the output of one fused QKV projection, inp (B, T, 3C): per token
 * [q (C) | k (C) | v (C)], head h owning channels h*HS .. h*HS+HS-1 of each, HS = C/NH.
 *
 * Forward: permute q, k, v into qkvp (3, B, NH, T, HS) (saved); preatt = q.k^T (one batched
 * GEMM, into att); softmax in place over att with scale 1/sqrt(HS), the causal mask and the key
 * mask (saved: att holds the probabilities P before dropout, its masked entries exactly 0);
 * y = P_drop.v (one batched GEMM); unpermute y into out (B, T, C).
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
#ifndef CLFORMER_ATTENTION_H
#define CLFORMER_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/program.h"
#include "clformer/selftest.h"

/* Inverted dropout on the attention probabilities; p == 0 disables it (nothing extra runs). */
typedef struct cf_attn_dropout {
  float p;                            /* drop probability, 0 <= p < 1 */
  uint32_t seed, step, tensor_id;     /* Philox key and counter (see cl/philox.clh) */
} cf_attn_dropout;

/* Floats of scratch both directions need (allocate once, pass to every call):
 * 3*B*T*C + B*NH*T*T. The forward alone uses B*T*C, plus B*NH*T*T when dropout is on; the
 * backward always uses the whole. `dropout` is accepted for callers that size for the
 * forward only in the future; today the size does not depend on it. */
size_t cf_attention_scratch_floats(int B, int T, int C, int NH, int dropout);

/* key_mask: int (B, T), 0 marks a padded key position no query attends to; a cf_mem whose buf
 * is NULL means no padding. A query row whose keys are all masked gets all-zero probabilities
 * (and a zero output). */
cf_status cf_attention_forward(cf_context *ctx,
                               cf_mem out,      // (B, T, C)
                               cf_mem qkvp,     // (3, B, NH, T, HS) saved for backward
                               cf_mem att,      // (B, NH, T, T) saved: probabilities before dropout
                               cf_mem scratch,  // cf_attention_scratch_floats(...)
                               cf_mem inp,      // (B, T, 3C)
                               cf_mem key_mask, // int (B, T) or buf NULL
                               int B, int T, int C, int NH, cf_attn_dropout drop);

/* Overwrites dinp (no accumulation: attention has no weights). qkvp, att, key_mask and drop
 * must be those of the forward. */
cf_status cf_attention_backward(cf_context *ctx,
                                cf_mem dinp,     // (B, T, 3C)
                                cf_mem scratch,  // cf_attention_scratch_floats(...)
                                cf_mem dout,     // (B, T, C)
                                cf_mem qkvp,     // (3, B, NH, T, HS)
                                cf_mem att,      // (B, NH, T, T)
                                cf_mem key_mask, // int (B, T) or buf NULL
                                int B, int T, int C, int NH, cf_attn_dropout drop);

/* Inference-only forward in one kernel: out (B, T, C) from inp (B, T, 3C) with an online
 * softmax per query row, no T x T buffer, no dropout, nothing saved (so no backward). Same
 * causal and key masks as cf_attention_forward. Head size at most CF_ATTENTION_FUSED_MAX_HS. */
#define CF_ATTENTION_FUSED_MAX_HS 128
cf_status cf_attention_forward_fused(cf_context *ctx,
                                     cf_mem out,      // (B, T, C)
                                     cf_mem inp,      // (B, T, 3C)
                                     cf_mem key_mask, // int (B, T) or buf NULL
                                     int B, int T, int C, int NH);

/* Plain-C references in double, computed directly from inp (B, T, 3C) (not via the permuted
 * layout), with the same causal mask, key mask (NULL: none) and dropout.
 * ref_attention_forward: out (B, T, C); att (B, NH, T, T) the probabilities before dropout,
 * may be NULL. ref_attention_backward: dinp (B, T, 3C) from dout (B, T, C). */
void ref_attention_forward(double *out, double *att, const float *inp, const int *key_mask,
                           int B, int T, int C, int NH, cf_attn_dropout drop);
void ref_attention_backward(double *dinp, const float *dout, const float *inp, const int *key_mask,
                            int B, int T, int C, int NH, cf_attn_dropout drop);

/* Small random forward and backward cases (with key mask and dropout), one row each. */
cf_status cf_selftest_attention(cf_context *ctx, cf_selftest *t);

#endif
