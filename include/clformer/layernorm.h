/* LayerNorm over the last dimension, plain and fused with the residual add (and dropout) in front
 * of it: device ops, their double-precision references and the family's self-test. A row per
 * work-item on CPUs, a work-group per row elsewhere; statistics by two passes (never
 * E[x^2]-E[x]^2).
 * Not here: where LayerNorm sits in a block (Pre-LN or Post-LN), which is the model's business. */
#ifndef CLFORMER_LAYERNORM_H
#define CLFORMER_LAYERNORM_H

#include "clformer/elementwise.h"
#include "clformer/program.h"
#include "clformer/selftest.h"

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

/* Small random cases of layernorm_forward and layernorm_backward and of the fused pair, one row
 * each. Returns non-CF_OK only for an OpenCL failure; a numerical mismatch is a failing row. */
cf_status cf_selftest_layernorm(cf_context *ctx, cf_selftest *t);

#endif
