/* cf_model_on_grads_ready, which data parallelism uses to sum gradients while the backward goes on:
 * every range the hook is told must already hold its final values (read the moment it is told, it
 * equals the gradients at the end of the backward, bit for bit), the ranges must tile the flat
 * buffer from its end to its start, and with accumulation only the last micro-batch tells them.
 * Both norm placements, tied and untied output, final LayerNorm on and off, 1 and 2 micro-batches. */
#include <math.h>
#include <string.h>
#include "clformer/model.h"
#include "testutil.h"

typedef struct seen {
  cf_context *ctx;
  float *snap;           /* each range as it was when told (the rest NaN) */
  size_t last_from, flat;
  int calls, bad_order;
  float loss;
} seen;

static cf_status record(void *user, const cf_grads_ready *r) {
  seen *s = user;
  if (r->to != s->last_from || r->from >= r->to) s->bad_order++;
  s->last_from = r->from;
  s->calls++;
  cf_status st = cf_read(s->ctx, cf_at(r->grads, r->from), s->snap + r->from, r->to - r->from);  /* blocking: now */
  return st == CF_OK ? cf_read(s->ctx, r->step_loss, &s->loss, 1) : st;
}

static void variant(cf_context *ctx, int norm, int tie, int final_norm, int parts) {
  cf_config c;
  test_model_config(&c, 3, 16, 2, 24);
  c.model.norm = norm;
  c.model.tie_embeddings = tie;
  c.model.final_norm = final_norm;
  c.model.positions = CF_POS_LEARNED;
  c.model.dropout = 0.1;
  int B = 2, T = 6, N = B * T;
  cf_model *m = test_model(ctx, &c, B, T, 3);
  size_t P = cf_model_flat_floats(m);
  seen s = {ctx, test_falloc(P), P, P, 0, 0, 0};
  for (size_t i = 0; i < P; i++) s.snap[i] = NAN;
  test_rng r = test_rng_seed(9);
  int in[2 * 12], tg[2 * 12];
  for (int i = 0; i < 2 * N; i++) { in[i] = (int)(test_uniform(&r) * 50) + 40; tg[i] = (int)(test_uniform(&r) * 50) + 40; }
  cf_model_on_grads_ready(m, record, &s);
  TEST_OK(cf_model_zero_grads(m));
  int early = 0;
  for (int k = 0; k < parts; k++) {
    TEST_OK(cf_model_forward_part(m, in + k * N, tg + k * N, 1, k, parts, 1));
    TEST_OK(cf_model_backward_add(m));
    if (k < parts - 1) early += s.calls;
  }
  cf_model_on_grads_ready(m, NULL, NULL);
  float *final = test_falloc(P), loss;
  TEST_OK(cf_model_read(m, 1, final));
  TEST_OK(cf_model_read_step_loss(m, &loss));
  const char *what = norm == CF_NORM_PRE ? "pre" : "post";
  TEST_ASSERT(early == 0, "%s tie %d: the hook was told %d ranges before the last micro-batch", what, tie, early);
  TEST_ASSERT(s.calls >= 3 + 1 && s.bad_order == 0 && s.last_from == 0,
              "%s tie %d final_norm %d parts %d: %d ranges, %d out of order, the last from %zu", what, tie, final_norm,
              parts, s.calls, s.bad_order, s.last_from);
  size_t differ = 0, first = P;
  for (size_t i = 0; i < P; i++)
    if (memcmp(&s.snap[i], &final[i], sizeof *final) != 0 && differ++ == 0) first = i;
  TEST_ASSERT(differ == 0, "%s tie %d final_norm %d parts %d: %zu gradients told final changed after (first: %zu)",
              what, tie, final_norm, parts, differ, first);
  TEST_ASSERT(memcmp(&s.loss, &loss, sizeof loss) == 0, "the step loss told %g is not the step's %g", s.loss, loss);
  free(final);
  free(s.snap);
  cf_model_free(m);
}

int main(void) {
  cf_context *ctx = test_context();
  for (int norm = 0; norm < 2; norm++)
    for (int tie = 0; tie < 2; tie++)
      for (int fn = CF_FINAL_NORM_OFF; fn <= CF_FINAL_NORM_ON; fn++)
        for (int parts = 1; parts <= 2; parts++) variant(ctx, norm ? CF_NORM_PRE : CF_NORM_POST, tie, fn, parts);
  cf_context_free(ctx);
  return test_finish("test_grads_ready");
}
