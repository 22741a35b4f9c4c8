/* The memory plan (cf_model_plan) against what a model really allocates: the bytes of every device
 * buffer alive after a training step (GEMM scratch included, counted by cf_buffer_live_bytes) agree
 * with the plan's total within 10%, the model's own buffers exactly; the plan's largest batch is
 * the boundary of what fits; a device too small is refused by cf_model_create before any
 * allocation, with the plan in the message; no buffer is larger than the device allows. */
#include <math.h>
#include <string.h>
#include <time.h>
#include "clformer/model.h"
#include "clformer/train.h"
#include "testutil.h"

static cf_config config(int layers, int d, int ff, int B, int T, cf_optimizer opt, int tie) {
  cf_config c;
  test_model_config(&c, layers, d, 4, ff);
  c.model.tie_embeddings = tie;
  c.optim.name = opt;
  c.data.batch_size = B;
  c.data.seq_len = T;
  test_validate(&c);
  return c;
}

/* The live bytes once the driver has destroyed what was released: it may run a buffer's
 * destructor some time after its last release (PoCL frees after the commands that used it retire). */
static unsigned long long settled_live_bytes(cf_context *ctx) {
  TEST_OK(cf_context_finish(ctx));
  unsigned long long v = cf_buffer_live_bytes(), prev;
  int same = 0;
  for (int i = 0; i < 200 && same < 5; i++) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    prev = v;
    v = cf_buffer_live_bytes();
    same = v == prev ? same + 1 : 0;
  }
  return v;
}

/* Create, train one step, and compare the device bytes alive with the plan. */
static void plan_vs_actual(cf_context *ctx, const char *what, cf_config c) {
  cf_memory_plan plan;
  TEST_OK(cf_model_plan(&c.model, &c.optim, c.data.batch_size, c.data.seq_len, cf_context_device(ctx), &plan));
  cf_gemm_scratch_free(ctx);
  unsigned long long before = settled_live_bytes(ctx);
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, c.data.batch_size, c.data.seq_len, &m));
  TEST_OK(cf_model_init(m, 1));
  size_t n = (size_t)c.data.batch_size * c.data.seq_len;
  int *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
  for (size_t i = 0; i < n; i++) in[i] = (int)(i * 7 % 256), tg[i] = (int)(i * 13 % 256);
  cl_mem acc;
  TEST_OK(cf_buffer_create(ctx, 4, &acc));
  TEST_OK(cf_train_step(m, in, tg, 1, 1e-3f, cf_at(acc, 0)));
  double actual = (double)settled_live_bytes(ctx) - (double)before - 4;  /* less the loss accumulator */
  const cf_memory_plan *own = cf_model_memory_plan(m);
  double err = fabs(actual - (double)plan.total) / actual;
  printf("%s: plan %.2f MiB (GEMM scratch %.2f estimated), allocated %.2f MiB (the model's %.2f): %.1f%% apart\n",
         what, plan.total / 1048576.0, plan.gemm_scratch / 1048576.0, actual / 1048576.0,
         cf_model_device_bytes(m) / 1048576.0, 100 * err);
  TEST_ASSERT(err <= 0.10, "%s: plan %zu bytes, allocated %.0f", what, plan.total, actual);
  /* the model allocates exactly the planned buffers: only the GEMM scratch is an estimate */
  TEST_ASSERT(cf_model_device_bytes(m) == plan.total - plan.gemm_scratch, "%s: model %zu bytes, plan %zu less %zu",
              what, cf_model_device_bytes(m), plan.total, plan.gemm_scratch);
  TEST_ASSERT(own->total == plan.total && own->max_batch == plan.max_batch, "%s: the model's plan differs", what);
  TEST_ASSERT(plan.fits && plan.largest <= cf_context_device(ctx)->max_alloc, "%s: plan does not fit", what);
  cf_buffer_free(acc);
  cf_model_free(m);
  free(in);
  free(tg);
}

/* A pretend device (a plan is arithmetic: nothing is allocated against it). */
static cf_device_info small_device(unsigned long long global, unsigned long long max_alloc) {
  cf_device_info d;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "a small device");
  d.global_mem = global;
  d.max_alloc = max_alloc;
  return d;
}

