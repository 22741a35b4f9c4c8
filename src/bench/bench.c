/* `bench kernels`: the device's copy bandwidth, then every row of the op table (src/check/op_table.c)
 * that states the bytes it must move or the FLOPs it does, at Transformer shapes (N = B*T = 4096
 * rows, T = 128, NH = 8, C = 256, 512, 1024, V = C), through its launcher; reported in GB/s and as a
 * percentage of the copy bandwidth, or in GFLOP/s (attention). Then the attention's softmax kernels
 * on their own, which are not ops of the library's API.
 *
 * Timing: the launchers enqueue without events, so each sample is wall-clock time around a batch
 * of launches bracketed by clFinish (batch sized so a sample lasts >= ~2 ms, which amortises the
 * finish), divided by the batch; the result is the median of `repeat` samples after warm-up.
 * The copy is timed the same way (and also by its profiling event, printed beside it; gbs_event is
 * 0 without profiling, null where its events read under 100 ns, as on Mesa's rusticl 22.3).
 *
 * Bytes: each row's bytes function, what the op must read and write at least, 4 bytes a float (an
 * implementation that reads something twice gets no credit for it). The softmax kernels here:
 *   softmax fwd           per (b, h): read the causal half T(T+1)/2, write T*T (and T*T more with dropout)
 *   softmax bwd           per (b, h): read datt and att's causal halves T(T+1), write T*T
 *
 * JSON (--json): the report's "kernels" member (schema at the top of app/cmd_bench.c):
 *   {"copy": {"bytes", "gbs", "gbs_event", "method"}, "method",
 *    "results": [{"kernel", "N", "C", "T", "NH", "bytes", "flops", "us", "gbs", "pct_copy", "gflops"}...]} */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/bench.h"
#include "clformer/check.h"
#include "clformer/ops.h"
#include "bench/bench_internal.h"
#include "ops/ops_internal.h"  /* the softmax launches, timed on their own */
#include "runtime/runtime.h"

enum { BENCH_N = 4096, BENCH_T = 128, BENCH_NH = 8, BENCH_COPY_FLOATS = 16 << 20 };
static const int bench_cs[] = {256, 512, 1024};

typedef struct bench {
  cf_context *ctx;
  int repeat;
  const char *only;         /* substring filter on kernel names, or NULL */
  json_t *report;           /* the JSON report (NULL: none), and its kernels' results */
  json_t *rows;
  FILE *tables;             /* stdout, or stderr when the JSON goes to stdout */
  double copy_gbs;
  cf_op_dims d;
  cl_mem att, att2, saved;  /* the softmax kernels' (B, NH, T, T) */
} bench;

/* ---------- timing ---------- */

/* Median seconds per call of fn(arg), after warm-up. */
static cf_status time_calls(bench *s, cf_bench_fn fn, void *arg, double *sec) {
  double one;
  CF_TRY(cf_bench_time_calls(s->ctx, fn, arg, 1, &one));  /* builds the program */
  CF_TRY(cf_bench_time_calls(s->ctx, fn, arg, 2, &one));
  int batch = cf_bench_calls_per_sample(one, 1e-6, 100);
  double *v = malloc(sizeof(double) * (size_t)s->repeat);
  if (!v) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  for (int r = 0; r < s->repeat; r++) {
    cf_status st = cf_bench_time_calls(s->ctx, fn, arg, batch, &v[r]);
    if (st != CF_OK) { free(v); return st; }
  }
  *sec = cf_median(v, s->repeat);
  free(v);
  return CF_OK;
}

/* One result: a table line and a JSON row. bytes 0: compute-bound (GFLOP/s, no % of copy). */
static cf_status report(bench *s, const char *name, const char *shape, double sec, double bytes, double flops) {
  double gbs = bytes / sec * 1e-9, pct = 100.0 * gbs / s->copy_gbs, gfl = flops / sec * 1e-9;
  int compute = bytes == 0;
  if (compute) fprintf(s->tables, "%-34s %-18s %10.1f %8s %7s %9.1f\n", name, shape, sec * 1e6, "", "", gfl);
  else fprintf(s->tables, "%-34s %-18s %10.1f %8.2f %6.0f%%\n", name, shape, sec * 1e6, gbs, pct);
  fflush(s->tables);
  if (!s->rows) return CF_OK;
  json_t *row = json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:o, s:o, s:o, s:o}", "kernel", name, "N", s->d.N, "C",
                          s->d.C, "T", s->d.T, "NH", s->d.NH, "bytes", (json_int_t)llround(bytes), "flops",
                          (json_int_t)llround(flops), "us", cf_json_num(sec * 1e6, "%.3f"), "gbs",
                          cf_json_num(compute ? NAN : gbs, "%.3f"), "pct_copy", cf_json_num(compute ? NAN : pct, "%.1f"),
                          "gflops", cf_json_num(compute ? gfl : NAN, "%.3f"));
  return cf_bench_json_append(s->rows, row);
}

