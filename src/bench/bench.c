/* `bench kernels`: the device's copy bandwidth, then every memory-bound kernel at Transformer
 * shapes (N = B*T = 4096 rows, T = 128, NH = 8, C = 256, 512, 1024) through its public launcher,
 * reported in GB/s and as a percentage of the copy bandwidth; attention also in GFLOP/s.
 *
 * Timing: the launchers enqueue without events, so each sample is wall-clock time around a batch
 * of launches bracketed by clFinish (batch sized so a sample lasts >= ~2 ms, which amortises the
 * finish), divided by the batch; the result is the median of `repeat` samples after warm-up.
 * The copy is timed the same way (and also by its profiling event, printed beside it).
 *
 * Bytes are counted by hand per kernel: what the op must read and write at least, 4 bytes a float
 * (an implementation that reads something twice gets no credit for it):
 *   layernorm_forward     read x, write y (2NC) + weight, bias (2C) + mean, rstd (2N)
 *   layernorm_backward    read dout, x; write dx (3NC) + weight (C) + mean, rstd (2N) + dweight, dbias r/w (4C)
 *   activation fwd / bwd  2n / 3n        bias fwd / bwd       2n + C / n + 2C
 *   bias_act fwd / bwd    3n + C / 3n + 2C (pre is read and rewritten in the forward)
 *   dropout               2n             residual(+dropout)   3n        scale 2n, fill n
 *   residual(_dropout)_layernorm  read x, branch; write res, y (4NC) + weight, bias (2C) + mean, rstd (2N)
 *   adam                  7n (read p, g, m, v; write p, m, v)        global_norm n
 *   embedding_backward    V = 256, learned positions off: read dout (NC) + tokens (N), dwte r/w (2VC)
 *   embedding_backward_wpe  the same with learned positions: + dwpe r/w (2TC)
 *   crossentropy fwd/bwd  V = C: read logits (NV) + targets, write losses (N) / read logits, write dlogits (2NV)
 *                         + targets (N)
 *   crossentropy_fwd_bwd  both in one launch: read logits (NV) + targets, write dlogits (NV) + losses (N)
 *   softmax fwd           per (b, h): read the causal half T(T+1)/2, write T*T (and T*T more with dropout)
 *   softmax bwd           per (b, h): read datt and att's causal halves T(T+1), write T*T
 *   attention fwd / bwd   GFLOP/s counting the batched GEMMs in full: 4*B*T*T*C / 8*B*T*T*C (+ GB/s of
 *                         nothing: it is compute-bound, so no % of copy is given)
 *
 * JSON (--json): the report's "kernels" member (schema at the top of app/cmd_bench.c):
 *   {"copy": {"bytes", "gbs", "gbs_event", "method"}, "method",
 *    "results": [{"kernel", "N", "C", "T", "NH", "bytes", "flops", "us", "gbs", "pct_copy", "gflops"}...]} */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "clformer/bench.h"
#include "runtime/runtime.h"
#include "bench/bench_internal.h"

#include "ops/ops_internal.h"  /* the dropout and softmax launches, timed on their own */

enum { BENCH_N = 4096, BENCH_T = 128, BENCH_NH = 8, BENCH_MAXC = 1024, BENCH_COPY_FLOATS = 16 << 20 };

typedef struct bench {
  cf_context *ctx;
  int repeat;
  const char *only;         /* substring filter on kernel names, or NULL */
  json_t *report;           /* the JSON report (NULL: none), and its kernels' results */
  json_t *rows;
  FILE *tables;             /* stdout, or stderr when the JSON goes to stdout */
  double copy_gbs;
  int N, C, T, NH, B;
  size_t n;                 /* N*C */
  cl_mem a, b, c, d;        /* (N, MAXC) each */
  cl_mem w, bias, dw, db;   /* (MAXC) */
  cl_mem zbias;             /* (MAXC) zeros: see op_bias_fwd */
  cl_mem mean, rstd;        /* (N) */
  cl_mem targets;           /* int (N), cross-entropy targets in [0, 256) */
  cl_mem att, att2;         /* (B, NH, T, T) */
  cl_mem qkv, qkvp, out, scratch;  /* attention, at the largest C */
  cl_mem copy_src, copy_dst;       /* 64 MiB each, while the copy is timed */
} bench;

