/* Kernels whose work-item walks a whole dimension, at sizes where that walk passes 65535 trips.
 * Mesa's llvmpipe (rusticl's CPU device) silently ends every loop of an invocation after 65535
 * trips in all (src/gemm/loop_budget.h), so such a kernel computes wrong numbers there and right
 * ones on PoCL. Run on llvmpipe by tests/train/cli_rusticl.sh (CLFORMER_DEVICE=llvmpipe); on other
 * devices it checks the same sums at sizes no other test reaches. N = 70000 rows is past the limit
 * for every loop over rows; C = 100 is no multiple of 64, so the last item's columns take the
 * slower paths (and its SIMD neighbours' trips add to its own). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "testutil.h"

enum { N = 70000, C = 100 };

/* dbias[c] = sum over N rows of dout[n, c]: one work-item per 64 columns walks every row. */
static void check_bias_backward(cf_context *ctx, test_rng *r) {
  float *dout = test_falloc((size_t)N * C), zero[C] = {0};
  test_fill_uniform(r, dout, (size_t)N * C, -1, 1);
  double *ref = test_dalloc(C);
  for (size_t i = 0; i < (size_t)N * C; i++) ref[i % C] += dout[i];
  cf_mem d = test_tensor(ctx, dout, (size_t)N * C, 3), b = test_tensor(ctx, zero, C, 5);
  TEST_OK(cf_bias_backward(ctx, b, d, N, C));
  float *got = test_read(ctx, b, C);
  TEST_ASSERT(test_compare("bias_backward N=70000", got, ref, C, 2e-2, 1e-4) == 0, "column sums");
  free(got), free(ref), free(dout);
  test_free_tensors();
}

/* LayerNorm's dweight and dbias: the same walk over rows, with the normalised input. */
static void check_layernorm_params(cf_context *ctx, test_rng *r) {
  float *x = test_falloc((size_t)N * C), *dy = test_falloc((size_t)N * C), *mu = test_falloc(N), *rs = test_falloc(N);
  float w[C], zero[C] = {0};
  test_fill_uniform(r, x, (size_t)N * C, -1, 1);
  test_fill_uniform(r, dy, (size_t)N * C, -1, 1);
  test_fill_uniform(r, mu, N, -0.1f, 0.1f);
  test_fill_uniform(r, rs, N, 0.5f, 2);
  test_fill_uniform(r, w, C, 0.5f, 1.5f);
  double *rw = test_dalloc(C), *rb = test_dalloc(C);
  for (size_t n = 0; n < N; n++)
    for (size_t c = 0; c < C; c++) {
      size_t i = n * C + c;
      rw[c] += (double)dy[i] * (((double)x[i] - mu[n]) * rs[n]);
      rb[c] += dy[i];
    }
  cf_mem dx = test_tensor(ctx, NULL, (size_t)N * C, 1), dw = test_tensor(ctx, zero, C, 2),
         db = test_tensor(ctx, zero, C, 3), t_dy = test_tensor(ctx, dy, (size_t)N * C, 4),
         t_x = test_tensor(ctx, x, (size_t)N * C, 5), t_w = test_tensor(ctx, w, C, 6), t_mu = test_tensor(ctx, mu, N, 7),
         t_rs = test_tensor(ctx, rs, N, 8);
  TEST_OK(cf_layernorm_backward(ctx, dx, dw, db, t_dy, t_x, t_w, t_mu, t_rs, N, C, 0));
  float *gw = test_read(ctx, dw, C), *gb = test_read(ctx, db, C);
  TEST_ASSERT(test_compare("layernorm dweight N=70000", gw, rw, C, 5e-2, 1e-4) == 0, "dweight");
  TEST_ASSERT(test_compare("layernorm dbias N=70000", gb, rb, C, 2e-2, 1e-4) == 0, "dbias");
  free(gw), free(gb), free(rw), free(rb), free(x), free(dy), free(mu), free(rs);
  test_free_tensors();
}

