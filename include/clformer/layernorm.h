/* LayerNorm over the last dimension: device ops, their double-precision references and the
 * family's self-test. A row per work-item on CPUs, a work-group per row elsewhere; statistics by
 * two passes (never E[x^2]-E[x]^2).
 * Not here: where LayerNorm sits in a block (Pre-LN or Post-LN), which is the model's business. */
#ifndef CLFORMER_LAYERNORM_H
#define CLFORMER_LAYERNORM_H

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

/* Small random cases of layernorm_forward and layernorm_backward, one row each. Returns non-CF_OK
 * only for an OpenCL failure; a numerical mismatch is a failing row. */
cf_status cf_selftest_layernorm(cf_context *ctx, cf_selftest *t);

#endif