/* One timed op: runs the op once (it may enqueue several kernels). */
typedef cf_status (*bench_fn)(bench *s);

typedef struct timed_op {
  bench *s;
  bench_fn fn;
} timed_op;

static cf_status call_op(void *arg) {
  timed_op *op = arg;
  return op->fn(op->s);
}

/* Median seconds per call of fn, after warm-up. */
static cf_status time_op(bench *s, bench_fn fn, double *sec) {
  timed_op op = {s, fn};
  double one;
  CF_TRY(cf_bench_time_calls(s->ctx, call_op, &op, 1, &one));  /* builds the program */
  CF_TRY(cf_bench_time_calls(s->ctx, call_op, &op, 2, &one));
  int batch = cf_bench_calls_per_sample(one, 1e-6, 100);
  double *v = malloc(sizeof(double) * (size_t)s->repeat);
  if (!v) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  for (int r = 0; r < s->repeat; r++) {
    cf_status st = cf_bench_time_calls(s->ctx, call_op, &op, batch, &v[r]);
    if (st != CF_OK) { free(v); return st; }
  }
  *sec = cf_median(v, s->repeat);
  free(v);
  return CF_OK;
}

/* ---------- the ops ---------- */

static cf_dropout bench_drop = {0.1f, 1234u, 7u, 3u};

static cf_status op_copy(bench *s) {
  return cf_copy(s->ctx, cf_at(s->copy_dst, 0), cf_at(s->copy_src, 0), BENCH_COPY_FLOATS);
}
static cf_status op_ln_fwd(bench *s) {
  return cf_layernorm_forward(s->ctx, cf_at(s->b, 0), cf_at(s->mean, 0), cf_at(s->rstd, 0), cf_at(s->a, 0),
                              cf_at(s->w, 0), cf_at(s->bias, 0), s->N, s->C, 1e-5f);
}
static cf_status op_ln_bwd(bench *s) {
  return cf_layernorm_backward(s->ctx, cf_at(s->c, 0), cf_at(s->dw, 0), cf_at(s->db, 0), cf_at(s->b, 0),
                               cf_at(s->a, 0), cf_at(s->w, 0), cf_at(s->mean, 0), cf_at(s->rstd, 0), s->N, s->C, 0);
}
#define ACT_OPS(tag, act)                                                                           \
  static cf_status op_##tag##_fwd(bench *s) {                                                       \
    return cf_activation_forward(s->ctx, cf_at(s->b, 0), cf_at(s->a, 0), s->n, act);                \
  }                                                                                                 \
  static cf_status op_##tag##_bwd(bench *s) {                                                       \
    return cf_activation_backward(s->ctx, cf_at(s->c, 0), cf_at(s->b, 0), cf_at(s->a, 0), s->n, act); \
  }
ACT_OPS(relu, CF_ACT_RELU)
ACT_OPS(gelu, CF_ACT_GELU_TANH)
ACT_OPS(gelu_erf, CF_ACT_GELU_ERF)

static cf_status op_bias_bwd(bench *s) { return cf_bias_backward(s->ctx, cf_at(s->db, 0), cf_at(s->b, 0), s->N, s->C); }
/* bias_forward and bias_gelu_forward add in place: with a nonzero bias, hundreds of timed calls walk
 * the buffer far out (and later GELUs into denormal exponentials, 10x slower on x86); adding zeros
 * keeps every call alike and moves the same bytes. */
