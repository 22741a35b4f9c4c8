/* `bench step`: a full training step of the config's model (forward with loss, backward, gradient
 * norm, optimizer update, exactly the calls of the trainer's loop) on random tokens.
 *
 * Timing: `warmup` untimed steps, then `steps` steps, each timed by the wall clock from the first
 * enqueue to clFinish; median, min and max reported. Then `profile_steps` more steps with every
 * kernel recording an OpenCL profiling event (our launches, and the GEMM layer's CLBlast calls,
 * whose event covers the last kernel of the routine), summed per kernel name and divided by the
 * step count: the per-operation breakdown. Device time summed over the kernels is shown beside the
 * wall-clock step; the difference is host work and launch gaps. Events that measure nothing (every
 * one 0 ms or a few ns, as on Mesa's rusticl 22.3; runtime/profile.h) give no breakdown but the
 * reason, in the text and as the JSON's breakdown.unavailable (device_ms and gemm_ms null, no ops).
 *
 * Throughput: tokens/s = B * T / median step time. GFLOP/s = counted FLOPs / median step time,
 * where the count covers the matrix products only (elementwise work, softmax, LayerNorm and the
 * optimizer are left out), the attention's six over their causal triangles (cf_gemm_tri):
 *   linear weights P = L * (4 C^2 + 2 C F) + V C   (qkv 3C^2, proj C^2, fc1 and fc2 C F, logits V C)
 *   FLOPs/step     = 6 N P + 6 L B T (T + 1) C     (N = B T; forward 2 N P and 2 B T (T + 1) C per
 *                                                    layer, backward twice the forward)
 * (with model.attention: fused the attention runs no matrix product and its 6 L B T (T + 1) C are left
 * out). The breakdown ends with the model's products by shape (bench_products.c).
 * Device memory: the most cf_buffer_live_bytes said after the model's start and the timed steps.
 *
 * An encoder-decoder (model.arch encoder_decoder) steps on its largest batch, the one the model is
 * laid out for: data.max_tokens a side in sentences of data.max_len, every source and target full
 * (tokens/s counts one side's tokens); its FLOPs are cf_model_gemm_shapes' (both stacks, the
 * cross-attention's projections, the logits once). --vs-torch measures the language model only.
 *
 * Start-up (when the step is the first thing the command runs): seconds from the command's start
 * to the context being ready, the model allocated and initialised, and the first step finished;
 * the kernel-cache hits and misses tell a warm run (all hits) from a cold one.
 *
 * --vs-torch: tools/torch_step.py is started as a child process speaking a line protocol on its
 * stdin/stdout (`run N` -> one JSON line of N step times); it builds the same model from the same
 * resolved config (written to a temporary YAML file) with PyTorch on the host CPU. The timed steps
 * alternate in rounds between clformer and torch, with a 0.2 s pause at every switch so neither
 * side's spinning worker threads (OpenMP, OpenBLAS, PoCL) steal the cores from the other. The
 * child is bench_torch.c's. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/train.h"
#include "clformer/model.h"
#include "clformer/check.h"
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "clformer/bench.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "bench/bench_internal.h"
#include "bench/bench_torch.h"

#define MAX_OPS 128
#define MAX_STEPS 10000

/* ---------- clformer's step ---------- */

typedef struct stepper {
  cf_model *m;
  cl_mem acc;
  int *in, *tg;    /* the language model's tokens and targets; an encoder-decoder's source and target ids */
  int *src_len;    /* encoder-decoder: (B) every source full */
  cf_pair_input pairs;  /* encoder-decoder: the batch, over in and tg; B 0 for the language model */
  int N;
  float lr;
  int step;
} stepper;

/* One training step, without waiting for it (a cf_bench_fn on a stepper). */
static cf_status enqueue_step(void *arg) {
  stepper *s = arg;
  s->step++;
  if (s->pairs.B) return cf_train_step_pairs(s->m, &s->pairs, s->step, s->lr, cf_at(s->acc, 0));
  return cf_train_step(s->m, s->in, s->tg, s->step, s->lr, cf_at(s->acc, 0));
}

