/* What the benchmarks share (bench.c, bench_gemm.c, bench_step.c; bench_common.c): the timed run
 * of calls between clFinish, how many calls make a sample, the median and extremes of the samples
 * and their JSON, a JSON row appended, a ratio of times in words; and the parts of `bench step` in
 * files of their own. */
#ifndef CLFORMER_BENCH_INTERNAL_H
#define CLFORMER_BENCH_INTERNAL_H

#include <stddef.h>
#include <stdio.h>
#include "clformer/runtime.h"

struct json_t;

#define CF_BENCH_SAMPLE_S 2e-3  /* a sample lasts at least this long, so clFinish's cost is amortised */

/* One call of what a benchmark times (it may enqueue several kernels); arg is the benchmark's. */
typedef cf_status (*cf_bench_fn)(void *arg);

/* *sec = seconds per call of `calls` calls of fn(arg) enqueued back to back: wall-clock time from
 * before the first call to the end of clFinish after the last, divided by calls. */
cf_status cf_bench_time_calls(cf_context *ctx, cf_bench_fn fn, void *arg, int calls, double *sec);

/* How many calls of call_s seconds each make a sample of CF_BENCH_SAMPLE_S: 1 for a call at least
 * that long; else taking call_s as at least floor_s, and at most cap. */
int cf_bench_calls_per_sample(double call_s, double floor_s, int cap);

/* The median and extremes of a set of samples. */
typedef struct cf_bench_stats {
  double median, min, max;
} cf_bench_stats;

/* The statistics of v[0..n) (sorting v in place); all NaN when n is 0. */
cf_bench_stats cf_bench_stats_of(double *v, int n);

/* {"median", "min", "max"}, each multiplied by scale and rounded as fmt prints it (cf_json_num);
 * NULL when out of memory. */
struct json_t *cf_bench_stats_json(cf_bench_stats s, double scale, const char *fmt);

/* Appends row (taking the reference) to array; a NULL row or a failed append is CF_ERR_NO_MEMORY,
 * reported as running out of memory while building the JSON report. */
cf_status cf_bench_json_append(struct json_t *array, struct json_t *row);

/* `bench step`'s host-transfer figures (bench_transfer.c): the step's uploads (`what` names them
 * in the text, upload_kib their size for the JSON) by copies and by maps, `steps` profiled steps
 * each, and a checkpoint's read-out both ways; printed to out and set as the report's "transfers"
 * (report may be NULL). The context's choice is restored after. */
struct cf_model;
cf_status cf_bench_transfers(cf_context *ctx, struct cf_model *m, cf_bench_fn step, void *arg, int steps,
                             const char *what, double upload_kib, FILE *out, struct json_t *report);

/* The device's fp32 FMA peak in GFLOP/s (bench_gemm.c): the median of 7 runs of a kernel of
 * register-only FMAs on float16 vectors, each about 50 ms. */
cf_status cf_bench_fma_peak(cf_context *ctx, double *gflops);

/* `bench step`'s matrix products by shape (bench_products.c): the model's shapes
 * (cf_model_gemm_shapes) grouped by signature (cf_gemm_signature; proj fwd and logits fwd may
 * share one), each with its calls and FLOPs per step and the device ms per step of the profiled
 * launches tagged with it (by_tag over `steps` steps). Largest first, then a row "other" for tagged
 * launches of no model shape (calls: launches), if any; returns the row count. */
#define CF_BENCH_MAX_PRODUCTS 32
typedef struct cf_bench_product {
  char names[96], sig[CF_PROFILE_TAG];
  int calls;
  double flops, ms;
} cf_bench_product;
struct cf_config;
int cf_bench_products(const struct cf_config *cfg, const cf_profile_entry *by_tag, int ntags, int steps,
                      cf_bench_product *rows);
/* The table (peak: the FMA peak in GFLOP/s, 0: unknown), and its JSON rows (NULL: out of memory). */
void cf_bench_products_print(FILE *out, const cf_bench_product *rows, int n, double peak);
struct json_t *cf_bench_products_json(const cf_bench_product *rows, int n, double peak);

/* Sleeps s seconds (resumed after signals). */
void cf_bench_pause(double s);

/* A ratio of times (theirs / ours) in words into buf: "2.10x faster" for 2.1, "4.50x slower" for
 * 0.222. Returns buf. */
const char *cf_bench_speed_words(double ratio, char *buf, size_t n);

#endif
