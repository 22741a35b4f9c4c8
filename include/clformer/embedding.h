/* Token and position embeddings: out[b,t,:] = token_scale * wte[tokens[b,t]] + pos[t], with
 * learned positions (a wpe table) or the fixed sinusoids of Vaswani et al. computed on the fly.
 * Not here: dropout on the sum (elementwise), the output projection tied to wte (gemm). */
#ifndef CLFORMER_EMBEDDING_H
#define CLFORMER_EMBEDDING_H

#include "clformer/program.h"
#include "clformer/selftest.h"

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

/* Double references (same float inputs, double arithmetic and outputs). wpe NULL: sinusoidal. */
void ref_embedding_forward(double *out, const int *tokens, const float *wte, const float *wpe, int B, int T, int C,
                           int V, float token_scale);
/* Adds into dwte (V, C) and dwpe (T, C) (dwpe may be NULL). */
void ref_embedding_backward(double *dwte, double *dwpe, const float *dout, const int *tokens, int B, int T, int C,
                            int V, float token_scale);
/* The sinusoidal position value at (t, c) for C channels, in double. */
double ref_sinusoid(int t, int c, int C);

cf_status cf_selftest_embedding(cf_context *ctx, cf_selftest *t);

#endif