static cf_status one_step(cf_context *ctx, stepper *s) {
  CF_TRY(enqueue_step(s));
  return cf_context_finish(ctx);
}

/* n steps, each timed from its first enqueue to clFinish; appends their times (seconds) to v. */
static cf_status timed_steps(cf_context *ctx, stepper *s, int n, double *v, int *nv) {
  for (int i = 0; i < n; i++) CF_TRY(cf_bench_time_calls(ctx, enqueue_step, s, 1, &v[(*nv)++]));
  return CF_OK;
}

static int is_gemm(const char *name) { return !strncmp(name, "gemm", 4) || !strncmp(name, "clblast", 7); }

/* One run of `bench step`: its set-up, then what it measured, for the report. */
typedef struct step_bench {
  cf_context *ctx;
  const cf_config *cfg;
  const cf_bench_step_options *o;
  FILE *out;
  int steps, warmup, psteps, rounds;  /* timed, untimed first, profiled; rounds of turns with torch */
  int B, T, N;
  cf_gemm_impl gimpl;
  stepper s;
  cf_torch_child tc;
  double *cv, *tv;  /* our timed steps' seconds, torch's (MAX_STEPS each; tv holds both) */
  int nc, nt;
  cf_bench_stats ours, torch;  /* seconds per step */
  double t_model0, t_model1, t_first;  /* start-up: before the model, after it, after the first step */
  cf_cache_stats cache;                /* the kernel cache after the first step */
  size_t params;
  double flops;                        /* in a step's matrix products */
  double peak;                         /* the device's FMA peak, GFLOP/s, measured after the profiled steps */
  cf_profile_entry *ops, *tags;        /* the breakdown: per kernel name, ms per step; per GEMM signature */
  int nops, ntags;
  cf_bench_product products[CF_BENCH_MAX_PRODUCTS];  /* the model's products by shape (bench_products.c) */
  int nproducts;
  double prof_wall, dev, gemm_ms;      /* a profiled step's seconds; device and GEMM ms per step */
  const char *prof_bad;                /* why the events are not believed (prof_why), or NULL */
  char prof_why[160];
  unsigned long long peak_bytes;       /* device memory: the most cf_buffer_live_bytes said around the steps */
} step_bench;

/* Every buffer is made before or in the first steps and kept, so sampling after them finds the peak. */
static void sample_memory(step_bench *b) {
  unsigned long long live = cf_buffer_live_bytes();
  if (live > b->peak_bytes) b->peak_bytes = live;
}

/* An encoder-decoder's batch at its largest (what the model is laid out for, and what
 * cf_model_gemm_shapes counts): B pairs whose source and target both fill T tokens, eos included;
 * the ids random past the three special ones. */
static void make_pairs(step_bench *b) {
  stepper *s = &b->s;
  int B = b->B, T = b->T;
  for (int r = 0; r < B; r++) {
    int *src = s->in + (size_t)r * T, *tin = s->tg + (size_t)r * T;
    src[T - 1] = CF_BPE_EOS;
    tin[0] = CF_BPE_BOS;
    s->src_len[r] = T;
  }
  cf_pair_input in = {B, T, T, s->in, s->src_len, s->tg, s->tg + (size_t)B * T};
  for (int r = 0; r < B; r++) {  /* target out: the input shifted left, then eos */
    const int *tin = s->tg + (size_t)r * T;
    int *tout = s->tg + (size_t)(B + r) * T;
    for (int t = 0; t + 1 < T; t++) tout[t] = tin[t + 1];
    tout[T - 1] = CF_BPE_EOS;
  }
  s->pairs = in;
}