/* The mean of the rows' losses: one work-item walks all N rows. */
static void check_crossentropy_mean(cf_context *ctx, test_rng *r) {
  enum { V = 8 };
  float *logits = test_falloc((size_t)N * V);
  int *targets = malloc(N * sizeof *targets);
  test_fill_uniform(r, logits, (size_t)N * V, -2, 2);
  double sum = 0;
  for (int n = 0; n < N; n++) {
    targets[n] = (int)(test_uniform(r) * V);
    float *x = logits + (size_t)n * V;
    if (n >= 60000) x[targets[n]] = -10;  /* the last rows' losses are large: a mean of fewer rows is off */
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)x[v]);
    sum += log(s) - x[targets[n]];
  }
  double ref = sum / N;
  cf_mem loss = test_tensor(ctx, NULL, 1, 0), losses = test_tensor(ctx, NULL, N, 0),
         t_logits = test_tensor(ctx, logits, (size_t)N * V, 0), t_targets = test_tensor(ctx, NULL, N, 0);
  TEST_OK(cf_write(ctx, t_targets, targets, N));
  TEST_OK(cf_crossentropy_forward(ctx, loss, losses, t_logits, t_targets, N, V, 0.0f, -100));
  float *got = test_read(ctx, loss, 1);
  TEST_ASSERT(test_compare("crossentropy mean N=70000", got, &ref, 1, 1e-4, 1e-4) == 0, "the mean loss");
  free(got), free(logits), free(targets);
  test_free_tensors();
}

/* dwte: per token id the sum of its rows of dout, over N = B*T rows. */
static void check_embedding_backward(cf_context *ctx, test_rng *r) {
  enum { B = 1000, T = 70, EC = 32, V = 256 };
  float *dout = test_falloc((size_t)N * EC), *zero = test_falloc((size_t)V * EC);
  int *tokens = malloc(N * sizeof *tokens);
  test_fill_uniform(r, dout, (size_t)N * EC, -1, 1);
  double *ref = test_dalloc((size_t)V * EC);
  for (int n = 0; n < N; n++) {
    tokens[n] = n % 3 ? (int)(test_uniform(r) * V) : 32;  /* a third are one token, as spaces are in text */
    for (int c = 0; c < EC; c++) ref[(size_t)tokens[n] * EC + c] += dout[(size_t)n * EC + c];
  }
  cf_mem dwte = test_tensor(ctx, zero, (size_t)V * EC, 1), t_dout = test_tensor(ctx, dout, (size_t)N * EC, 2),
         t_tok = test_tensor(ctx, NULL, N, 0), none = {0};
  TEST_OK(cf_write(ctx, t_tok, tokens, N));
  TEST_OK(cf_embedding_backward(ctx, dwte, none, t_dout, t_tok, B, T, EC, V, 1.0f));
  float *got = test_read(ctx, dwte, (size_t)V * EC);
  TEST_ASSERT(test_compare("embedding dwte N=70000", got, ref, (size_t)V * EC, 1e-3, 1e-4) == 0, "token sums");
  free(got), free(ref), free(dout), free(zero), free(tokens);
  test_free_tensors();
}

/* Sums of 70000 floats in order: a few 1e-3 of rounding on PoCL; a loop cut short misses whole rows (errors ~100). */
/* The divergence watch's scan of one gradient tensor: kjv-small's FFN matrix is 1024 x 256 floats,
 * a NaN in its last element must be found, and a finite tensor beside it not flagged. */
static void check_nonfinite_segments(cf_context *ctx) {
  const size_t big = 1024 * 256, small = 1000;
  float *x = test_falloc(big + small);
  x[big - 1] = NAN;
  size_t offsets[2] = {0, big}, counts[2] = {big, small};
  uint32_t table[4];
  TEST_OK(cf_segment_table(offsets, counts, 2, table));
  float state[3] = {1, 0, 0};
  cf_mem t_x = test_tensor(ctx, x, big + small, 0), t_state = test_tensor(ctx, state, 3, 0),
         flags = test_tensor(ctx, NULL, 2, 0), t_table = test_tensor(ctx, NULL, 4, 0);
  TEST_OK(cf_write(ctx, t_table, table, 4));
  TEST_OK(cf_nonfinite_segments(ctx, flags, t_state, t_x, t_table, 2));
  float *got = test_read(ctx, flags, 2);
  TEST_ASSERT(got[0] == 1.0f && got[1] == 0.0f, "flags %g %g, expected 1 (a NaN at element %zu) and 0", got[0], got[1],
              big - 1);
  free(got), free(x);
  test_free_tensors();
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(0x100b);
  check_nonfinite_segments(ctx);
  check_crossentropy_mean(ctx, &r);
  check_bias_backward(ctx, &r);
  check_layernorm_params(ctx, &r);
  check_embedding_backward(ctx, &r);
  cf_context_free(ctx);
  return test_finish("test_loop_limits");
}
