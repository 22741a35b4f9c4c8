/* The non-finite watch on a real model: healthy steps give no verdict; a step with gradients made
 * non-finite on purpose is named with its loss, its norm and the tensor nearest the output (the
 * output matrix first when tied), one step late without waiting and at once when asked; the first
 * verdict sticks through later bad steps. */
#include <math.h>
#include <string.h>
#include "clformer/model.h"
#include "testutil.h"

enum { B = 2, T = 5 };

static cf_model *tiny_model(cf_context *ctx, int tie) {
  cf_config c;
  test_model_config(&c, 2, 16, 2, 24);
  c.model.tie_embeddings = tie;
  return test_model(ctx, &c, B, T, 3);
}

/* Element k of the named tensor's gradient set to v (the rest as backward left them). */
static void plant(cf_model *m, float *grads, const char *name, size_t k, float v) {
  const cf_tensor_view *view = cf_model_find_view(m, name);
  TEST_ASSERT(view && k < view->numel, "no element %zu of %s", k, name);
  if (view && k < view->numel) grads[view->off + k] = v;
}

/* One step: forward, backward, then the gradients replaced when `bad` plants some, the norm, the
 * watch and the update. *loss: the step's loss. */
static void step(cf_model *m, int s, const char *const *bad, int nbad, float *loss) {
  int in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) in[i] = (i * 7 + s) % 256, tg[i] = (i * 13 + s) % 256;
  TEST_OK(cf_model_forward(m, in, tg, (uint32_t)s, 1));
  TEST_OK(cf_model_backward(m));
  TEST_OK(cf_model_loss(m, loss));
  if (nbad) {
    float *g = test_falloc(cf_model_flat_floats(m));
    TEST_OK(cf_model_read(m, 1, g));
    for (int i = 0; i < nbad; i++) plant(m, g, bad[i], (size_t)i, i % 2 ? INFINITY : NAN);
    TEST_OK(cf_model_write(m, 1, g));
    free(g);
  }
  TEST_OK(cf_model_global_grad_norm(m));
  TEST_OK(cf_model_watch(m, s, 3 * logf(256)));
  TEST_OK(cf_model_update(m, 1e-3f, s));
}

static const char *view_name(const cf_model *m, int i) { return i >= 0 ? cf_model_view(m, i)->name : "(none)"; }

static void untied(cf_context *ctx) {
  cf_model *m = tiny_model(ctx, 0);
  cf_divergence v;
  float loss, bad_loss;
  for (int s = 1; s <= 3; s++) step(m, s, NULL, 0, &loss);
  TEST_OK(cf_model_watch_poll(m, 1, &v));
  TEST_ASSERT(v.step == 0, "healthy steps gave a verdict at step %d", v.step);
  const char *bad[] = {"layers.0.attn.qkv.weight", "layers.1.ln1.bias", "layers.0.ln2.weight"};
  step(m, 4, bad, 3, &bad_loss);
  TEST_OK(cf_model_watch_poll(m, 0, &v));
  TEST_ASSERT(v.step == 0, "without waiting, the latest step's verdict is not looked at (got step %d)", v.step);
  step(m, 5, NULL, 0, &loss);
  TEST_OK(cf_model_watch_poll(m, 0, &v));
  TEST_ASSERT(v.step == 4, "one step late, the bad step is 4 (got %d)", v.step);
  TEST_ASSERT(!strcmp(view_name(m, v.tensor), "layers.1.ln1.bias"), "named %s, not layers.1.ln1.bias",
              view_name(m, v.tensor));
  TEST_ASSERT(v.tensors == 3, "%d tensors flagged, 3 planted", v.tensors);
  TEST_ASSERT(v.loss == bad_loss && !isfinite(v.grad_norm), "verdict loss %g (step's %g), norm %g", v.loss, bad_loss,
              v.grad_norm);
  const char *later[] = {"layers.1.ffn.fc2.weight"};
  step(m, 6, later, 1, &loss);
  TEST_OK(cf_model_watch_poll(m, 1, &v));
  TEST_ASSERT(v.step == 4 && !strcmp(view_name(m, v.tensor), "layers.1.ln1.bias") && v.tensors == 3,
              "a later bad step replaced the first verdict: step %d, %s, %d tensors", v.step, view_name(m, v.tensor),
              v.tensors);
  if (!test_failures) printf("ok   untied: step 4 named, layers.1.ln1.bias nearest the output of 3, sticky after\n");
  cf_model_free(m);
}

static void tied(cf_context *ctx) {
  cf_model *m = tiny_model(ctx, 1);
  cf_divergence v;
  float loss;
  const char *bad[] = {"layers.1.ffn.fc2.bias", "wte"};
  step(m, 1, NULL, 0, &loss);
  step(m, 2, bad, 2, &loss);
  TEST_OK(cf_model_watch_poll(m, 1, &v));
  TEST_ASSERT(v.step == 2 && !strcmp(view_name(m, v.tensor), "wte"),
              "tied: waiting for the latest, step %d named %s (want 2, wte: the output matrix)", v.step,
              view_name(m, v.tensor));
  if (!test_failures) printf("ok   tied: the shared output matrix wte is named first\n");
  cf_model_free(m);
}

int main(void) {
  cf_context *ctx = test_context();
  untied(ctx);
  tied(ctx);
  cf_context_free(ctx);
  return test_finish("test_watch");
}
