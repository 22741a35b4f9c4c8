/* Row-major single-precision matrix products on the device, through CLBlast.
 * C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, op = transpose when trans_* is set.
 * lda/ldb/ldc are row strides in elements of the matrices as stored. */
#ifndef CLFORMER_GEMM_H
#define CLFORMER_GEMM_H

#include "clformer/program.h"

cf_status cf_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                  float beta, cf_mem C, size_t ldc);

/* `batch` independent products; matrix i starts stride_* elements after matrix i-1. */
cf_status cf_gemm_batched(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                          float alpha, cf_mem A, size_t lda, size_t stride_a,
                          cf_mem B, size_t ldb, size_t stride_b,
                          float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch);

/* Double-precision reference on the host, same conventions (C in double, updated in place). */
void ref_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, double alpha, const float *A, size_t lda,
              const float *B, size_t ldb, double beta, double *C, size_t ldc);

#endif