static void largest_batch(void) {
  cf_config c = config(4, 128, 512, 16, 64, CF_OPTIM_ADAM, 0);
  cf_device_info d = small_device(40ull << 20, 16ull << 20); /* batch 16 needs about 55 MiB */
  cf_memory_plan p, at, above;
  TEST_OK(cf_model_plan(&c.model, &c.optim, 16, 64, &d, &p));
  TEST_ASSERT(!p.fits && p.max_batch > 0 && p.max_batch < 16, "batch 16 on 40 MiB: fits %d, max_batch %d", p.fits,
              p.max_batch);
  TEST_OK(cf_model_plan(&c.model, &c.optim, p.max_batch, 64, &d, &at));
  TEST_OK(cf_model_plan(&c.model, &c.optim, p.max_batch + 1, 64, &d, &above));
  TEST_ASSERT(at.fits && !above.fits, "max_batch %d: fits %d, one more fits %d", p.max_batch, at.fits, above.fits);
  TEST_ASSERT(at.total <= d.global_mem && at.largest <= d.max_alloc, "max_batch's plan exceeds the device");
  /* one buffer too large fails the plan while the total would fit */
  cf_device_info narrow = small_device(1ull << 40, 1ull << 20);
  TEST_OK(cf_model_plan(&c.model, &c.optim, 16, 64, &narrow, &p));
  TEST_ASSERT(!p.fits && p.largest > narrow.max_alloc, "a buffer over max_alloc: fits %d", p.fits);
  /* activations per micro-batch scale with it; parameters and optimizer state do not */
  cf_memory_plan p8, p16;
  TEST_OK(cf_model_plan(&c.model, &c.optim, 8, 64, NULL, &p8));
  TEST_OK(cf_model_plan(&c.model, &c.optim, 16, 64, NULL, &p16));
  TEST_ASSERT(p8.parameters == p16.parameters && p8.optimizer == p16.optimizer && p8.optimizer == 2 * p8.parameters,
              "parameters and Adam's state independent of the batch");
  TEST_ASSERT(p16.activations > 1.9 * p8.activations && p16.activations < 2.1 * p8.activations,
              "activations %zu at 16, %zu at 8", p16.activations, p8.activations);
  TEST_ASSERT(!p8.has_device && p8.fits && p8.max_batch == 0, "a plan without a device compares nothing");
}

/* Refused before any allocation: nothing is alive after the failed create, and the message has the plan. */
static void refused(cf_context *ctx) {
  const cf_device_info *d = cf_context_device(ctx);
  cf_config c = config(2, 64, 256, 4, 32, CF_OPTIM_ADAM, 0);
  int B = 1;
  cf_memory_plan p;
  do {  /* a batch whose activations outgrow the device's largest allocation */
    B *= 2;
    TEST_OK(cf_model_plan(&c.model, &c.optim, B, 32, d, &p));
  } while (p.fits && B < 65536);
  TEST_ASSERT(!p.fits, "no batch up to 65536 outgrows the device");
  if (p.fits) return;
  unsigned long long before = cf_buffer_live_bytes();
  cf_model *m = NULL;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = cf_model_create(ctx, &c.model, &c.optim, c.seed, B, 32, &m);
  cf_set_verbosity(v);
  const char *msg = cf_last_error();
  char want[64];
  snprintf(want, sizeof want, "the largest batch_size that fits: %d", p.max_batch);
  TEST_ASSERT(st == CF_ERR_CONFIG && !m, "create at batch %d: %s", B, cf_status_str(st));
  TEST_ASSERT(strstr(msg, "memory plan") && strstr(msg, "does not fit") && strstr(msg, want), "message: %s", msg);
  TEST_ASSERT(cf_buffer_live_bytes() == before, "a refused model allocated %llu bytes", cf_buffer_live_bytes() - before);
}

int main(void) {
  cf_context *ctx = test_context();
  plan_vs_actual(ctx, "configs/warmup-comparison.yaml's model (6 layers, d 256, ff 1024, batch 16 x 64, Adam)",
                 config(6, 256, 1024, 16, 64, CF_OPTIM_ADAM, 0));
  plan_vs_actual(ctx, "4 layers, d 128, ff 512, batch 16 x 64, Adam", config(4, 128, 512, 16, 64, CF_OPTIM_ADAM, 0));
  plan_vs_actual(ctx, "2 layers, d 64, ff 256, batch 8 x 32, SGD, tied", config(2, 64, 256, 8, 32, CF_OPTIM_SGD, 1));
  largest_batch();
  refused(ctx);
  cf_context_free(ctx);
  return test_finish("test_plan");
}
