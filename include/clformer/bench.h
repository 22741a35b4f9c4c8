/* Benchmarks behind `clformer bench`: timings after warm-up, medians of repeated runs, results
 * also as JSON so devices can be compared side by side. */
#ifndef CLFORMER_BENCH_H
#define CLFORMER_BENCH_H

#include <stdio.h>
#include "clformer/config.h"
#include "clformer/runtime.h"

/* The JSON report the benchmarks add their results to: a Jansson object (jansson.h), or NULL for
 * none. Each benchmark sets its own key ("gemm", "kernels", "step"); the tables go to `tables`. */
struct json_t;

/* `bench gemm`: every GEMM shape the config's model issues (forward, both backward products, the
 * batched attention products) with each available implementation, plus the device's measured FMA
 * peak. Prints a table; adds "gemm" to report. vs_blas: also OpenBLAS. */
cf_status cf_bench_gemm(cf_context *ctx, const cf_config *cfg, int vs_blas, int repeat, FILE *tables,
                        struct json_t *report);

/* `bench step`: a full training step of the config's model; see src/bench/bench_step.c for the method. */
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
/* Prints the results; adds "step" to report. */
cf_status cf_bench_step(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *opts, FILE *tables,
                        struct json_t *report);
/* `bench step` under mpirun (bench/bench_world.c): rank 0 alone, then every rank data-parallel, the
 * same model and per-rank batch; per rank step times, tokens/s and time in the gradient exchange, the
 * world's tokens/s and scaling efficiency. Collective; rank 0 prints to tables and adds "world". */
cf_status cf_bench_step_world(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *opts, FILE *tables,
                              struct json_t *report);
#endif
