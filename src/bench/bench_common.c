/* What the benchmarks share: see bench_internal.h. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <time.h>
#include "bench/bench_internal.h"
#include "runtime/runtime.h"

cf_status cf_bench_time_calls(cf_context *ctx, cf_bench_fn fn, void *arg, int calls, double *sec) {
  double t0 = cf_now();
  for (int i = 0; i < calls; i++) CF_TRY(fn(arg));
  CF_TRY(cf_context_finish(ctx));
  *sec = (cf_now() - t0) / calls;
  return CF_OK;
}

int cf_bench_calls_per_sample(double call_s, double floor_s, int cap) {
  if (call_s >= CF_BENCH_SAMPLE_S) return 1;
  int calls = (int)ceil(CF_BENCH_SAMPLE_S / (call_s > floor_s ? call_s : floor_s));
  return calls > cap ? cap : calls;
}

cf_bench_stats cf_bench_stats_of(double *v, int n) {
  cf_bench_stats s = {NAN, NAN, NAN};
  if (n <= 0) return s;
  s.median = cf_median(v, n);  /* sorts v */
  s.min = v[0];
  s.max = v[n - 1];
  return s;
}

json_t *cf_bench_stats_json(cf_bench_stats s, double scale, const char *fmt) {
  return json_pack("{s:o, s:o, s:o}", "median", cf_json_num(s.median * scale, fmt), "min",
                   cf_json_num(s.min * scale, fmt), "max", cf_json_num(s.max * scale, fmt));
}

cf_status cf_bench_json_append(json_t *array, json_t *row) {
  if (json_array_append_new(array, row)) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the JSON report");
  return CF_OK;
}

const char *cf_bench_speed_words(double ratio, char *buf, size_t n) {
  if (ratio >= 1.0) snprintf(buf, n, "%.2fx faster", ratio);
  else snprintf(buf, n, "%.2fx slower", 1.0 / ratio);
  return buf;
}

void cf_bench_pause(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}