/* Buffers for the times, the breakdown and the tokens (random: speed does not depend on the text). */
static cf_status step_alloc(step_bench *b) {
  stepper *s = &b->s;
  int seq2seq = b->cfg->model.arch == CF_ARCH_ENCODER_DECODER, V = b->cfg->model.vocab;
  b->tv = malloc(sizeof(double) * 2 * MAX_STEPS);
  b->cv = b->tv ? b->tv + MAX_STEPS : NULL;
  s->in = malloc(sizeof(int) * (size_t)b->N);
  s->tg = malloc(sizeof(int) * (size_t)b->N * (seq2seq ? 2 : 1));  /* encoder-decoder: target in, then out */
  s->src_len = malloc(sizeof(int) * (size_t)b->B);
  b->ops = calloc(2 * MAX_OPS, sizeof *b->ops);
  b->tags = b->ops ? b->ops + MAX_OPS : NULL;
  if (!b->tv || !s->in || !s->tg || !s->src_len || !b->ops) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  unsigned long long x = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < b->N; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->in[i] = seq2seq ? CF_BPE_BYTE0 + (int)(x % (unsigned)(V - CF_BPE_BYTE0)) : (int)(x & 255);
    s->tg[i] = seq2seq ? CF_BPE_BYTE0 + (int)((x >> 20) % (unsigned)(V - CF_BPE_BYTE0)) : (int)((x >> 8) & 255);
  }
  if (seq2seq) make_pairs(b);
  return CF_OK;
}

/* The model made, initialised, and through its first step and the warm-up; the start-up's times. */
static cf_status start_model(step_bench *b) {
  const cf_config *cfg = b->cfg;
  stepper *s = &b->s;
  b->t_model0 = cf_now();
  CF_TRY(cf_model_create(b->ctx, &cfg->model, &cfg->optim, cfg->seed, b->B, b->T, &s->m));
  CF_TRY(cf_model_init(s->m, cfg->seed));
  CF_TRY(cf_buffer_create(b->ctx, 4, &s->acc));
  float zero = 0;
  CF_TRY(cf_write(b->ctx, cf_at(s->acc, 0), &zero, 1));
  CF_TRY(cf_context_finish(b->ctx));
  b->t_model1 = cf_now();
  CF_TRY(one_step(b->ctx, s));
  b->t_first = cf_now();
  b->cache = cf_context_cache_stats(b->ctx);
  for (int i = 1; i < b->warmup; i++) CF_TRY(one_step(b->ctx, s));
  return CF_OK;
}

/* The header: device and GEMM, the model, the start-up when the step ran first. */
static void print_setup(const step_bench *b) {
  const cf_device_info *d = cf_context_device(b->ctx);
  const cf_model_config *mc = &b->cfg->model;
  const cf_bench_step_options *o = b->o;
  FILE *out = b->out;
  char tuning[512];
  int tuned = cf_gemm_tune_summary(b->ctx, tuning, sizeof tuning);
  char calib[1024];
  int measured = b->gimpl == CF_GEMM_AUTO && cf_gemm_calib_summary(b->ctx, calib, sizeof calib);
  fprintf(out, "device: %s (%s, driver %s); GEMM: %s%s\n", d->name, d->platform_name, d->driver_version,
          measured ? "measured per product class" : cf_gemm_impl_name(b->gimpl),
          tuned ? ", and per shape what `clformer tune` measured faster" : "");
  if (measured) fprintf(out, "GEMM per class (ours vs CLBlast a call, on this device): %s\n", calib);
  const char *act = mc->activation == 0 ? "relu" : mc->activation == 1 ? "gelu" : "gelu_erf";
  if (b->s.pairs.B)
    fprintf(out, "model: encoder-decoder, %s-LN, %d + %d layers, d_model %d, %d heads, d_ff %d, %s; %.2fM parameters; "
            "batch %d pairs x %d tokens = %d tokens a side (data.max_tokens in sentences of data.max_len, every one "
            "full)\n", mc->norm == CF_NORM_PRE ? "Pre" : "Post", mc->encoder_layers, mc->layers, mc->d_model,
            mc->heads, mc->d_ff, act, b->params / 1e6, b->B, b->T, b->N);
  else
    fprintf(out, "model: %s-LN, %d layers, d_model %d, %d heads, d_ff %d, %s; %.2fM parameters; batch %d x %d = %d "
            "tokens\n", mc->norm == CF_NORM_PRE ? "Pre" : "Post", mc->layers, mc->d_model, mc->heads, mc->d_ff, act,
            b->params / 1e6, b->B, b->T, b->N);
  if (o->t_start > 0)
    fprintf(out, "start-up: context %.3f s, model %.3f s, first step %.3f s: %.3f s from the command's start to the end "
            "of the first step (kernel cache: %d hits, %d misses -> %s)\n",
            o->t_context - o->t_start, b->t_model1 - b->t_model0, b->t_first - b->t_model1, b->t_first - o->t_start,
            b->cache.hits, b->cache.misses, b->cache.misses ? "cold" : "warm");
}

