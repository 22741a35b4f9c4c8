/* Row-major SGEMM through CLBlast, plain and strided-batched, on the context's queue. */
#include <clblast_c.h>
#include "internal.h"

static CLBlastTranspose tr(int t) { return t ? CLBlastTransposeYes : CLBlastTransposeNo; }

cf_status cf_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                  float beta, cf_mem C, size_t ldc) {
  if (M == 0 || N == 0) return CF_OK;
  CF_CHECK(CLBlastSgemm(CLBlastLayoutRowMajor, tr(trans_a), tr(trans_b), M, N, K, alpha, A.buf, A.off, lda,
                        B.buf, B.off, ldb, beta, C.buf, C.off, ldc, &ctx->queue, NULL));
  return CF_OK;
}

cf_status cf_gemm_batched(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                          float alpha, cf_mem A, size_t lda, size_t stride_a,
                          cf_mem B, size_t ldb, size_t stride_b,
                          float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch) {
  if (M == 0 || N == 0 || batch == 0) return CF_OK;
  CF_CHECK(CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, tr(trans_a), tr(trans_b), M, N, K, alpha,
                                      A.buf, A.off, lda, stride_a, B.buf, B.off, ldb, stride_b, beta,
                                      C.buf, C.off, ldc, stride_c, batch, &ctx->queue, NULL));
  return CF_OK;
}