static cf_status op_bias_fwd(bench *s) {
  return cf_bias_forward(s->ctx, cf_at(s->b, 0), cf_at(s->zbias, 0), s->N, s->C);
}
static cf_status op_bias_gelu_fwd(bench *s) {
  return cf_bias_act_forward(s->ctx, cf_at(s->c, 0), cf_at(s->b, 0), cf_at(s->zbias, 0), s->N, s->C,
                             CF_ACT_GELU_TANH);
}
static cf_status op_bias_gelu_bwd(bench *s) {
  return cf_bias_act_backward(s->ctx, cf_at(s->c, 0), cf_at(s->db, 0), cf_at(s->b, 0), cf_at(s->a, 0), s->N, s->C,
                              CF_ACT_GELU_TANH);
}
static cf_status op_dropout(bench *s) {
  return cf_dropout_apply(s->ctx, cf_at(s->b, 0), cf_at(s->a, 0), s->n, bench_drop);
}
static cf_status op_residual(bench *s) {
  return cf_residual_forward(s->ctx, cf_at(s->c, 0), cf_at(s->a, 0), cf_at(s->b, 0), s->n);
}
static cf_status op_residual_layernorm(bench *s) {
  cf_dropout none = {0};
  return cf_residual_dropout_layernorm_forward(s->ctx, cf_at(s->b, 0), cf_at(s->mean, 0), cf_at(s->rstd, 0),
                                               cf_at(s->c, 0), cf_at(s->a, 0), cf_at(s->d, 0), cf_at(s->w, 0),
                                               cf_at(s->bias, 0), s->N, s->C, 1e-5f, none);
}
static cf_status op_residual_dropout_layernorm(bench *s) {
  return cf_residual_dropout_layernorm_forward(s->ctx, cf_at(s->b, 0), cf_at(s->mean, 0), cf_at(s->rstd, 0),
                                               cf_at(s->c, 0), cf_at(s->a, 0), cf_at(s->d, 0), cf_at(s->w, 0),
                                               cf_at(s->bias, 0), s->N, s->C, 1e-5f, bench_drop);
}
static cf_status op_residual_dropout(bench *s) {
  return cf_residual_dropout_forward(s->ctx, cf_at(s->c, 0), cf_at(s->a, 0), cf_at(s->b, 0), s->n, bench_drop);
}
static cf_status op_scale(bench *s) { return cf_scale(s->ctx, cf_at(s->b, 0), s->n, 1.0f); }
static cf_status op_fill(bench *s) { return cf_fill(s->ctx, cf_at(s->b, 0), 0.5f, s->n); }
static cf_status op_adam(bench *s) {
  cf_adam h = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 10};
  return cf_adam_update(s->ctx, cf_at(s->a, 0), cf_at(s->b, 0), cf_at(s->c, 0), cf_at(s->d, 0), s->n, &h,
                        cf_at(NULL, 0), 0.0f);
}
static cf_status op_ce_fwd(bench *s) {
  return cf_crossentropy_forward(s->ctx, cf_at(s->dw, 0), cf_at(s->mean, 0), cf_at(s->a, 0), cf_at(s->targets, 0),
                                 s->N, s->C, 0.1f, -1);
}
static cf_status op_ce_bwd(bench *s) {
  return cf_crossentropy_backward(s->ctx, cf_at(s->b, 0), cf_at(s->a, 0), cf_at(s->targets, 0), s->N, s->C, 0.1f, -1,
                                  1.0f / s->N);
}
static cf_status op_ce_fused(bench *s) {
  return cf_crossentropy_forward_backward(s->ctx, cf_at(s->dw, 0), cf_at(s->mean, 0), cf_at(s->b, 0), cf_at(s->a, 0),
                                          cf_at(s->targets, 0), s->N, s->C, 0.1f, -1, 1.0f / s->N);
}
static cf_status op_emb_bwd(bench *s) {  /* V = 256 tokens (the targets), dwte in c, sinusoidal positions */
  return cf_embedding_backward(s->ctx, cf_at(s->c, 0), cf_at(NULL, 0), cf_at(s->a, 0), cf_at(s->targets, 0), s->B,
                               s->T, s->C, 256, 1.0f);
}
static cf_status op_emb_bwd_learned(bench *s) {  /* as op_emb_bwd, plus dwpe (T, C) in d */
  return cf_embedding_backward(s->ctx, cf_at(s->c, 0), cf_at(s->d, 0), cf_at(s->a, 0), cf_at(s->targets, 0), s->B,
                               s->T, s->C, 256, 1.0f);
}
static cf_status op_global_norm(bench *s) {
  return cf_global_norm(s->ctx, cf_at(s->dw, 0), cf_at(s->a, 0), s->n, cf_at(s->c, 0));
}

