/* clformer/gemm.h: matrix products, dispatched between CLBlast and our own kernels, and their tuning. */
#ifndef CLFORMER_GEMM_H
#define CLFORMER_GEMM_H

#include "clformer/runtime.h"

/* Row-major single-precision matrix products on the device: C[M,N] = alpha * op(A)[M,K] *
 * op(B)[K,N] + beta * C, op = transpose when trans_* is set. lda/ldb/ldc are row strides in
 * elements of the matrices as stored. beta == 0 never reads C (it may hold NaN).
 *
 * Two implementations: CLBlast, and our own kernels (cl/gemm.cl) written for CPU devices
 * (register tiles of float16 vectors, op(B) packed into 64-column panels). cf_gemm picks one
 * per $CLFORMER_GEMM = clblast | own | auto (default auto: the tuning file's choice for the
 * shape, else what was measured on this device for the product's class, see
 * cf_gemm_calib_path). */
cf_status cf_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                  float alpha, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                  float beta, cf_mem C, size_t ldc);

/* `batch` independent products; matrix i starts stride_* elements after matrix i-1. */
cf_status cf_gemm_batched(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                          float alpha, cf_mem A, size_t lda, size_t stride_a,
                          cf_mem B, size_t ldb, size_t stride_b,
                          float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch);

typedef enum cf_gemm_impl {
  CF_GEMM_AUTO = 0,   /* $CLFORMER_GEMM, else measured (tuning file, calibration) */
  CF_GEMM_CLBLAST,
  CF_GEMM_OWN,
} cf_gemm_impl;

/* What `impl` means on this context: AUTO resolved through $CLFORMER_GEMM; AUTO when that does
 * not name one (each product then takes what was measured for it: cf_gemm_calib_path).
 * CF_ERR_CONFIG when $CLFORMER_GEMM holds anything but clblast, own or auto. (AUTO may still
 * fall back to CLBlast for a product whose sizes exceed 32-bit indexing.) */
cf_status cf_gemm_resolve(const cf_context *ctx, cf_gemm_impl impl, cf_gemm_impl *out);
const char *cf_gemm_impl_name(cf_gemm_impl impl);  /* "auto", "clblast", "own" */

/* cf_gemm / cf_gemm_batched with a chosen implementation (tests and benchmarks force one). */
cf_status cf_gemm_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                       float beta, cf_mem C, size_t ldc);
cf_status cf_gemm_batched_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N,
                               size_t K, float alpha, cf_mem A, size_t lda, size_t stride_a,
                               cf_mem B, size_t ldb, size_t stride_b,
                               float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch);

/* A weight gradient with its bias's in one pass where it can be: C (M, N) = A (K, M)^T B (K, N) +
 * beta C, and dbias (M) += the sums of A's columns (the bias gradient: dY's column sums, dY being
 * A). On our gemm_at_strips (A's rows not a multiple of 4 KiB apart, M >= 6, N a multiple of 64)
 * the items of C's first column panel add the sums, and *fused is 1; elsewhere only the product
 * runs, *fused is 0, and the caller runs cf_bias_backward (the same bits on a CPU device). */
cf_status cf_gemm_tn_dbias(cf_context *ctx, size_t M, size_t N, size_t K, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                           float beta, cf_mem C, size_t ldc, cf_mem dbias, int *fused);
cf_status cf_gemm_tn_dbias_with(cf_context *ctx, cf_gemm_impl impl, size_t M, size_t N, size_t K, cf_mem A, size_t lda,
                                cf_mem B, size_t ldb, float beta, cf_mem C, size_t ldc, cf_mem dbias, int *fused);

/* The triangles of a causal attention's products, which our strip kernels skip a tile of rows at a
 * time: zeros op(A) is known to hold (the probabilities and their gradients: lower; their
 * transposes: upper; exact zeros change no sum, but the kernels still read the few next to the
 * diagonal, and CLBlast and our other kernels compute them all, so they must be zeros), or the part
 * of C no one reads (the scores and their gradients: only j <= i is wanted; above it C gets the
 * product or, in skipped tiles, beta C). */
typedef enum cf_gemm_tri {
  CF_GEMM_FULL = 0,
  CF_GEMM_A_LOWER,  /* op(A)[i][k] = 0 for k > i */
  CF_GEMM_A_UPPER,  /* op(A)[i][k] = 0 for k < i */
  CF_GEMM_C_LOWER,  /* C[i][j] wanted for j <= i only */
} cf_gemm_tri;
const char *cf_gemm_tri_name(cf_gemm_tri tri);  /* "full", "a_lower", "a_upper", "c_lower" */

