/* Benchmarks behind `clformer bench`: timings after warm-up, medians of repeated runs, results
 * also as JSON so devices can be compared side by side. */
#ifndef CLFORMER_BENCH_H
#define CLFORMER_BENCH_H

#include <stdio.h>
#include "clformer/config.h"
#include "clformer/program.h"

/* `bench gemm`: every GEMM shape the config's model issues (forward, both backward products, the
 * batched attention products) with each available implementation, plus the device's measured FMA
 * peak. Prints a table; appends a JSON object to json when not NULL. vs_blas: also OpenBLAS. */
cf_status cf_bench_gemm(cf_context *ctx, const cf_config *cfg, int vs_blas, FILE *json);

#endif
