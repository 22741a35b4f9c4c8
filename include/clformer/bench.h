/* Benchmarks behind `clformer bench`: timings after warm-up, medians of repeated runs, results
 * also as JSON so devices can be compared side by side. */
#ifndef CLFORMER_BENCH_H
#define CLFORMER_BENCH_H

#include <stdio.h>
#include "clformer/config.h"
#include "clformer/program.h"

/* One GEMM of the model: C (M, N) = op(A) op(B) (+ C when beta is 1), `batch` times; per_step calls
 * of it in one training step. */
typedef struct cf_gemm_shape {
  char name[24];
  int ta, tb;
  size_t M, N, K, batch;
  float beta;
  int per_step;
} cf_gemm_shape;
#define CF_GEMM_MAX_SHAPES 32
/* Every GEMM shape the config's model issues (the list in src/bench_gemm.c); returns the count. */
int cf_gemm_model_shapes(const cf_config *cfg, cf_gemm_shape *out);

/* `bench gemm`: every GEMM shape the config's model issues (forward, both backward products, the
 * batched attention products) with each available implementation, plus the device's measured FMA
 * peak. Prints a table; appends a JSON object to json when not NULL. vs_blas: also OpenBLAS. */
cf_status cf_bench_gemm(cf_context *ctx, const cf_config *cfg, int vs_blas, int repeat, FILE *json);

/* `bench step`: a full training step of the config's model; see src/bench_step.c for the method. */
typedef struct cf_bench_step_options {
  int steps;              /* timed steps (default 20) */
  int warmup;             /* untimed steps before them, the first included (default 3) */
  int profile_steps;      /* further steps recorded for the per-operation breakdown (default 3) */
  int vs_torch;           /* also time tools/torch_step.py, interleaved, and print the ratio */
  int torch_threads;      /* torch's thread count; 0: torch's own default */
  const char *torch_script;  /* NULL: found beside the executable (../tools) or in ./tools */
  double t_start;         /* cf_now() at the command's start, for the start-up time; 0: not reported */
  double t_context;       /* cf_now() once the context was created */
} cf_bench_step_options;
/* Prints the results; appends a JSON object to json when not NULL. */
cf_status cf_bench_step(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *opts, FILE *json);
/* Floating-point operations of one training step's matrix products (the formula in bench_step.c). */
double cf_bench_step_flops(const cf_config *cfg);

/* `clformer tune` (src/tune.c): CLBlast's tuners (its GEMM kernels and the helper kernels around
 * them), then per model GEMM shape ours vs CLBlast's direct and indirect kernels, which also set
 * CLBlast's direct/indirect switch; the results go to cf_gemm_tune_path's file, which every later
 * run's GEMM layer applies. */
typedef struct cf_tune_options {
  double budget_s;           /* wall-clock budget of the whole run (default 840 s) */
  double fraction;           /* share of the CLBlast GEMM tuners' search space tried (default 0.005) */
  int skip_clblast_tuners;   /* only the per-shape comparison */
} cf_tune_options;
cf_status cf_gemm_tune(cf_context *ctx, const cf_config *cfg, const cf_tune_options *opts);

#endif