/* A product's signature, "NT 1024x768x256 x1" (op(A) op(B), M x N x K, batch): the tag its launches
 * carry while profiling (cf_profile_collect_tags), by which `bench step` times each model product. */
int cf_gemm_signature(char *buf, size_t n, int trans_a, int trans_b, size_t M, size_t N, size_t K, size_t batch);

/* A nested batch of outer x inner products: matrix (o, i) starts o * outer_* + i * stride_* elements
 * in, so the heads of (B, T, NH * HS) tensors are read and written in place (outer B sequences, a
 * row stride of the tensor's width, inner NH heads HS apart), with the triangle tri skipped.
 * One launch on our kernels where they read op(A) and op(B) as they lie (else a group of `inner` at
 * a time), one call of CLBlast's batched GEMM with the offsets listed on CLBlast. */
cf_status cf_gemm_batched_nested(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                                 cf_mem A, size_t lda, size_t stride_a, size_t outer_a, cf_mem B, size_t ldb,
                                 size_t stride_b, size_t outer_b, float beta, cf_mem C, size_t ldc, size_t stride_c,
                                 size_t outer_c, size_t inner, size_t outer, cf_gemm_tri tri);
cf_status cf_gemm_batched_nested_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N,
                                      size_t K, float alpha, cf_mem A, size_t lda, size_t stride_a, size_t outer_a,
                                      cf_mem B, size_t ldb, size_t stride_b, size_t outer_b, float beta, cf_mem C,
                                      size_t ldc, size_t stride_c, size_t outer_c, size_t inner, size_t outer,
                                      cf_gemm_tri tri);

/* The activations (cl/activation.clh's order): the ops apply them, and so does this layer's fused
 * epilogue below. */
typedef enum { CF_ACT_RELU, CF_ACT_GELU_TANH, CF_ACT_GELU_ERF } cf_activation;

/* A forward linear layer in one pass where it can be: C (M, N) = A (M, K) B^T + bias (N, added to
 * every row; not when bias.buf is NULL), then act_out (M, N, row stride ldc) = dropout(act(C)) when
 * act_out.buf is set, the mask drop over the (M, ldc) output (element (r, c) flat element
 * r * ldc + c; p 0: none); act_out may be C itself. The product runs on the implementation cf_gemm would pick for it; on ours
 * the bias, activation and dropout are applied in its own stores and *fused is 1; on CLBlast only
 * C = A B^T is computed, *fused is 0, and the caller adds the rest (cf_bias_forward,
 * cf_bias_act_forward, cf_dropout_forward: the same values). */
cf_status cf_gemm_nt_bias_act(cf_context *ctx, size_t M, size_t N, size_t K, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                              cf_mem C, size_t ldc, cf_mem bias, cf_mem act_out, cf_activation act, cf_dropout drop,
                              int *fused);
cf_status cf_gemm_nt_bias_act_with(cf_context *ctx, cf_gemm_impl impl, size_t M, size_t N, size_t K, cf_mem A,
                                   size_t lda, cf_mem B, size_t ldb, cf_mem C, size_t ldc, cf_mem bias, cf_mem act_out,
                                   cf_activation act, cf_dropout drop, int *fused);

/* Our kernels pack op(B) (and a transposed A) into a scratch buffer kept per context (grown on
 * demand, reused by later products on its in-order queue). This releases it now; otherwise it lives
 * until cf_context_free. Safe to call when there is none. */
void cf_gemm_scratch_free(cf_context *ctx);

/* Tuning (`clformer tune`, src/gemm/tune.c): results live in one file per device and driver in the
 * cache directory (see src/gemm/tuning_file.c for its format); a context's first GEMM reads it,
 * applies the tuned CLBlast parameters, and cf_gemm/cf_gemm_batched then take the measured faster
 * implementation for each shape listed there (unless $CLFORMER_GEMM names one; CLFORMER_TUNE=off
 * ignores the file). The path of this context's file into buf; 0 when caching is off. */
int cf_gemm_tune_path(const cf_context *ctx, char *buf, size_t n);
/* Read the file again (after tuning wrote it, or after cf_gemm_tune_hold), applying its CLBlast
 * parameters from the next call on. */