/* The softmax kernels of cl/attention.cl, through ops/attention.c's launchers. */
static cf_status softmax_launch(bench *s, int backward, float p) {
  cf_dropout d = {p, 1234u, 7u, 3u};
  if (backward)
    return cf_attention_softmax_backward_launch(s->ctx, cf_at(s->att, 0), cf_at(s->att2, 0), s->B, s->NH, s->T,
                                                0.125f, d);
  return cf_attention_softmax_forward_launch(s->ctx, cf_at(s->att, 0), cf_at(s->att2, 0), cf_at(NULL, 0), s->B,
                                             s->NH, s->T, 0.125f, d);
}
static cf_status op_softmax_fwd(bench *s) { return softmax_launch(s, 0, 0.0f); }
static cf_status op_softmax_fwd_drop(bench *s) { return softmax_launch(s, 0, 0.1f); }
/* The backward rewrites its input in place (shrinking it towards denormals), so every call first
 * restores it by a copy; the copy alone is timed too and subtracted (see run_kernel). */
static size_t att_floats(const bench *s) { return (size_t)s->B * s->NH * s->T * s->T; }
static cf_status op_att_restore(bench *s) {
  return cf_copy(s->ctx, cf_at(s->att, 0), cf_at(s->a, 0), att_floats(s));
}
static cf_status op_softmax_bwd(bench *s) {
  CF_TRY(op_att_restore(s));
  return softmax_launch(s, 1, 0.0f);
}
static cf_dropout no_drop = {0.0f, 0, 0, 0};
static cf_status op_attn_fwd(bench *s) {
  return cf_attention_forward(s->ctx, cf_at(s->out, 0), cf_at(s->qkvp, 0), cf_at(s->att, 0), cf_at(s->scratch, 0),
                              cf_at(s->qkv, 0), cf_at(NULL, 0), s->B, s->T, s->C, s->NH, no_drop);
}
static cf_status op_attn_bwd(bench *s) {
  return cf_attention_backward(s->ctx, cf_at(s->qkv, 0), cf_at(s->scratch, 0), cf_at(s->out, 0), cf_at(s->qkvp, 0),
                               cf_at(s->att, 0), cf_at(NULL, 0), s->B, s->T, s->C, s->NH, no_drop);
}

/* ---------- the table ---------- */

typedef struct kernel_case {
  const char *name;
  bench_fn fn;
  bench_fn baseline;   /* timed alone and subtracted, or NULL */
  int per_c;           /* run at every C (else once, at the first) */
  /* floats moved: a*NC + b*C + c*N + d*(causal half + T*T per (b, h) ...) see bytes_of */
  double k_nc, k_c, k_n;
  int softmax;         /* 1 forward, 2 forward with dropout, 3 backward */
  int attention;       /* 1 forward, 2 backward: GFLOP/s */
} kernel_case;