/* The timed steps, interleaved with torch's in rounds (one round without torch). */
static cf_status timed_rounds(step_bench *b) {
  int vs_torch = b->o->vs_torch;
  for (int r = 0; r < b->rounds; r++) {
    int n = b->steps * (r + 1) / b->rounds - b->steps * r / b->rounds;
    if (vs_torch) cf_bench_pause(0.2);
    CF_TRY(timed_steps(b->ctx, &b->s, n, b->cv, &b->nc));
    sample_memory(b);
    if (vs_torch) {
      cf_bench_pause(0.2);
      CF_TRY(cf_torch_run(&b->tc, n, b->tv, &b->nt));
    }
  }
  b->ours = cf_bench_stats_of(b->cv, b->nc);
  if (vs_torch) b->torch = cf_bench_stats_of(b->tv, b->nt);
  return CF_OK;
}

/* The least device memory a step can run in with nothing recomputed: parameters, gradients, the
 * optimizer's state and the activations the backward reads (the model's plan counts each). */
static size_t memory_lower_bound(const step_bench *b) {
  const cf_memory_plan *p = cf_model_memory_plan(b->s.m);
  return p->parameters + p->gradients + p->optimizer + p->activations;
}

static void print_step_time(const step_bench *b) {
  double med = b->ours.median;
  fprintf(b->out, "\nstep time over %d steps after %d warm-up: median %.2f ms [min %.2f, max %.2f]\n", b->nc,
          b->warmup, med * 1e3, b->ours.min * 1e3, b->ours.max * 1e3);
  fprintf(b->out, "throughput: %.0f tokens/s, %.1f GFLOP/s (%.3f GFLOP per step in matrix products)\n", b->N / med,
          b->flops / med * 1e-9, b->flops * 1e-9);
  size_t lower = memory_lower_bound(b);
  fprintf(b->out, "device memory: %.1f MiB at the peak (every clformer buffer alive, cf_buffer_live_bytes), %.2fx the "
          "%.1f MiB of parameters, gradients, optimizer state and saved activations; attention: %s\n",
          b->peak_bytes / 1048576.0, (double)b->peak_bytes / (double)lower, lower / 1048576.0,
          b->cfg->model.attention == CF_ATTENTION_FUSED ? "fused" : "materialized");
}

/* psteps more steps with profiling events: per kernel name, ms per step (largest first), their sum
 * and the GEMMs' share. */
static cf_status profile_steps(step_bench *b) {
  cf_status st = CF_OK;
  if (b->o->vs_torch) cf_bench_pause(0.2);
  cf_profile_start(b->ctx);
  double tp0 = cf_now();
  for (int i = 0; i < b->psteps && st == CF_OK; i++) st = one_step(b->ctx, &b->s);
  b->prof_wall = (cf_now() - tp0) / b->psteps;
  b->nops = cf_profile_collect_tags(b->ctx, b->ops, MAX_OPS, b->tags, MAX_OPS, &b->ntags);
  if (st != CF_OK) return st;
  b->nproducts = cf_bench_products(b->cfg, b->tags, b->ntags, b->psteps, b->products);
  b->prof_bad = cf_profile_implausible(b->ops, b->nops, b->prof_wall * b->psteps * 1e3, b->prof_why, sizeof b->prof_why);
  for (int i = 0; i < b->nops; i++) {
    b->ops[i].ms /= b->psteps;
    b->dev += b->ops[i].ms;
    if (is_gemm(b->ops[i].name)) b->gemm_ms += b->ops[i].ms;
  }
  return CF_OK;
}