/* ---------- the op table's rows ---------- */

static cf_status run_case(void *arg) {
  const cf_op_case *c = arg;
  return c->op->run(c);
}

static int benched(const cf_op *op) { return op->bytes || op->flops; }

/* One row at one C: a case of its own (inputs random as in the self-test), timed. */
static cf_status time_row(bench *s, const cf_op *op) {
  cf_op_case *c;
  CF_TRY(cf_op_case_create(s->ctx, op, &s->d, 0, 0xbe4c, &c));
  double sec;
  cf_status st = time_calls(s, run_case, c, &sec);
  char shape[64];
  snprintf(shape, sizeof shape, "N=%d C=%d", s->d.N, s->d.C);
  if (st == CF_OK) st = report(s, op->name, shape, sec, op->bytes ? op->bytes(&c->d) : 0, op->flops ? op->flops(&c->d) : 0);
  cf_op_case_free(c);
  return st;
}

/* ---------- the softmax kernels ---------- */

typedef struct softmax_case {
  bench *s;
  int backward;
  float p;
} softmax_case;

static size_t att_floats(const cf_op_dims *d) { return (size_t)d->B * d->NH * d->T * d->T; }

static cf_status run_softmax(void *arg) {
  softmax_case *k = arg;
  bench *s = k->s;
  cf_dropout drop = {k->p, 1234u, 7u, 3u, 0};
  if (!k->backward)
    return cf_attention_softmax_forward_launch(s->ctx, cf_at(s->att, 0), cf_at(s->att2, 0), cf_at(NULL, 0), s->d.B,
                                               s->d.NH, s->d.T, 0.125f, drop);
  /* the backward rewrites its input in place (shrinking it towards denormals), so every call first
   * restores it by a copy; the copy alone is timed too and subtracted */
  CF_TRY(cf_copy(s->ctx, cf_at(s->att, 0), cf_at(s->saved, 0), att_floats(&s->d)));
  return cf_attention_softmax_backward_launch(s->ctx, cf_at(s->att, 0), cf_at(s->att2, 0), s->d.B, s->d.NH, s->d.T,
                                              0.125f, drop);
}

static cf_status run_restore(void *arg) {
  bench *s = ((softmax_case *)arg)->s;
  return cf_copy(s->ctx, cf_at(s->att, 0), cf_at(s->saved, 0), att_floats(&s->d));
}

static const struct softmax_kernel { const char *name; int backward; float p; } softmax_kernels[] = {
    {"softmax_forward", 0, 0.0f}, {"softmax_forward_dropout", 0, 0.1f}, {"softmax_backward", 1, 0.0f}};

static double softmax_bytes(const cf_op_dims *d, const struct softmax_kernel *k) {
  double BNH = (double)d->B * d->NH, T = d->T;
  if (k->backward) return 4.0 * BNH * (T * (T + 1) + T * T);
  return 4.0 * BNH * (T * (T + 1) / 2 + (k->p > 0 ? 2 : 1) * T * T);
}

/* Uniform values in [lo, hi) into m. */
static cf_status fill_random(cf_context *ctx, cl_mem m, size_t n, float lo, float hi, unsigned long long seed) {
  float *h = malloc(n * sizeof(float));
  if (!h) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * 0.5f * (cf_selftest_random(&seed) + 1.0f);
  cf_status st = cf_write(ctx, cf_at(m, 0), h, n);
  free(h);
  return st;
}

