/* Gradient accumulation (train.accumulate): a step over 2 micro-batches of 4 sequences gives the
 * update of one batch of 8, the same rows, with dropout too (a row's masks are keyed by its row in
 * the step's batch, not by its micro-batch: model.c's dropout_key). Over 8 steps, with
 * gradient clipping on, both runs' step losses and gradient norms agree to a relative 1e-5, and every
 * weight to 1e-5 absolute + 1e-4 relative: the sums differ only in order, float32 rounding of about
 * 1e-7 of a value. Under SGD (momentum 0.9) every weight is compared; under Adam all but the attention
 * key biases: their gradient is zero in exact arithmetic (softmax ignores a shift of every score of
 * a query), so what they get is rounding noise of about 1e-9, which Adam divides by its own root
 * mean square into steps of the learning rate's size in both runs alike, different noise in each.
 * Also: the watch checks the step's mean loss, and micro-batch 0 draws the masks of a step without
 * accumulation, micro-batch 1 others. */
#include <math.h>
#include <string.h>
#include "clformer/model.h"
#include "clformer/train.h"
#include "testutil.h"

enum { B = 8, T = 16, STEPS = 8 };

static cf_model *model_with(cf_context *ctx, int batch, double dropout, cf_optimizer opt) {
  cf_config c;
  test_model_config(&c, 2, 32, 2, 64);
  c.model.norm = CF_NORM_POST;
  c.model.dropout = dropout;
  c.model.attn_dropout = dropout;
  c.optim.lr = 3e-3;
  c.optim.clip_norm = 1.0;  /* the clipping reads the accumulated gradient's norm */
  c.optim.name = opt;
  return test_model(ctx, &c, batch, T, 11);
}

static cf_model *model(cf_context *ctx, int batch, double dropout) { return model_with(ctx, batch, dropout, CF_OPTIM_ADAM); }

/* Under Adam the key biases (the middle third of each qkv bias) are left out: see the top. */
static void skip_key_biases(const cf_model *m, float *a, const float *b) {
  for (int i = 0; i < cf_model_num_views(m); i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    if (!strstr(v->name, "attn.qkv.bias")) continue;
    size_t C = v->numel / 3;
    memcpy(a + v->off + C, b + v->off + C, C * sizeof *a);
  }
}

/* A step's batch: B sequences of a repeating pattern with noise, so the loss falls. */
static void batch(test_rng *r, int *in, int *tg) {
  for (int b = 0; b < B; b++) {
    int start = (int)(test_uniform(r) * 40);
    for (int t = 0; t <= T; t++) {
      int v = test_uniform(r) < 0.1 ? (int)(test_uniform(r) * 256) : 'a' + (start + t) % 13;
      if (t < T) in[b * T + t] = v;
      if (t > 0) tg[b * T + t - 1] = v;
    }
  }
}

static float read1(cf_context *ctx, cl_mem buf) {
  float v;
  TEST_OK(cf_read(ctx, cf_at(buf, 0), &v, 1));
  return v;
}

static void same_update(cf_context *ctx, cf_optimizer opt, double dropout, const char *name) {
  cf_model *big = model_with(ctx, B, dropout, opt), *acc = model_with(ctx, B / 2, dropout, opt);
  size_t n = cf_model_flat_floats(big);
  float *wa = test_falloc(n), *wb = test_falloc(n), zero = 0;
  cl_mem la, lb;
  TEST_OK(cf_buffer_create(ctx, 4, &la));
  TEST_OK(cf_buffer_create(ctx, 4, &lb));
  test_rng r = test_rng_seed(5);
  int in[B * T], tg[B * T];
  double worst_loss = 0, worst_w = 0;
  for (int s = 1; s <= STEPS; s++) {
    batch(&r, in, tg);
    TEST_OK(cf_write(ctx, cf_at(la, 0), &zero, 1));
    TEST_OK(cf_write(ctx, cf_at(lb, 0), &zero, 1));
    TEST_OK(cf_train_step_accumulate(big, in, tg, 1, s, 3e-3f, cf_at(la, 0)));
    TEST_OK(cf_train_step_accumulate(acc, in, tg, 2, s, 3e-3f, cf_at(lb, 0)));
    float a = read1(ctx, la), b = read1(ctx, lb);
    double rel = fabs(a - b) / fabs(a);
    if (rel > worst_loss) worst_loss = rel;
    TEST_ASSERT(rel <= 1e-5, "%s step %d: loss %.7f with batch 8, %.7f with 2 x 4", name, s, a, b);
    TEST_OK(cf_model_read(big, 0, wa));
    TEST_OK(cf_model_read(acc, 0, wb));
    if (opt != CF_OPTIM_SGD) skip_key_biases(big, wb, wa);
    for (size_t i = 0; i < n; i++) {
      double d = fabs((double)wa[i] - wb[i]);
      if (d > worst_w) worst_w = d;
    }
    TEST_ASSERT(test_compare_f("weights", wb, wa, n, 1e-5, 1e-4) == 0, "%s step %d: weights differ", name, s);
  }
  printf("%s, 8 steps, batch 8 against 2 micro-batches of 4: largest relative loss difference %.2e, largest weight "
         "difference %.2e\n", name, worst_loss, worst_w);
  float gn_a, gn_b;
  TEST_OK(cf_model_read_global_grad_norm(big, &gn_a));
  TEST_OK(cf_model_read_global_grad_norm(acc, &gn_b));
  TEST_ASSERT(fabsf(gn_a - gn_b) <= 1e-5f * gn_a, "gradient norm %g against %g", gn_a, gn_b);
  cf_buffer_free(la);
  cf_buffer_free(lb);
  free(wa);
  free(wb);
  cf_model_free(big);
  cf_model_free(acc);
}