static const kernel_case cases[] = {
    {"layernorm_forward", op_ln_fwd, NULL, 1, 2, 2, 2, 0, 0},
    {"layernorm_backward", op_ln_bwd, NULL, 1, 3, 5, 2, 0, 0},
    {"relu_forward", op_relu_fwd, NULL, 1, 2, 0, 0, 0, 0},
    {"relu_backward", op_relu_bwd, NULL, 1, 3, 0, 0, 0, 0},
    {"gelu_tanh_forward", op_gelu_fwd, NULL, 1, 2, 0, 0, 0, 0},
    {"gelu_tanh_backward", op_gelu_bwd, NULL, 1, 3, 0, 0, 0, 0},
    {"gelu_erf_forward", op_gelu_erf_fwd, NULL, 1, 2, 0, 0, 0, 0},
    {"gelu_erf_backward", op_gelu_erf_bwd, NULL, 1, 3, 0, 0, 0, 0},
    {"bias_forward", op_bias_fwd, NULL, 1, 2, 1, 0, 0, 0},
    {"bias_backward", op_bias_bwd, NULL, 1, 1, 2, 0, 0, 0},
    {"bias_gelu_forward", op_bias_gelu_fwd, NULL, 1, 3, 1, 0, 0, 0},
    {"bias_gelu_backward", op_bias_gelu_bwd, NULL, 1, 3, 2, 0, 0, 0},
    {"dropout", op_dropout, NULL, 1, 2, 0, 0, 0, 0},
    {"residual", op_residual, NULL, 1, 3, 0, 0, 0, 0},
    {"residual_dropout", op_residual_dropout, NULL, 1, 3, 0, 0, 0, 0},
    {"residual_layernorm", op_residual_layernorm, NULL, 1, 4, 2, 2, 0, 0},
    {"residual_dropout_layernorm", op_residual_dropout_layernorm, NULL, 1, 4, 2, 2, 0, 0},
    {"scale", op_scale, NULL, 1, 2, 0, 0, 0, 0},
    {"fill", op_fill, NULL, 1, 1, 0, 0, 0, 0},
    {"adam", op_adam, NULL, 1, 7, 0, 0, 0, 0},
    {"global_norm", op_global_norm, NULL, 1, 1, 0, 0, 0, 0},
    {"crossentropy_forward", op_ce_fwd, NULL, 1, 1, 0, 2, 0, 0},
    {"crossentropy_backward", op_ce_bwd, NULL, 1, 2, 0, 1, 0, 0},
    {"crossentropy_fwd_bwd", op_ce_fused, NULL, 1, 2, 0, 2, 0, 0},
    {"embedding_backward", op_emb_bwd, NULL, 1, 1, 512, 1, 0, 0},
    {"embedding_backward_wpe", op_emb_bwd_learned, NULL, 1, 1, 512 + 2 * BENCH_T, 1, 0, 0},
    {"softmax_forward", op_softmax_fwd, NULL, 0, 0, 0, 0, 1, 0},
    {"softmax_forward_dropout", op_softmax_fwd_drop, NULL, 0, 0, 0, 0, 2, 0},
    {"softmax_backward", op_softmax_bwd, op_att_restore, 0, 0, 0, 0, 3, 0},
    {"attention_forward", op_attn_fwd, NULL, 1, 0, 0, 0, 0, 1},
    {"attention_backward", op_attn_bwd, NULL, 1, 0, 0, 0, 0, 2},
};

static void case_work(const bench *s, const kernel_case *k, double *bytes, double *flops) {
  double N = s->N, C = s->C, T = s->T, BNH = (double)s->B * s->NH;
  *bytes = 4.0 * (k->k_nc * N * C + k->k_c * C + k->k_n * N);
  if (k->softmax == 1) *bytes = 4.0 * BNH * (T * (T + 1) / 2 + T * T);
  if (k->softmax == 2) *bytes = 4.0 * BNH * (T * (T + 1) / 2 + 2 * T * T);
  if (k->softmax == 3) *bytes = 4.0 * BNH * (T * (T + 1) + T * T);
  *flops = 0;
  if (k->attention) {
    *bytes = 0;
    *flops = 4.0 * k->attention * s->B * T * T * C;
  }
}