void cf_gemm_tune_reload(cf_context *ctx);
/* Before this context's first GEMM: leave its tuning file unread, so CLBlast runs with its own
 * defaults (and no per-shape choice applies), until cf_gemm_tune_reload (`bench gemm` times both).
 * 1 when held; 0 when there is nothing to hold back (no file, none with `clblast` lines,
 * CLFORMER_TUNE=off, caching off), when this context read its file already, or when CLBlast took
 * tuned parameters for the device before in this process (CLBlast keeps them per device for the
 * whole process and cannot be put back to its defaults). */
int cf_gemm_tune_hold(cf_context *ctx);
/* Whether tuned CLBlast parameters are in force on this context (reading the file if not done
 * yet); buf gets what CLBlast accepted, e.g. "Xgemm, Padtranspose, XGEMM_MIN_INDIRECT_SIZE=1". */
int cf_gemm_tune_summary(cf_context *ctx, char *buf, size_t n);

/* The automatic choice (src/gemm/calibrate.c). Products fall in 18 classes: form NN, NT or TN (TT
 * counted as TN), single or batched, small (M*N*K*batch < 2^18), medium (< 2^24) or large. The
 * first automatic product of a class on a context with no verdict for it times our kernels and
 * CLBlast on a fixed representative product of the class (a progress note says so, once) and takes
 * ours unless it is over 10% slower. Verdicts are kept in the context and in a file per device,
 * driver, kernel source and tuning file in the cache directory (this path; 0 when caching is off:
 * every context then measures again); a file that does not parse is measured anew and replaced.
 * $CLFORMER_GEMM=own|clblast, a forced implementation, or a tuning file's choice for the exact
 * shape skip it. */
int cf_gemm_calib_path(cf_context *ctx, char *buf, size_t n);
typedef struct cf_gemm_calib_stats {
  int measured;    /* classes this context measured */
  int loaded;      /* classes it took from the verdict file */
  int rebuilt;     /* of those measured, ones measured because the file did not parse */
  double seconds;  /* spent measuring */
} cf_gemm_calib_stats;
cf_gemm_calib_stats cf_gemm_calib_stats_of(const cf_context *ctx);
/* The verdicts this context knows, "NT single small own (0.01 vs 0.03 ms), ..." into buf; 0: none. */
int cf_gemm_calib_summary(const cf_context *ctx, char *buf, size_t n);

/* One GEMM shape: C (M, N) = op(A) op(B) (+ C when beta is 1), `batch` times, the triangle tri
 * skipped; per_step calls of it in one training step. */
typedef struct cf_gemm_shape {
  char name[24];
  int ta, tb;
  size_t M, N, K, batch;
  float beta;
  int per_step;
  cf_gemm_tri tri;
} cf_gemm_shape;
#define CF_GEMM_MAX_SHAPES 32
/* Its floating-point operations, one call: 2 per multiply-add that tri leaves (the work left
 * whatever skips the rest; CLBlast does more where tri is set). */
double cf_gemm_shape_flops(const cf_gemm_shape *s);

/* `clformer tune` (src/gemm/tune.c): CLBlast's tuners (its GEMM kernels and the helper kernels
 * around them), then per GEMM shape ours vs CLBlast's direct and indirect kernels, which also set
 * CLBlast's direct/indirect switch; the results go to cf_gemm_tune_path's file, which every later
 * run's GEMM layer applies. It prints only to the two streams given here (and notes through
 * cf_log, as the whole library does). */
typedef struct cf_tune_options {
  double budget_s;           /* wall-clock budget of the whole run (default 840 s) */
  double fraction;           /* share of the CLBlast GEMM tuners' search space tried (default 0.005) */
  int skip_clblast_tuners;   /* only the per-shape comparison */
  size_t rows, width;        /* the CLBlast tuners' problem: `rows` tokens (capped at 1024) by `width` */
  FILE *report;              /* what was found: the file's path, each tuner's best parameters, the
                                per-shape table, the chosen direct/indirect switch, "done"; NULL: none */
  FILE *progress;            /* progress while tuners and measurements run, with an ETA; on a
                                terminal a tuner's line rewrites itself ('\r'); NULL: none */
} cf_tune_options;
/* shapes: the products to choose for (each counted per_step times), duplicates allowed. */
cf_status cf_gemm_tune(cf_context *ctx, const cf_gemm_shape *shapes, int nshapes, const cf_tune_options *opts);

#endif