/* Blow the output matrix up so the loss passes the watch's limit: both runs are stopped at that
 * step, with the same loss: the watch saw the accumulated step's mean, not its last part's. */
static void watch_sees_the_mean(cf_context *ctx) {
  cf_model *ms[2] = {model(ctx, B, 0), model(ctx, B / 2, 0)};
  test_rng r = test_rng_seed(9);
  int in[B * T], tg[B * T];
  batch(&r, in, tg);
  cf_divergence v[2];
  cl_mem l;
  TEST_OK(cf_buffer_create(ctx, 4, &l));
  for (int k = 0; k < 2; k++) {
    size_t n = cf_model_flat_floats(ms[k]);
    float *w = test_falloc(n);
    TEST_OK(cf_model_read(ms[k], 0, w));
    const cf_tensor_view *out = cf_model_find_view(ms[k], "out.weight");
    for (size_t i = 0; i < out->numel; i++) w[out->off + i] *= 400.0f;
    TEST_OK(cf_model_write(ms[k], 0, w));
    free(w);
    TEST_OK(cf_train_step_accumulate(ms[k], in, tg, k + 1, 1, 1e-3f, cf_at(l, 0)));
    TEST_OK(cf_model_watch_poll(ms[k], 1, &v[k]));
  }
  float part_loss;
  TEST_OK(cf_model_loss(ms[1], &part_loss));  /* the last micro-batch's own */
  TEST_ASSERT(v[0].step == 1 && v[1].step == 1, "diverged at steps %d and %d", v[0].step, v[1].step);
  TEST_ASSERT(v[0].loss > 16.7f && fabsf(v[0].loss - v[1].loss) <= 1e-4f * v[0].loss,
              "the watch's loss: %g with batch 8, %g with 2 x 4 (the last part's own: %g)", v[0].loss, v[1].loss,
              part_loss);
  TEST_ASSERT(fabsf(part_loss - v[1].loss) > 1e-3f * v[1].loss, "the parts' losses should differ (%g, %g)", part_loss,
              v[1].loss);
  cf_buffer_free(l);
  cf_model_free(ms[0]);
  cf_model_free(ms[1]);
}

/* With dropout, micro-batch 0 draws a plain step's masks, micro-batch 1 (rows 4..7) others. */
static void own_masks(cf_context *ctx) {
  cf_model *m = model(ctx, B / 2, 0.3);
  test_rng r = test_rng_seed(3);
  int in[B * T], tg[B * T];
  batch(&r, in, tg);
  float plain, part0, part1;
  TEST_OK(cf_model_forward(m, in, tg, 7, 1));
  TEST_OK(cf_model_loss(m, &plain));
  TEST_OK(cf_model_forward_part(m, in, tg, 7, 0, 2, 1));
  TEST_OK(cf_model_loss(m, &part0));
  TEST_OK(cf_model_forward_part(m, in, tg, 7, 1, 2, 1));
  TEST_OK(cf_model_loss(m, &part1));
  TEST_ASSERT(plain == part0, "part 0 of 2: loss %.7f, a plain forward %.7f", part0, plain);
  TEST_ASSERT(part1 != part0, "part 1 drew part 0's masks (loss %.7f both)", part0);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_model_forward_part(m, in, tg, 7, 2, 2, 1) == CF_ERR_INVALID_ARG, "part 2 of 2 accepted");
  cf_set_verbosity(v);
  cf_model_free(m);
}

/* Masks are numbered in 32 bits over the step's whole batch: a step whose largest masked tensor
 * (attention probabilities, 2 heads x 256 x 256 a sequence) would pass 2^32 elements over all its
 * micro-batches is refused, with dropout; without, it runs. */
static void masks_fit_32_bits(cf_context *ctx) {
  for (int k = 0; k < 2; k++) {
    cf_config c;
    test_model_config(&c, 1, 16, 2, 32);
    c.model.attn_dropout = k ? 0.1 : 0.0;
    cf_model *m = test_model(ctx, &c, 1, 256, 1);
    int in[256] = {0};
    TEST_OK(cf_model_set_shard(m, 8191, 8192));  /* 8192 x 131072 = 2^30 elements: fits */
    TEST_OK(cf_model_forward_part(m, in, in, 1, 0, 1, 1));
    TEST_OK(cf_model_set_shard(m, 0, 32769));    /* one more micro-batch than 2^32 elements hold */
    int v = cf_verbosity();
    cf_set_verbosity(-1);
    cf_status st = cf_model_forward_part(m, in, in, 1, 0, 1, 1);
    cf_set_verbosity(v);
    cf_clear_error();
    TEST_ASSERT(k ? st == CF_ERR_INVALID_ARG : st == CF_OK, "attention dropout %g over 32769 sequences: %s",
                c.model.attn_dropout, cf_status_str(st));
    cf_model_free(m);
  }
  printf("ok   dropout masks past 2^32 elements of a step are refused\n");
}

int main(void) {
  cf_context *ctx = test_context();
  same_update(ctx, CF_OPTIM_SGD, 0, "SGD");
  same_update(ctx, CF_OPTIM_ADAM, 0, "Adam");
  same_update(ctx, CF_OPTIM_SGD, 0.2, "SGD, dropout 0.2");
  same_update(ctx, CF_OPTIM_ADAM, 0.2, "Adam, dropout 0.2");
  watch_sees_the_mean(ctx);
  own_masks(ctx);
  masks_fit_32_bits(ctx);
  cf_context_free(ctx);
  return test_finish("test_accumulate");
}