static cf_status run_case(bench *s, const kernel_case *k) {
  double sec, base = 0, bytes, flops;
  CF_TRY(time_op(s, k->fn, &sec));
  if (k->baseline) {
    CF_TRY(time_op(s, k->baseline, &base));
    sec -= base;
  }
  case_work(s, k, &bytes, &flops);
  double gbs = bytes / sec * 1e-9, pct = 100.0 * gbs / s->copy_gbs, gfl = flops / sec * 1e-9;
  char shape[64];
  if (k->softmax) snprintf(shape, sizeof shape, "B=%d NH=%d T=%d", s->B, s->NH, s->T);
  else snprintf(shape, sizeof shape, "N=%d C=%d", s->N, s->C);
  if (k->attention)
    fprintf(s->tables, "%-28s %-18s %10.1f %8s %7s %9.1f\n", k->name, shape, sec * 1e6, "", "", gfl);
  else
    fprintf(s->tables, "%-28s %-18s %10.1f %8.2f %6.0f%%\n", k->name, shape, sec * 1e6, gbs, pct);
  fflush(stdout);
  if (s->rows) {  /* attention has no GB/s, the others no GFLOP/s: NaN, so null */
    json_t *row = json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:o, s:o, s:o, s:o}", "kernel", k->name, "N", s->N,
                            "C", s->C, "T", s->T, "NH", s->NH, "bytes", (json_int_t)llround(bytes), "flops",
                            (json_int_t)llround(flops), "us", cf_json_num(sec * 1e6, "%.3f"), "gbs",
                            cf_json_num(k->attention ? NAN : gbs, "%.3f"), "pct_copy",
                            cf_json_num(k->attention ? NAN : pct, "%.1f"), "gflops",
                            cf_json_num(k->attention ? gfl : NAN, "%.3f"));
    return cf_bench_json_append(s->rows, row);
  }
  return CF_OK;
}

/* Fill a buffer with uniform values in [lo, hi). */
static cf_status fill_random(cf_context *ctx, cl_mem m, size_t n, float lo, float hi, unsigned seed) {
  float *h = malloc(n * sizeof(float));
  if (!h) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
  unsigned long long x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h[i] = lo + (hi - lo) * (float)((x >> 40) * (1.0 / 16777216.0));
  }
  cf_status st = cf_write(ctx, cf_at(m, 0), h, n);
  free(h);
  return st;
}

static cf_status measure_copy(bench *s, double *event_gbs) {
  size_t n = BENCH_COPY_FLOATS;
  double sec = 0;
  CF_TRY(cf_buffer_create(s->ctx, n * 4, &s->copy_src));
  CF_TRY(cf_buffer_create(s->ctx, n * 4, &s->copy_dst));
  CF_TRY(cf_fill(s->ctx, cf_at(s->copy_src, 0), 1.0f, n));
  CF_TRY(time_op(s, op_copy, &sec));
  s->copy_gbs = 2.0 * n * 4 / sec * 1e-9;
  /* the same copy by its profiling event (median), when the queue profiles */
  *event_gbs = 0;
  if (s->ctx->profiling) {
    double *v = malloc(sizeof(double) * (size_t)s->repeat);
    if (!v) return CF_FAIL(CF_ERR_NO_MEMORY, "out of host memory");
    for (int r = 0; r < s->repeat; r++) {
      cl_event ev;
      cl_ulong t0 = 0, t1 = 0;
      cl_int err = clEnqueueCopyBuffer(s->ctx->queue, s->copy_src, s->copy_dst, 0, 0, n * 4, 0, NULL, &ev);
      if (err == CL_SUCCESS) {
        err = clWaitForEvents(1, &ev);
        if (err == CL_SUCCESS) err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (err == CL_SUCCESS) err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
      }
      if (err != CL_SUCCESS) { free(v); return cf_report(err, "timing a copy by its event", __FILE__, __LINE__, NULL); }
      v[r] = (double)(t1 - t0) * 1e-9;
    }
    *event_gbs = 2.0 * n * 4 / cf_median(v, s->repeat) * 1e-9;
    free(v);
  }
  cf_buffer_free(s->copy_src);
  cf_buffer_free(s->copy_dst);
  s->copy_src = s->copy_dst = NULL;
  return CF_OK;
}

