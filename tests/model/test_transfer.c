/* Host transfers by maps (zero-copy) against copies (model/transfer.c, cf_context_zero_copy).
 *
 * The same steps must give the same bits either way: the uploads only move ints. The steps are
 * enqueued back to back with no wait between them (the host runs ahead of the device, as the
 * trainer's does), each with a batch of its own, with 2 micro-batches per step: a slot refilled
 * while a kernel still reads it, or a kernel that reads a slot before its unmap, gives other
 * weights (a map that does not wait for the marker fails here 3 runs in 3). The compute queue's
 * barrier on the unmap matters only where an unmap moves data: PoCL's moves none, so its absence
 * passes here. The way also changes in the middle of a run. Then a checkpoint's parameters and
 * moments read in place by cf_model_map equal cf_model_read's copies, a moment the optimizer does
 * not keep maps to NULL, and $CLFORMER_ZERO_COPY's values are checked. */
#include <stdlib.h>
#include <string.h>
#include "clformer/model.h"
#include "clformer/train.h"
#include "testutil.h"

enum { B = 4, T = 24, STEPS = 12, PARTS = 2 };

static cf_model *model(cf_context *ctx, cf_optimizer opt, double momentum) {
  cf_config c;
  test_model_config(&c, 2, 32, 2, 64);
  c.model.dropout = 0.1;
  c.optim.name = opt;
  c.optim.momentum = momentum;
  return test_model(ctx, &c, B, T, 3);
}

/* STEPS steps of PARTS micro-batches, all enqueued before one wait; the way set per step by
 * way(step) (-1: leave it). Returns the final weights and the summed loss. */
static float *train(cf_context *ctx, int (*way)(int), float *loss) {
  cf_model *m = model(ctx, CF_OPTIM_ADAM, 0.9);
  size_t n = cf_model_flat_floats(m);
  int *in = malloc(sizeof(int) * STEPS * PARTS * B * T), *tg = malloc(sizeof(int) * STEPS * PARTS * B * T);
  test_rng r = test_rng_seed(9);
  for (int i = 0; i < STEPS * PARTS * B * T; i++) {
    in[i] = (int)(test_uniform(&r) * 256);
    tg[i] = (int)(test_uniform(&r) * 256);
  }
  cl_mem acc;
  float zero = 0;
  TEST_OK(cf_buffer_create(ctx, 4, &acc));
  TEST_OK(cf_write(ctx, cf_at(acc, 0), &zero, 1));
  for (int s = 0; s < STEPS; s++) {
    if (way(s) >= 0) cf_context_set_zero_copy(ctx, way(s));
    size_t at = (size_t)s * PARTS * B * T;
    TEST_OK(cf_train_step_accumulate(m, in + at, tg + at, PARTS, s + 1, 1e-3f, cf_at(acc, 0)));
  }
  float *w = test_falloc(n);
  TEST_OK(cf_model_read(m, 0, w));
  TEST_OK(cf_read(ctx, cf_at(acc, 0), loss, 1));
  cf_buffer_free(acc);
  cf_model_free(m);
  free(in);
  free(tg);
  return w;
}

static int copies(int s) { return s == 0 ? 0 : -1; }
static int maps(int s) { return s == 0 ? 1 : -1; }
static int alternating(int s) { return s % 5 == 2 ? 1 : s % 5 == 0 ? 0 : -1; }

static void same_steps(cf_context *ctx) {
  float l_copy, l_map, l_alt;
  float *w_copy = train(ctx, copies, &l_copy), *w_map = train(ctx, maps, &l_map), *w_alt = train(ctx, alternating, &l_alt);
  cf_model *m = model(ctx, CF_OPTIM_ADAM, 0.9);
  size_t n = cf_model_flat_floats(m);
  cf_model_free(m);
  TEST_ASSERT(l_copy == l_copy && l_copy > 0, "the copies' summed loss is %g", l_copy);
  TEST_ASSERT(l_map == l_copy, "summed loss: maps %.9g, copies %.9g", l_map, l_copy);
  TEST_ASSERT(l_alt == l_copy, "summed loss: ways alternating %.9g, copies %.9g", l_alt, l_copy);
  TEST_ASSERT(!memcmp(w_map, w_copy, n * sizeof *w_map), "weights after maps differ from after copies");
  TEST_ASSERT(!memcmp(w_alt, w_copy, n * sizeof *w_alt), "weights with the way changing differ from copies'");
  free(w_copy);
  free(w_map);
  free(w_alt);
}

