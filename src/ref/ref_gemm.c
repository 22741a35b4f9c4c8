/* Double-precision reference GEMM (row-major), for tests and the device self-test. */
#include "clformer/gemm.h"
#include "clformer/ref.h"

void ref_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, double alpha, const float *A, size_t lda,
              const float *B, size_t ldb, double beta, double *C, size_t ldc) {
  for (size_t i = 0; i < M; i++)
    for (size_t j = 0; j < N; j++) {
      double acc = 0;
      for (size_t k = 0; k < K; k++) {
        double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      C[i * ldc + j] = alpha * acc + (beta == 0 ? 0 : beta * C[i * ldc + j]);
    }
}