static void free_bench(bench *s) {
  cl_mem *all[] = {&s->a, &s->b, &s->c, &s->d, &s->w, &s->bias, &s->dw, &s->db, &s->zbias, &s->mean, &s->rstd,
                   &s->targets,
                   &s->att, &s->att2, &s->qkv, &s->qkvp, &s->out, &s->scratch,
                   &s->copy_src, &s->copy_dst};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    cf_buffer_free(*all[i]);
    *all[i] = NULL;
  }
}

static cf_status alloc_bench(bench *s) {
  size_t big = (size_t)BENCH_N * BENCH_MAXC, B = BENCH_N / BENCH_T;
  size_t tt = B * BENCH_NH * BENCH_T * BENCH_T;
  CF_TRY(cf_buffer_create(s->ctx, big * 4, &s->a));
  CF_TRY(cf_buffer_create(s->ctx, big * 4, &s->b));
  CF_TRY(cf_buffer_create(s->ctx, big * 4, &s->c));
  CF_TRY(cf_buffer_create(s->ctx, big * 4, &s->d));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_MAXC * 4, &s->w));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_MAXC * 4, &s->bias));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_MAXC * 4, &s->dw));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_MAXC * 4, &s->db));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_MAXC * 4, &s->zbias));
  CF_TRY(cf_fill(s->ctx, cf_at(s->zbias, 0), 0.0f, BENCH_MAXC));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_N * 4, &s->mean));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_N * 4, &s->rstd));
  CF_TRY(cf_buffer_create(s->ctx, BENCH_N * 4, &s->targets));
  {
    int tg[BENCH_N];
    for (int i = 0; i < BENCH_N; i++) tg[i] = (i * 37 + 11) % 256;
    CF_CHECK(clEnqueueWriteBuffer(s->ctx->queue, s->targets, CL_TRUE, 0, sizeof tg, tg, 0, NULL, NULL));
  }
  CF_TRY(cf_buffer_create(s->ctx, tt * 4, &s->att));
  CF_TRY(cf_buffer_create(s->ctx, tt * 4, &s->att2));
  CF_TRY(fill_random(s->ctx, s->a, big, -2.0f, 2.0f, 1));
  CF_TRY(fill_random(s->ctx, s->b, big, -1.0f, 1.0f, 2));
  CF_TRY(fill_random(s->ctx, s->c, big, 0.0f, 1.0f, 3));
  CF_TRY(fill_random(s->ctx, s->d, big, 0.0f, 1.0f, 4));
  CF_TRY(fill_random(s->ctx, s->w, BENCH_MAXC, 0.5f, 1.5f, 5));
  CF_TRY(fill_random(s->ctx, s->bias, BENCH_MAXC, -0.5f, 0.5f, 6));
  CF_TRY(fill_random(s->ctx, s->att, tt, -4.0f, 4.0f, 7));
  CF_TRY(fill_random(s->ctx, s->att2, tt, 0.0f, 0.02f, 8));
  CF_TRY(cf_fill(s->ctx, cf_at(s->dw, 0), 0.0f, BENCH_MAXC));
  CF_TRY(cf_fill(s->ctx, cf_at(s->db, 0), 0.0f, BENCH_MAXC));
  size_t btc = (size_t)BENCH_N * BENCH_MAXC;
  CF_TRY(cf_buffer_create(s->ctx, 3 * btc * 4, &s->qkv));
  CF_TRY(cf_buffer_create(s->ctx, 3 * btc * 4, &s->qkvp));
  CF_TRY(cf_buffer_create(s->ctx, btc * 4, &s->out));
  CF_TRY(cf_buffer_create(s->ctx, cf_attention_scratch_floats((int)B, BENCH_T, BENCH_MAXC, BENCH_NH, 0) * 4,
                          &s->scratch));
  CF_TRY(fill_random(s->ctx, s->qkv, 3 * btc, -1.0f, 1.0f, 9));
  return fill_random(s->ctx, s->out, btc, -1.0f, 1.0f, 10);
}

