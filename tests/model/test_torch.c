/* Cross-check against an independent implementation: tools/torch_check.py rebuilds the model in
 * PyTorch from a clformer checkpoint and compares the loss and every gradient on a fixed batch
 * (relative error below 1e-4), for both norm placements and several model options; with --init it
 * compares a freshly initialised model's tensors with torch.nn.init's (tools/torch_init.py) under
 * both model.init schemes, and a wrong scale must fail that comparison. Skipped,
 * visibly, when PyTorch is not installed (tools/test.sh installs Debian's python3-torch). */
#include <string.h>
#include <unistd.h>
#include "clformer/clformer.h"
#include "clformer/train.h"
#include "testutil.h"

static const char *python(void) {
  static const char *candidates[] = {"/usr/bin/python3", "python3"};
  for (int i = 0; i < 2; i++) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch, yaml' >/dev/null 2>&1", candidates[i]);
    if (system(cmd) == 0) return candidates[i];
  }
  return NULL;
}

/* A model of the gradient checks' shape as cf_model_init leaves it, saved into dir/init.safetensors;
 * then torch_check.py --init on it. `scale` multiplies the saved embeddings (1: as initialised). */
static int init_matches(cf_context *ctx, const char *py, const char *dir, cf_weight_init init, int tie, int learned,
                        float scale) {
  cf_config c;
  test_model_config(&c, 2, 24, 3, 40);
  c.model.init = init;
  c.model.tie_embeddings = tie;
  c.model.positions = learned ? CF_POS_LEARNED : CF_POS_SINUSOIDAL;
  TEST_OK(cf_config_validate(&c));
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, 3, 11, &m));
  TEST_OK(cf_model_init(m, 31));
  if (scale != 1.0f) {
    const cf_tensor_view *v = cf_model_find_view(m, "wte");
    float *p = malloc(cf_model_flat_floats(m) * sizeof *p);
    TEST_OK(cf_model_read(m, 0, p));
    for (size_t i = 0; i < v->numel; i++) p[v->off + i] *= scale;
    TEST_OK(cf_model_write(m, 0, p));
    free(p);
  }
  char ckpt[512], cmd[1024];
  snprintf(ckpt, sizeof ckpt, "%s/init.safetensors", dir);
  cf_train_state ts = {.best_valid = 0};
  TEST_OK(cf_checkpoint_save(m, &c, &ts, ckpt));
  cf_model_free(m);
  printf("initialisation %s, tied %d, learned positions %d, embeddings x %g:\n", init ? "fairseq" : "xavier", tie,
         learned, scale);
  fflush(stdout);
  snprintf(cmd, sizeof cmd, "%s %s/tools/torch_check.py --init %s", py, CLFORMER_SOURCE_DIR, ckpt);
  return system(cmd) == 0;
}