/* cf_model_map reads what cf_model_read copies, and gives NULL for a moment not kept. */
static void mapped_state(cf_context *ctx) {
  cf_model *adam = model(ctx, CF_OPTIM_ADAM, 0.9), *sgd = model(ctx, CF_OPTIM_SGD, 0);
  size_t n = cf_model_flat_floats(adam);
  int in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) in[i] = tg[i] = (i * 7) % 256;
  cl_mem acc;
  TEST_OK(cf_buffer_create(ctx, 4, &acc));
  TEST_OK(cf_train_step(adam, in, tg, 1, 1e-3f, cf_at(acc, 0)));
  float *copy = test_falloc(n);
  for (int which = 0; which < 4; which++) {
    const float *p;
    TEST_OK(cf_model_read(adam, which, copy));
    TEST_OK(cf_model_map(adam, which, &p));
    TEST_ASSERT(p && !memcmp(p, copy, n * sizeof *p), "flat buffer %d mapped differs from its copy", which);
    TEST_OK(cf_model_unmap(adam, which, p));
  }
  const float *none = copy;
  TEST_OK(cf_model_map(sgd, 3, &none));
  TEST_ASSERT(none == NULL, "SGD keeps no second moment, yet a map of it gave %p", (const void *)none);
  TEST_OK(cf_model_unmap(sgd, 3, none));
  free(copy);
  cf_buffer_free(acc);
  cf_model_free(adam);
  cf_model_free(sgd);
}

/* $CLFORMER_ZERO_COPY: auto follows the device, 0 and 1 force, anything else is refused. */
static void environment(void) {
  cf_context *ctx;
  setenv("CLFORMER_ZERO_COPY", "1", 1);
  ctx = test_context();
  TEST_ASSERT(cf_context_zero_copy(ctx) == 1, "CLFORMER_ZERO_COPY=1 did not map");
  cf_context_free(ctx);
  setenv("CLFORMER_ZERO_COPY", "0", 1);
  ctx = test_context();
  TEST_ASSERT(cf_context_zero_copy(ctx) == 0, "CLFORMER_ZERO_COPY=0 did not copy");
  cf_context_free(ctx);
  setenv("CLFORMER_ZERO_COPY", "auto", 1);
  ctx = test_context();
  TEST_ASSERT(cf_context_zero_copy(ctx) == cf_context_device(ctx)->host_unified,
              "auto chose %d on a device whose host_unified is %d", cf_context_zero_copy(ctx),
              cf_context_device(ctx)->host_unified);
  cf_context_free(ctx);
  setenv("CLFORMER_ZERO_COPY", "yes", 1);
  cf_context_options o = {0};
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_context_create(&o, &ctx) == CF_ERR_INVALID_ARG, "CLFORMER_ZERO_COPY=yes was accepted");
  cf_set_verbosity(0);
  TEST_ASSERT(strstr(cf_last_error(), "CLFORMER_ZERO_COPY must be auto, 0 or 1"), "message: %s", cf_last_error());
  unsetenv("CLFORMER_ZERO_COPY");
}

int main(void) {
  cf_context *ctx = test_context();
  printf("device %s: host-unified memory %s\n", cf_context_device(ctx)->name,
         cf_context_device(ctx)->host_unified ? "yes" : "no");
  same_steps(ctx);
  mapped_state(ctx);
  cf_context_free(ctx);
  environment();
  return test_finish("test_transfer");
}