static void print_breakdown(const step_bench *b) {
  FILE *out = b->out;
  double dev = b->dev, gemm_ms = b->gemm_ms;
  if (b->nops == 0) {
    fprintf(out, "\nno per-operation breakdown: the context was created without profiling\n");
    return;
  }
  if (b->prof_bad) {
    fprintf(out, "\nno per-operation breakdown: %s; this device's profiling events do not measure (the step times "
            "above are wall-clock)\n", b->prof_bad);
    return;
  }
  fprintf(out, "\nper operation (OpenCL profiling events, mean of %d steps; device time %.2f ms of a %.2f ms step):\n",
          b->psteps, dev, b->prof_wall * 1e3);
  fprintf(out, "  %-38s %8s %10s %7s\n", "kernel", "calls", "ms/step", "share");
  for (int i = 0; i < b->nops; i++)
    fprintf(out, "  %-38s %8.0f %10.3f %6.1f%%\n", b->ops[i].name, (double)b->ops[i].calls / b->psteps, b->ops[i].ms,
            100 * b->ops[i].ms / dev);
  fprintf(out, "  GEMM total %.2f ms (%.1f%%), everything else %.2f ms (%.1f%%)\n", gemm_ms, 100 * gemm_ms / dev,
          dev - gemm_ms, 100 * (dev - gemm_ms) / dev);
  if (gemm_ms > 0 && b->peak > 0)
    fprintf(out, "  matrix products: %.3f GFLOP in the GEMM kernels' %.2f ms, %.1f GFLOP/s: %.1f%% of the fp32 FMA "
            "peak (%.1f GFLOP/s, a kernel of register-only FMAs run after these steps)\n", b->flops * 1e-9, gemm_ms,
            b->flops / gemm_ms * 1e-6, 100 * b->flops / gemm_ms * 1e-6 / b->peak, b->peak);
  if (gemm_ms > 0) cf_bench_products_print(out, b->products, b->nproducts, b->peak);
}

/* torch's setup and step time, and the speed ratio. */
static void print_torch(const step_bench *b) {
  char tver[64] = "", tthreads[32] = "", tobthreads[32] = "", tcore[64] = "", tblas[256] = "", tsettings[256] = "";
  const cf_bench_stats *t = &b->torch;
  double ratio = t->median / b->ours.median;
  cf_torch_setup_field(&b->tc, "torch_version", tver, sizeof tver);
  cf_torch_setup_field(&b->tc, "threads", tthreads, sizeof tthreads);
  cf_torch_setup_field(&b->tc, "openblas_core", tcore, sizeof tcore);
  cf_torch_setup_field(&b->tc, "blas", tblas, sizeof tblas);
  cf_torch_setup_field(&b->tc, "openblas_threads", tobthreads, sizeof tobthreads);
  cf_torch_setup_field(&b->tc, "settings", tsettings, sizeof tsettings);
  fprintf(b->out, "\nPyTorch %s on the host CPU (%s threads, OpenBLAS %s threads; BLAS: %s; OpenBLAS core: %s), %d steps "
          "interleaved in %d rounds:\n  settings: %s\n  median %.2f ms [min %.2f, max %.2f], %.0f tokens/s\n", tver,
          tthreads, tobthreads, tblas, tcore, b->nt, b->rounds, tsettings, t->median * 1e3, t->min * 1e3, t->max * 1e3,
          b->N / t->median);
  fprintf(b->out, "clformer / torch speed: %.2fx (%s)\n", ratio, ratio >= 1 ? "clformer faster" : "torch faster");
}

/* ---------- the JSON ---------- */