static void check(cf_context *ctx, const char *py, const char *dir, int norm, int act, int tie, int learned, int scale,
                  double smoothing, cf_weight_init init) {
  cf_config c;
  test_model_config(&c, 2, 24, 3, 40);
  c.model.init = init;
  c.model.norm = norm;
  c.model.activation = act;
  c.model.tie_embeddings = tie;
  c.model.positions = learned ? CF_POS_LEARNED : CF_POS_SINUSOIDAL;
  c.model.scale_embeddings = scale;
  c.model.label_smoothing = smoothing;
  TEST_OK(cf_config_validate(&c));
  int B = 3, T = 11, N = B * T;
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m));
  TEST_OK(cf_model_init(m, 77));
  /* move LN gains and biases off their initial values so their gradients are exercised */
  size_t P = cf_model_flat_floats(m);
  float *p = malloc(P * sizeof *p), *g = malloc(P * sizeof *g);
  test_rng r = test_rng_seed(9);
  TEST_OK(cf_model_read(m, 0, p));
  for (size_t i = 0; i < P; i++) p[i] += 0.1f * (float)(test_uniform(&r) - 0.5);
  TEST_OK(cf_model_write(m, 0, p));
  int in[33], tg[33];
  float inf[33], tgf[33], loss;
  for (int i = 0; i < N; i++) {
    in[i] = (int)(test_uniform(&r) * 256);
    tg[i] = (int)(test_uniform(&r) * 256);
    inf[i] = (float)in[i];
    tgf[i] = (float)tg[i];
  }
  TEST_OK(cf_model_forward(m, in, tg, 1, 0));
  TEST_OK(cf_model_loss(m, &loss));
  TEST_OK(cf_model_backward(m));
  TEST_OK(cf_model_read(m, 1, g));
  char ckpt[512], grads[512], cmd[2048];
  snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
  snprintf(grads, sizeof grads, "%s/grads.safetensors", dir);
  cf_train_state ts = {.best_valid = 0};
  TEST_OK(cf_checkpoint_save(m, &c, &ts, ckpt));
  int nv = cf_model_num_views(m);
  cf_st_tensor *t = calloc((size_t)nv + 3, sizeof *t);
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    t[i] = (cf_st_tensor){v->name, g + v->off, v->ndim, {v->shape[0], v->shape[1]}};
  }
  t[nv] = (cf_st_tensor){"inputs", inf, 2, {B, T}};
  t[nv + 1] = (cf_st_tensor){"targets", tgf, 2, {B, T}};
  t[nv + 2] = (cf_st_tensor){"loss", &loss, 1, {1}};
  TEST_OK(cf_safetensors_write(grads, t, nv + 3, NULL, 0));
  printf("%s-LN, activation %d, tied %d, learned positions %d, scaled %d, smoothing %.1f:\n",
         norm == CF_NORM_PRE ? "Pre" : "Post", act, tie, learned, scale, smoothing);
  fflush(stdout);
  snprintf(cmd, sizeof cmd, "%s %s/tools/torch_check.py %s %s --tol 1e-4", py, CLFORMER_SOURCE_DIR, ckpt, grads);
  int rc = system(cmd);
  TEST_ASSERT(rc == 0, "PyTorch disagrees (%s)", cmd);
  free(t);
  free(p);
  free(g);
  cf_model_free(m);
}

int main(void) {
  const char *py = python();
  if (!py) {
    printf("SKIP: PyTorch is not installed (apt-get install python3-torch; tools/test.sh does)\n");
    return TEST_SKIP;
  }
  cf_context *ctx = test_context();
  char dir[] = "/tmp/clformer-torch-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  check(ctx, py, dir, CF_NORM_PRE, 0, 0, 0, 0, 0.0, CF_WEIGHT_INIT_XAVIER);
  check(ctx, py, dir, CF_NORM_POST, 0, 0, 0, 0, 0.0, CF_WEIGHT_INIT_XAVIER);
  check(ctx, py, dir, CF_NORM_PRE, 1, 1, 1, 1, 0.1, CF_WEIGHT_INIT_FAIRSEQ);
  check(ctx, py, dir, CF_NORM_POST, 2, 1, 0, 1, 0.1, CF_WEIGHT_INIT_XAVIER);
  check(ctx, py, dir, CF_NORM_POST, 0, 0, 1, 1, 0.0, CF_WEIGHT_INIT_FAIRSEQ);
  /* the initial weights: each scheme as torch.nn.init draws it, tied or not, learned positions or not */
  TEST_ASSERT(init_matches(ctx, py, dir, CF_WEIGHT_INIT_XAVIER, 0, 1, 1.0f), "Xavier initialisation differs from torch's");
  TEST_ASSERT(init_matches(ctx, py, dir, CF_WEIGHT_INIT_FAIRSEQ, 0, 1, 1.0f), "fairseq initialisation differs from torch's");
  TEST_ASSERT(init_matches(ctx, py, dir, CF_WEIGHT_INIT_FAIRSEQ, 1, 0, 1.0f), "fairseq initialisation (tied) differs");
  /* the comparison can fail: embeddings 20% too wide, or fairseq's weights checked as Xavier's */
  TEST_ASSERT(!init_matches(ctx, py, dir, CF_WEIGHT_INIT_FAIRSEQ, 0, 0, 1.2f), "a 20%% wider embedding passed");
  TEST_ASSERT(!init_matches(ctx, py, dir, CF_WEIGHT_INIT_XAVIER, 0, 0, 1.2f), "a 20%% wider Xavier embedding passed");
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  TEST_ASSERT(system(cmd) == 0, "cleanup");
  cf_context_free(ctx);
  return test_finish("test_torch");
}