static cf_status time_softmax(bench *s, const struct softmax_kernel *k) {
  size_t tt = att_floats(&s->d);
  if (!s->att) {
    CF_TRY(cf_buffer_create(s->ctx, tt * 4, &s->att));
    CF_TRY(cf_buffer_create(s->ctx, tt * 4, &s->att2));
    CF_TRY(cf_buffer_create(s->ctx, tt * 4, &s->saved));
    CF_TRY(fill_random(s->ctx, s->saved, tt, -4.0f, 4.0f, 7));
    CF_TRY(fill_random(s->ctx, s->att2, tt, 0.0f, 0.02f, 8));
  }
  CF_TRY(cf_copy(s->ctx, cf_at(s->att, 0), cf_at(s->saved, 0), tt));
  softmax_case c = {s, k->backward, k->p};
  double sec, base = 0;
  CF_TRY(time_calls(s, run_softmax, &c, &sec));
  if (k->backward) CF_TRY(time_calls(s, run_restore, &c, &base));
  char shape[64];
  snprintf(shape, sizeof shape, "B=%d NH=%d T=%d", s->d.B, s->d.NH, s->d.T);
  return report(s, k->name, shape, sec - base, softmax_bytes(&s->d, k), 0);
}

/* ---------- the copy ---------- */

typedef struct copy_case {
  cf_context *ctx;
  cl_mem src, dst;
} copy_case;

static cf_status run_copy(void *arg) {
  copy_case *c = arg;
  return cf_copy(c->ctx, cf_at(c->dst, 0), cf_at(c->src, 0), BENCH_COPY_FLOATS);
}

/* The same copy by its profiling event (median), when the queue profiles; 0 when it does not, -1
 * when its events read under 100 ns (Mesa's rusticl 22.3). */
static cf_status copy_by_event(bench *s, cl_mem src, cl_mem dst, double *gbs) {
  size_t bytes = (size_t)BENCH_COPY_FLOATS * 4;
  *gbs = 0;
  if (!s->ctx->profiling) return CF_OK;
  double *v = malloc(sizeof(double) * (size_t)s->repeat);
  if (!v) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  for (int r = 0; r < s->repeat; r++) {
    cl_event ev;
    cl_ulong t0 = 0, t1 = 0;
    cl_int err = clEnqueueCopyBuffer(s->ctx->queue, src, dst, 0, 0, bytes, 0, NULL, &ev);
    if (err == CL_SUCCESS) {
      err = clWaitForEvents(1, &ev);
      if (err == CL_SUCCESS) err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
      if (err == CL_SUCCESS) err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
      clReleaseEvent(ev);
    }
    if (err != CL_SUCCESS) { free(v); return cf_report(err, "timing a copy by its event", __FILE__, __LINE__, NULL); }
    v[r] = (double)(t1 - t0) * 1e-9;
  }
  double med = cf_median(v, s->repeat);
  /* -1: the events read under 100 ns (they measure nothing; no 64 MiB copy is that fast) */
  *gbs = med >= 1e-7 ? 2.0 * (double)bytes / med * 1e-9 : -1;
  free(v);
  return CF_OK;
}

static cf_status measure_copy(bench *s, double *event_gbs) {
  copy_case c = {s->ctx, NULL, NULL};
  double sec = 0;
  cf_status st = cf_buffer_create(s->ctx, (size_t)BENCH_COPY_FLOATS * 4, &c.src);
  if (st == CF_OK) st = cf_buffer_create(s->ctx, (size_t)BENCH_COPY_FLOATS * 4, &c.dst);
  if (st == CF_OK) st = cf_fill(s->ctx, cf_at(c.src, 0), 1.0f, BENCH_COPY_FLOATS);
  if (st == CF_OK) st = time_calls(s, run_copy, &c, &sec);
  if (st == CF_OK) s->copy_gbs = 2.0 * BENCH_COPY_FLOATS * 4 / sec * 1e-9;
  if (st == CF_OK) st = copy_by_event(s, c.src, c.dst, event_gbs);
  cf_buffer_free(c.src);
  cf_buffer_free(c.dst);
  return st;
}

/* ---------- the run ---------- */

/* `only` is a comma-separated list of substrings ("crossentropy_forward,embedding"): a kernel runs
 * when its name contains any of them, so kernels can be compared within one run (one copy figure). */
static int name_selected(const char *name, const char *only) {
  if (!only) return 1;
  for (const char *p = only; *p;) {
    size_t n = strcspn(p, ",");
    char item[64];
    if (n > 0 && n < sizeof item) {
      memcpy(item, p, n);
      item[n] = '\0';
      if (strstr(name, item)) return 1;
    }
    p += n + (p[n] == ',');
  }
  return 0;
}