/* The report's "breakdown": per-step means of the profiled steps, one row per kernel name. */
static json_t *breakdown_json(const step_bench *b) {
  if (b->prof_bad)
    return json_pack("{s:i, s:o, s:n, s:n, s:[], s:s, s:[]}", "steps", b->psteps, "step_ms",
                     cf_json_num(b->prof_wall * 1e3, "%.4f"), "device_ms", "gemm_ms", "ops", "unavailable", b->prof_bad,
                     "products");
  json_t *rows = json_array();
  for (int i = 0; rows && i < b->nops; i++)
    if (json_array_append_new(rows, json_pack("{s:s, s:o, s:o, s:o}", "name", b->ops[i].name, "calls",
                                              cf_json_num((double)b->ops[i].calls / b->psteps, "%.2f"), "ms",
                                              cf_json_num(b->ops[i].ms, "%.4f"), "share",
                                              cf_json_num(b->ops[i].ms / b->dev, "%.4f")))) {
      json_decref(rows);
      rows = NULL;
    }
  if (!rows) return NULL;
  json_t *frac =
      b->gemm_ms > 0 && b->peak > 0 ? cf_json_num(b->flops / b->gemm_ms * 1e-6 / b->peak, "%.4f") : json_null();
  json_t *products = cf_bench_products_json(b->products, b->nproducts, b->peak);
  if (!products) {
    json_decref(rows);
    return NULL;
  }
  return json_pack("{s:i, s:o, s:o, s:o, s:o, s:n, s:o, s:o, s:o}", "steps", b->psteps, "step_ms",
                   cf_json_num(b->prof_wall * 1e3, "%.4f"), "device_ms", cf_json_num(b->dev, "%.4f"), "gemm_ms",
                   cf_json_num(b->gemm_ms, "%.4f"), "ops", rows, "unavailable", "fma_peak_gflops",
                   cf_json_num(b->peak, "%.2f"), "gemm_fraction_of_peak", frac, "products", products);
}

static json_t *model_json(const step_bench *b) {
  const cf_model_config *mc = &b->cfg->model;
  int seq2seq = mc->arch == CF_ARCH_ENCODER_DECODER;
  return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I}", "arch",
                   seq2seq ? "encoder_decoder" : "decoder", "norm", mc->norm == CF_NORM_PRE ? "pre" : "post", "layers",
                   mc->layers, "encoder_layers", seq2seq ? mc->encoder_layers : 0, "d_model", mc->d_model, "heads",
                   mc->heads, "d_ff", mc->d_ff, "vocab", mc->vocab, "seq_len", b->T, "batch_size", b->B, "params",
                   (json_int_t)b->params);
}

/* The start-up's seconds, or null when the step did not run first. */
static json_t *startup_json(const step_bench *b) {
  const cf_bench_step_options *o = b->o;
  if (o->t_start <= 0) return json_null();
  return json_pack("{s:o, s:o, s:o, s:o, s:i, s:i}", "context_s", cf_json_num(o->t_context - o->t_start, "%.4f"),
                   "model_s", cf_json_num(b->t_model1 - b->t_model0, "%.4f"), "first_step_s",
                   cf_json_num(b->t_first - b->t_model1, "%.4f"), "total_s", cf_json_num(b->t_first - o->t_start, "%.4f"),
                   "cache_hits", b->cache.hits, "cache_misses", b->cache.misses);
}

/* torch's results, or null without --vs-torch. */
static json_t *torch_json(const step_bench *b) {
  if (!b->o->vs_torch) return json_null();
  return json_pack("{s:O, s:i, s:i, s:o, s:o, s:o}", "setup", b->tc.setup, "steps", b->nt, "rounds", b->rounds,
                   "step_ms", cf_bench_stats_json(b->torch, 1e3, "%.4f"), "tokens_per_s",
                   cf_json_num(b->N / b->torch.median, "%.1f"), "clformer_vs_torch",
                   cf_json_num(b->torch.median / b->ours.median, "%.4f"));
}