/* `only` is a comma-separated list of substrings ("crossentropy_forward,embedding"): a kernel runs
 * when its name contains any of them, so kernels can be compared within one run (one copy figure). */
static int name_selected(const char *name, const char *only) {
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

static const int bench_cs[] = {256, 512, 1024};

static cf_status bench_all(bench *s) {
  double ev_gbs;
  CF_TRY(measure_copy(s, &ev_gbs));
  CF_TRY(alloc_bench(s));
  const cf_device_info *d = cf_context_device(s->ctx);
  fprintf(s->tables, "device: %s (%s)\n", d->name, d->platform_name);
  fprintf(s->tables, "copy bandwidth (clEnqueueCopyBuffer of 64 MiB, read + write): %.2f GB/s wall-clock", s->copy_gbs);
  if (ev_gbs > 0) fprintf(s->tables, ", %.2f GB/s by its profiling event", ev_gbs);
  fprintf(s->tables, "\ntiming: wall-clock around batches of launches between clFinish, median of %d samples\n\n", s->repeat);
  fprintf(s->tables, "%-28s %-18s %10s %8s %7s %9s\n", "kernel", "shape", "us", "GB/s", "%copy", "GFLOP/s");
  if (s->rows) {  /* the results fill s->rows as they come, so a failed run still reports the ones it has */
    char method[80];
    snprintf(method, sizeof method, "wall-clock batches between clFinish, median of %d", s->repeat);
    CF_TRY(cf_json_set(s->report, "kernels",
                       json_pack("{s:{s:I, s:o, s:o, s:s}, s:s, s:O}", "copy", "bytes",
                                 (json_int_t)BENCH_COPY_FLOATS * 2 * 4, "gbs", cf_json_num(s->copy_gbs, "%.3f"),
                                 "gbs_event", cf_json_num(ev_gbs, "%.3f"), "method",
                                 "clEnqueueCopyBuffer, bytes read + written", "method", method, "results", s->rows)));
  }
  s->N = BENCH_N;
  s->T = BENCH_T;
  s->NH = BENCH_NH;
  s->B = BENCH_N / BENCH_T;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    if (s->only && !name_selected(cases[k].name, s->only)) continue;
    for (size_t ci = 0; ci < sizeof bench_cs / sizeof *bench_cs; ci++) {
      if (!cases[k].per_c && ci > 0) break;
      s->C = bench_cs[ci];
      s->n = (size_t)s->N * s->C;
      CF_TRY(run_case(s, &cases[k]));
    }
  }
  return CF_OK;
}

cf_status cf_bench_kernels(cf_context *ctx, int repeat, const char *only, FILE *tables, json_t *report) {
  bench s;
  memset(&s, 0, sizeof s);
  s.ctx = ctx;
  s.repeat = repeat > 0 ? repeat : 20;
  s.only = only;
  s.tables = tables;
  s.report = report;
  if (only) {
    int any = 0;
    char names[2048] = "";
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
      any |= name_selected(cases[k].name, only);
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "", cases[k].name);
    }
    if (!any) return CF_FAIL(CF_ERR_INVALID_ARG, "--only '%s' matches no kernel; the kernels are: %s", only, names);
  }
  if (report && !(s.rows = json_array())) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = bench_all(&s);
  free_bench(&s);
  json_decref(s.rows);
  return st;
}
