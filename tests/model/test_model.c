/* The whole model: analytic gradients against central finite differences (both placements,
 * dropout 0), a tiny model overfitting one batch, and bit-identical repeat runs. */
#include <math.h>
#include <string.h>
#include "clformer/model.h"
#include "testutil.h"

static void tiny_config(cf_config *c, int norm, int tie, int learned_pos) {
  test_model_config(c, 2, 16, 2, 24);
  c->model.norm = norm;
  c->model.activation = 1;  /* gelu: smooth, so finite differences are clean */
  c->model.tie_embeddings = tie;
  c->model.positions = learned_pos ? CF_POS_LEARNED : CF_POS_SINUSOIDAL;
  c->model.label_smoothing = 0.1;
  c->optim.lr = 3e-3;
  test_validate(c);
}

static float loss_of(cf_model *m, const int *in, const int *tg) {
  float l;
  TEST_OK(cf_model_forward(m, in, tg, 1, 0));
  TEST_OK(cf_model_loss(m, &l));
  return l;
}

static void grad_check(cf_context *ctx, int norm, int tie, int learned_pos) {
  cf_config c;
  tiny_config(&c, norm, tie, learned_pos);
  int B = 2, T = 5, N = B * T;
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m));
  TEST_OK(cf_model_init(m, 11));
  test_rng r = test_rng_seed(5);
  int in[10], tg[10];
  for (int i = 0; i < N; i++) { in[i] = (int)(test_uniform(&r) * 40) + 60; tg[i] = (int)(test_uniform(&r) * 40) + 60; }
  size_t P = cf_model_num_params(m), flatP = cf_model_flat_floats(m);
  float *params = malloc(flatP * sizeof *params), *grads = malloc(flatP * sizeof *grads);
  /* perturb the initial weights so LN gains and biases are not at their special values */
  TEST_OK(cf_model_read(m, 0, params));
  for (size_t i = 0; i < flatP; i++) params[i] += 0.05f * (float)(test_uniform(&r) - 0.5);
  TEST_OK(cf_model_write(m, 0, params));
  TEST_OK(cf_model_forward(m, in, tg, 1, 0));
  TEST_OK(cf_model_backward(m));
  TEST_OK(cf_model_read(m, 1, grads));
  /* a sample of coordinates from every tensor: fp32 forward passes, so h is not tiny */
  int checked = 0, bad = 0;
  double worst = 0;
  for (int vi = 0; vi < cf_model_num_views(m); vi++) {
    const cf_tensor_view *v = cf_model_view(m, vi);
    for (int s = 0; s < 6; s++) {
      size_t k = v->off + (size_t)(test_uniform(&r) * v->numel);
      float orig = params[k];
      const float h = 1e-2f;
      params[k] = orig + h;
      TEST_OK(cf_model_write(m, 0, params));
      double lp = loss_of(m, in, tg);
      params[k] = orig - h;
      TEST_OK(cf_model_write(m, 0, params));
      double lm = loss_of(m, in, tg);
      params[k] = orig;
      double fd = (lp - lm) / (2 * h), an = grads[k];
      double err = fabs(fd - an), tol = 2e-4 + 2e-2 * fabs(fd);
      if (err / tol > worst) worst = err / tol;
      if (!(err <= tol)) {
        if (bad < 8) fprintf(stderr, "  %s[%zu]: analytic %.6g, finite difference %.6g\n", v->name, k - v->off, an, fd);
        bad++;
      }
      checked++;
    }
    fflush(stdout);
  }
  TEST_OK(cf_model_write(m, 0, params));
  printf("%s   gradient check %s tie=%d learned_pos=%d: %d coordinates, worst error/tolerance %.3f (%zu params)\n",
         bad ? "FAIL" : "ok  ", norm == CF_NORM_PRE ? "pre-LN " : "post-LN", tie, learned_pos, checked, worst, P);
  TEST_ASSERT(bad == 0, "%d of %d gradient coordinates disagree with finite differences", bad, checked);
  free(params);
  free(grads);
  cf_model_free(m);
}

/* Train on one fixed batch; returns the loss sequence. */
static void overfit(cf_context *ctx, int norm, int steps, float *losses) {
  cf_config c;
  tiny_config(&c, norm, 0, 0);
  c.model.activation = 0;
  c.model.label_smoothing = 0;
  int B = 4, T = 16, N = B * T;
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m));
  TEST_OK(cf_model_init(m, 3));
  const char *text = "In the beginning God created the heaven and the earth. And the earth was without form, and void.";
  int in[64], tg[64];
  for (int i = 0; i < N; i++) { in[i] = (unsigned char)text[i % 90]; tg[i] = (unsigned char)text[i % 90 + 1]; }
  for (int s = 1; s <= steps; s++) {
    TEST_OK(cf_model_forward(m, in, tg, (uint32_t)s, 1));
    TEST_OK(cf_model_loss(m, &losses[s - 1]));
    TEST_OK(cf_model_backward(m));
    TEST_OK(cf_model_global_grad_norm(m));
    TEST_OK(cf_model_update(m, 3e-3f, s));
  }
  cf_model_free(m);
}

int main(void) {
  cf_context *ctx = test_context();
  grad_check(ctx, CF_NORM_PRE, 0, 0);
  grad_check(ctx, CF_NORM_POST, 0, 0);
  grad_check(ctx, CF_NORM_PRE, 1, 1);
  grad_check(ctx, CF_NORM_POST, 1, 1);
  for (int norm = 0; norm < 2; norm++) {
    float l1[150], l2[150];
    overfit(ctx, norm, 150, l1);
    printf("%s overfit: loss %.3f -> %.3f\n", norm == CF_NORM_PRE ? "pre-LN " : "post-LN", l1[0], l1[149]);
    TEST_ASSERT(l1[0] > 5.0f && l1[149] < 0.5f, "%s must overfit one batch: %.3f -> %.3f",
                norm == CF_NORM_PRE ? "pre" : "post", l1[0], l1[149]);
    overfit(ctx, norm, 150, l2);
    TEST_ASSERT(!memcmp(l1, l2, sizeof l1), "the same seed must give bit-identical losses");
  }
  cf_context_free(ctx);
  return test_finish("test_model");
}