/* The report's "step". */
static cf_status step_json(const step_bench *b, json_t *report) {
  double med = b->ours.median;
  return cf_json_set(report, "step",
                     json_pack("{s:o, s:s, s:i, s:i, s:o, s:o, s:I, s:o, s:I, s:I, s:o, s:o, s:o}", "model", model_json(b), "gemm",
                               cf_gemm_impl_name(b->gimpl), "warmup", b->warmup, "steps", b->nc, "step_ms",
                               cf_bench_stats_json(b->ours, 1e3, "%.4f"), "tokens_per_s",
                               cf_json_num(b->N / med, "%.1f"), "flops_per_step", (json_int_t)llround(b->flops),
                               "gflops", cf_json_num(b->flops / med * 1e-9, "%.3f"), "peak_device_bytes",
                               (json_int_t)b->peak_bytes, "memory_lower_bound_bytes",
                               (json_int_t)memory_lower_bound(b), "startup", startup_json(b),
                               "breakdown", breakdown_json(b), "torch", torch_json(b)));
}

/* ---------- the benchmark ---------- */

static void step_free(step_bench *b) {
  cf_torch_quit(&b->tc);
  if (b->s.acc) cf_buffer_free(b->s.acc);
  cf_model_free(b->s.m);
  free(b->s.in);
  free(b->s.tg);
  free(b->s.src_len);
  free(b->ops);
  free(b->tv);
}

/* Set-up, start-up, torch (after our start-up, which it would otherwise slow down), the timed
 * steps, the profiled ones; then the report. */
static cf_status run_step_bench(step_bench *b, json_t *report) {
  CF_TRY(step_alloc(b));
  CF_TRY(start_model(b));
  sample_memory(b);
  if (b->o->vs_torch) CF_TRY(cf_torch_start(&b->tc, b->cfg, b->o));
  b->params = cf_model_num_params(b->s.m);
  b->flops = cf_model_gemm_flops(b->cfg);
  print_setup(b);
  CF_TRY(timed_rounds(b));
  print_step_time(b);
  CF_TRY(profile_steps(b));
  if (b->nops && !b->prof_bad) CF_TRY(cf_bench_fma_peak(b->ctx, &b->peak));
  print_breakdown(b);
  char what[160];
  double kib = (b->s.pairs.B ? 3.0 * b->N + b->B : 2.0 * b->N) * sizeof(int) / 1024;
  if (b->s.pairs.B)
    snprintf(what, sizeof what, "source ids, lengths, target inputs and outputs (%.1f KiB in all)", kib);
  else snprintf(what, sizeof what, "token ids and targets (2 x %.1f KiB)", kib / 2);
  CF_TRY(cf_bench_transfers(b->ctx, b->s.m, enqueue_step, &b->s, b->psteps, what, kib, b->out, report));
  if (b->o->vs_torch) print_torch(b);
  fflush(b->out);
  return report ? step_json(b, report) : CF_OK;
}

cf_status cf_bench_step(cf_context *ctx, const cf_config *cfg, const cf_bench_step_options *o, FILE *out,
                        json_t *report) {
  if (cfg->model.arch == CF_ARCH_ENCODER_DECODER && o->vs_torch)
    return CF_FAIL(CF_ERR_CONFIG, "bench step --vs-torch: tools/torch_step.py builds the language model only (this "
                   "config's model.arch is encoder_decoder)");
  step_bench b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx;
  b.cfg = cfg;
  b.o = o;
  b.out = out;
  b.steps = o->steps > 0 ? o->steps : 20;
  if (b.steps > MAX_STEPS) b.steps = MAX_STEPS;
  b.warmup = o->warmup >= 1 ? o->warmup : 1;
  b.psteps = o->profile_steps > 0 ? o->profile_steps : 3;
  b.rounds = o->vs_torch ? 5 : 1;
  cf_model_shape(cfg, &b.B, &b.T);  /* an encoder-decoder: its largest batch, a side */
  b.N = b.B * b.T;
  b.s.N = b.N;
  b.s.lr = (float)cfg->optim.lr;
  CF_TRY(cf_gemm_resolve(ctx, CF_GEMM_AUTO, &b.gimpl));
  cf_status st = run_step_bench(&b, report);
  step_free(&b);
  return st;
}
