/* A program built against an installed clformer, through nothing but its public API
 * (tests/install/install.sh builds it with pkg-config and with find_package(clformer)):
 *   1. open a device ($CLFORMER_DEVICE, else auto),
 *   2. a LayerNorm forward and a GEMM on random inputs, checked against double precision here,
 *   3. a tiny Pre-LN language model (1 layer, d_model 32, 2 heads, seq 16, batch 4) trained for a
 *      few dozen Adam steps on a small corpus written to a temporary directory; the loss must stay
 *      finite and go down.
 * Exit status: 0 all good, 1 a check failed, 77 no OpenCL platform on this machine. */
#define _POSIX_C_SOURCE 200809L
#include <clformer/clformer.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOLERANCE 1e-4 /* largest error relative to the largest reference value */

static int failures = 0;

/* Stop on a library error, with its message. */
#define CHECK(call)                                                                               \
  do {                                                                                            \
    cf_status st_ = (call);                                                                       \
    if (st_ != CF_OK) {                                                                           \
      fprintf(stderr, "FAIL %s: %s\n%s\n", #call, cf_status_str(st_), cf_last_error());           \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static unsigned long long rng_state = 0x2545F4914F6CDD1DULL;
static float uniform(float lo, float hi) { /* xorshift64*, enough for test inputs */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  double u = (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
  return lo + (hi - lo) * (float)u;
}

static cl_mem upload(cf_context *ctx, const float *host, size_t n) {
  cl_mem buf;
  CHECK(cf_buffer_create(ctx, n * sizeof(float), &buf));
  if (host) CHECK(cf_write(ctx, cf_at(buf, 0), host, n));
  else CHECK(cf_fill(ctx, cf_at(buf, 0), NAN, n)); /* outputs start as NaN: unwritten ones show */
  return buf;
}

/* Largest |got - want| over n values, relative to the largest |want|; prints and counts a failure. */
static void compare(const char *what, const float *got, const double *want, size_t n) {
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - want[i]);
    if (!isfinite(err)) err = INFINITY;
    if (err > max_err) max_err = err;
    if (fabs(want[i]) > max_ref) max_ref = fabs(want[i]);
  }
  double rel = max_err / (max_ref > 0 ? max_ref : 1);
  int ok = rel <= TOLERANCE;
  printf("%s %s: %zu values, max abs error %.3g, relative %.3g (tolerance %g)\n", ok ? "ok  " : "FAIL", what, n,
         max_err, rel, TOLERANCE);
  if (!ok) failures++;
}

static void check_layernorm(cf_context *ctx) {
  enum { N = 37, C = 70 };
  const float eps = 1e-5f;
  static float inp[N * C], weight[C], bias[C], out[N * C], mean[N], rstd[N];
  static double want[N * C], want_mean[N], want_rstd[N];
  for (int i = 0; i < N * C; i++) inp[i] = uniform(-2.0f, 3.0f);
  for (int c = 0; c < C; c++) { weight[c] = uniform(0.5f, 1.5f); bias[c] = uniform(-0.5f, 0.5f); }

  cl_mem d_inp = upload(ctx, inp, N * C), d_w = upload(ctx, weight, C), d_b = upload(ctx, bias, C);
  cl_mem d_out = upload(ctx, NULL, N * C), d_mean = upload(ctx, NULL, N), d_rstd = upload(ctx, NULL, N);
  CHECK(cf_layernorm_forward(ctx, cf_at(d_out, 0), cf_at(d_mean, 0), cf_at(d_rstd, 0), cf_at(d_inp, 0),
                             cf_at(d_w, 0), cf_at(d_b, 0), N, C, eps));
  CHECK(cf_read(ctx, cf_at(d_out, 0), out, N * C));
  CHECK(cf_read(ctx, cf_at(d_mean, 0), mean, N));
  CHECK(cf_read(ctx, cf_at(d_rstd, 0), rstd, N));

  for (int n = 0; n < N; n++) { /* two passes, in double */
    const float *x = inp + n * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double r = 1.0 / sqrt(v / C + eps);
    want_mean[n] = m;
    want_rstd[n] = r;
    for (int c = 0; c < C; c++) want[n * C + c] = (x[c] - m) * r * weight[c] + bias[c];
  }
  compare("layernorm forward out ", out, want, N * C);
  compare("layernorm forward mean", mean, want_mean, N);
  compare("layernorm forward rstd", rstd, want_rstd, N);
  cl_mem bufs[] = {d_inp, d_w, d_b, d_out, d_mean, d_rstd};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cf_buffer_free(bufs[i]);
}

/* C (M, N) = alpha * A (M, K) . B^T, B stored (N, K), + beta * C. */
static void check_gemm(cf_context *ctx) {
  enum { M = 33, N = 45, K = 67 };
  const float alpha = 0.75f, beta = 0.5f;
  static float a[M * K], b[N * K], c[M * N], out[M * N];
  static double want[M * N];
  for (int i = 0; i < M * K; i++) a[i] = uniform(-1, 1);
  for (int i = 0; i < N * K; i++) b[i] = uniform(-1, 1);
  for (int i = 0; i < M * N; i++) c[i] = uniform(-1, 1);

  cl_mem d_a = upload(ctx, a, M * K), d_b = upload(ctx, b, N * K), d_c = upload(ctx, c, M * N);
  CHECK(cf_gemm(ctx, 0, 1, M, N, K, alpha, cf_at(d_a, 0), K, cf_at(d_b, 0), K, beta, cf_at(d_c, 0), N));
  CHECK(cf_read(ctx, cf_at(d_c, 0), out, M * N));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[j * K + k];
      want[i * N + j] = alpha * s + beta * (double)c[i * N + j];
    }
  compare("gemm (33 x 45 x 67, B transposed)", out, want, M * N);
  cf_buffer_free(d_a);
  cf_buffer_free(d_b);
  cf_buffer_free(d_c);
}

/* Mean loss over `count` fixed validation batches, without dropout or updates. */
static float eval_loss(cf_model *m, const cf_data *data, const cf_config *cfg, int *in, int *tg, int count) {
  int B = cfg->data.batch_size, T = cfg->data.seq_len;
  double sum = 0;
  for (int i = 0; i < count; i++) {
    float loss;
    cf_data_batch(data, CF_SPLIT_VALID, cfg->seed, (uint64_t)i, B, T, in, tg);
    CHECK(cf_model_forward(m, in, tg, 0, 0));
    CHECK(cf_model_loss(m, &loss));
    sum += loss;
  }
  return (float)(sum / count);
}

static void check_training(cf_context *ctx) {
  /* A small corpus of a few repeated lines, in a directory of our own. */
  const char *tmp = getenv("TMPDIR");
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/clformer-example-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) { perror("FAIL mkdtemp"); exit(1); }
  snprintf(path, sizeof path, "%s/corpus.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) { perror("FAIL corpus"); exit(1); }
  static const char *lines[] = {"In the beginning God created the heaven and the earth.\n",
                                "And the earth was without form, and void.\n",
                                "And God said, Let there be light: and there was light.\n"};
  for (int i = 0; i < 120; i++) fputs(lines[i % 3], f);
  if (fclose(f) != 0) { perror("FAIL corpus"); exit(1); }

  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "seed: 7\n"
           "data:\n  train: %s\n  seq_len: 16\n  batch_size: 4\n"
           "model:\n  norm: pre\n  layers: 1\n  d_model: 32\n  heads: 2\n  d_ff: 64\n"
           "optim:\n  name: adam\n  lr: 1e-2\n"
           "schedule:\n  warmup: 0\n  decay: constant\n",
           path);
  cf_config cfg;
  cf_config_defaults(&cfg);
  CHECK(cf_config_load_string(&cfg, yaml, "example.c"));
  CHECK(cf_config_validate(&cfg));
  cf_data data;
  CHECK(cf_data_open(&data, &cfg));

  int B = cfg.data.batch_size, T = cfg.data.seq_len, steps = 40;
  cf_model *m;
  CHECK(cf_model_create(ctx, &cfg.model, &cfg.optim, cfg.seed, B, T, &m));
  CHECK(cf_model_init(m, cfg.seed));
  printf("model: %zu parameters, %d training bytes, %d validation bytes\n", cf_model_num_params(m),
         (int)data.n_train, (int)data.n_valid);
  int *in = malloc(sizeof(int) * (size_t)(B * T)), *tg = malloc(sizeof(int) * (size_t)(B * T));
  if (!in || !tg) { fprintf(stderr, "FAIL: out of memory\n"); exit(1); }

  float before = eval_loss(m, &data, &cfg, in, tg, 4), first = 0, last = 0;
  int finite = isfinite(before);
  for (int step = 1; step <= steps; step++) {
    float loss;
    cf_data_batch(&data, CF_SPLIT_TRAIN, cfg.seed, (uint64_t)step, B, T, in, tg);
    CHECK(cf_model_forward(m, in, tg, (uint32_t)step, 1));
    CHECK(cf_model_backward(m));
    CHECK(cf_model_global_grad_norm(m));
    CHECK(cf_model_update(m, (float)cf_config_lr(&cfg, step), step));
    CHECK(cf_model_loss(m, &loss));
    if (!isfinite(loss)) finite = 0;
    if (step == 1) first = loss;
    last = loss;
    if (step == 1 || step % 10 == 0) printf("  step %2d  train loss %.4f\n", step, loss);
  }
  float after = eval_loss(m, &data, &cfg, in, tg, 4);
  finite = finite && isfinite(after);
  /* From ln(256) = 5.55 at the start; this corpus has a few dozen distinct bytes. */
  int ok = finite && after < before - 1.0f && last < first;
  printf("%s training: validation loss %.4f -> %.4f after %d steps (train %.4f -> %.4f)\n", ok ? "ok  " : "FAIL",
         before, after, steps, first, last);
  if (!ok) failures++;

  free(in);
  free(tg);
  cf_model_free(m);
  cf_data_close(&data);
  remove(path);
  rmdir(dir);
}

int main(void) {
  cf_context_options opts = {0};
  opts.device_spec = getenv("CLFORMER_DEVICE"); /* NULL: the library reads it too, then "auto" */
  cf_context *ctx;
  cf_status st = cf_context_create(&opts, &ctx);
  if (st == CL_PLATFORM_NOT_FOUND_KHR) {
    fprintf(stderr, "SKIP: no OpenCL platform installed\n");
    return 77;
  }
  if (st != CF_OK) {
    fprintf(stderr, "FAIL: cannot open an OpenCL device: %s\n%s\n", cf_status_str(st), cf_last_error());
    return 1;
  }
  printf("device: %s (%s)\n", cf_context_device(ctx)->name, cf_context_device(ctx)->platform_name);

  check_layernorm(ctx);
  check_gemm(ctx);
  check_training(ctx);

  cf_context_free(ctx);
  if (failures) {
    fprintf(stderr, "example: %d check(s) FAILED\n", failures);
    return 1;
  }
  printf("example: all checks passed\n");
  return 0;
}