/* Every kernel's name into names; whether --only selects any. */
static int any_selected(const char *only, char *names, size_t n) {
  int any = 0;
  names[0] = 0;
  for (int i = 0; i < cf_op_count(); i++) {
    const cf_op *op = cf_op_get(i);
    if (!benched(op)) continue;
    any |= name_selected(op->name, only);
    snprintf(names + strlen(names), n - strlen(names), "%s%s", names[0] ? ", " : "", op->name);
  }
  for (size_t k = 0; k < sizeof softmax_kernels / sizeof *softmax_kernels; k++) {
    any |= name_selected(softmax_kernels[k].name, only);
    snprintf(names + strlen(names), n - strlen(names), ", %s", softmax_kernels[k].name);
  }
  return any;
}

static cf_status print_header(bench *s, double ev_gbs) {
  const cf_device_info *d = cf_context_device(s->ctx);
  fprintf(s->tables, "device: %s (%s)\n", d->name, d->platform_name);
  fprintf(s->tables, "copy bandwidth (clEnqueueCopyBuffer of 64 MiB, read + write): %.2f GB/s wall-clock", s->copy_gbs);
  if (ev_gbs > 0) fprintf(s->tables, ", %.2f GB/s by its profiling event", ev_gbs);
  if (ev_gbs < 0) fprintf(s->tables, " (its profiling event read under 100 ns: this device's events do not measure)");
  fprintf(s->tables, "\ntiming: wall-clock around batches of launches between clFinish, median of %d samples\n\n", s->repeat);
  fprintf(s->tables, "%-34s %-18s %10s %8s %7s %9s\n", "kernel", "shape", "us", "GB/s", "%copy", "GFLOP/s");
  if (!s->rows) return CF_OK;  /* the results fill s->rows as they come, so a failed run still reports the ones it has */
  char method[80];
  snprintf(method, sizeof method, "wall-clock batches between clFinish, median of %d", s->repeat);
  return cf_json_set(s->report, "kernels",
                     json_pack("{s:{s:I, s:o, s:o, s:s}, s:s, s:O}", "copy", "bytes",
                               (json_int_t)BENCH_COPY_FLOATS * 2 * 4, "gbs", cf_json_num(s->copy_gbs, "%.3f"),
                               "gbs_event", ev_gbs < 0 ? json_null() : cf_json_num(ev_gbs, "%.3f"), "method",
                               "clEnqueueCopyBuffer, bytes read + written", "method", method, "results", s->rows));
}

static cf_status bench_all(bench *s) {
  double ev_gbs;
  CF_TRY(measure_copy(s, &ev_gbs));
  CF_TRY(print_header(s, ev_gbs));
  s->d = (cf_op_dims){.N = BENCH_N, .T = BENCH_T, .NH = BENCH_NH, .B = BENCH_N / BENCH_T};
  for (int i = 0; i < cf_op_count(); i++) {
    const cf_op *op = cf_op_get(i);
    if (!benched(op) || !name_selected(op->name, s->only)) continue;
    for (size_t ci = 0; ci < sizeof bench_cs / sizeof *bench_cs; ci++) {
      s->d.C = s->d.V = bench_cs[ci];
      CF_TRY(time_row(s, op));
    }
  }
  for (size_t k = 0; k < sizeof softmax_kernels / sizeof *softmax_kernels; k++)
    if (name_selected(softmax_kernels[k].name, s->only)) CF_TRY(time_softmax(s, &softmax_kernels[k]));
  return CF_OK;
}

cf_status cf_bench_kernels(cf_context *ctx, int repeat, const char *only, FILE *tables, json_t *report) {
  bench s = {.ctx = ctx, .repeat = repeat > 0 ? repeat : 20, .only = only, .tables = tables, .report = report};
  char names[4096];
  if (!any_selected(only, names, sizeof names))
    return CF_FAIL(CF_ERR_INVALID_ARG, "--only '%s' matches no kernel; the kernels are: %s", only, names);
  if (report && !(s.rows = json_array())) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = bench_all(&s);
  cf_buffer_free(s.att);
  cf_buffer_free(s.att2);
  cf_buffer_free(s.saved);
  json_decref(s.rows);
  return st;
}
