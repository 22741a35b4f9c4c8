/* The divergence watch: each training step the device checks the loss and gradient norm
 * (cl/optimizer.cl: divergence_watch) and, at the first bad step only, which tensors' gradients
 * are not finite (nonfinite_segments). The verdict comes back by a non-blocking read per step, looked
 * at one step late, so the loop never waits for the device to learn that all is well. */
#include <math.h>
#include <stdlib.h>
#include "clformer/ops.h"
#include "model/model_internal.h"
#include "runtime/runtime.h"

#define A(off) cf_arena_at(&m->acts, (off))

cf_status cf_model_watch_setup(cf_model *m) {
  size_t *offs = malloc((size_t)m->nviews * sizeof *offs), *counts = malloc((size_t)m->nviews * sizeof *counts);
  uint32_t *table = malloc(2 * (size_t)m->nviews * sizeof *table);
  cf_status st = !offs || !counts || !table ? CF_FAIL(CF_ERR_NO_MEMORY, "out of memory") : CF_OK;
  for (int i = 0; st == CF_OK && i < m->nviews; i++) offs[i] = m->views[i].off, counts[i] = m->views[i].numel;
  if (st == CF_OK) st = cf_segment_table(offs, counts, m->nviews, table);
  if (st == CF_OK) st = cf_write(m->ctx, A(m->watch_table), table, 2 * (size_t)m->nviews);
  if (st == CF_OK) st = cf_fill(m->ctx, A(m->watch_state), 0.0f, 3);
  free(offs);
  free(counts);
  free(table);
  m->watch.verdict.tensor = -1;
  return st;
}

void cf_model_watch_release(cf_model *m) {
  for (int k = 0; k < 2; k++)
    if (m->watch.ev[k]) {
      clWaitForEvents(1, &m->watch.ev[k]);
      CF_RELEASE(clReleaseEvent, m->watch.ev[k]);
    }
}

/* The view backward reaches first among those whose flag is set: the output matrix, then the
 * views from the last (nearest the output) to the first. */
static void name_tensor(const cf_model *m, const float *flags, cf_divergence *v) {
  v->tensor = -1;
  v->tensors = 0;
  for (int i = 0; i < m->nviews; i++) v->tensors += flags[i] != 0;
  for (int i = 0; i < m->nviews && v->tensor < 0; i++)
    if (m->views[i].off == m->out_w && flags[i] != 0) v->tensor = i;
  for (int i = m->nviews - 1; i >= 0 && v->tensor < 0; i--)
    if (flags[i] != 0) v->tensor = i;
}

/* Wait for slot k's read, if one is pending, and take its verdict (the first bad one sticks). */
static cf_status look_at(cf_model *m, int k) {
  cf_watch_reads *w = &m->watch;
  if (!w->ev[k]) return CF_OK;
  CF_CHECK(clWaitForEvents(1, &w->ev[k]));
  CF_RELEASE(clReleaseEvent, w->ev[k]);
  w->ev[k] = NULL;
  if (w->verdict.step || w->host[k][0] == 0) return CF_OK;
  /* 1: this step was the first bad one; 2 (a verdict skipped, which the slot order rules out):
   * bad at this step or before, named as this step all the same */
  w->verdict.step = w->step[k];
  w->verdict.loss = w->host[k][1];
  w->verdict.grad_norm = w->host[k][2];
  float *flags = malloc((size_t)m->nviews * sizeof *flags);
  if (!flags) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = cf_read(m->ctx, A(m->watch_flags), flags, (size_t)m->nviews);
  if (st == CF_OK) name_tensor(m, flags, &w->verdict);
  free(flags);
  return st;
}

cf_status cf_model_watch(cf_model *m, int step, float loss_limit) {
  cf_watch_reads *w = &m->watch;
  int k = w->next;
  CF_TRY(look_at(m, k));  /* the slot's previous verdict, two steps old: long arrived */
  CF_TRY(cf_divergence_watch(m->ctx, A(m->watch_state), cf_model_step_loss_at(m), A(m->grad_norm), loss_limit));
  CF_TRY(cf_nonfinite_segments(m->ctx, A(m->watch_flags), A(m->watch_state), cf_at(m->grads, 0), A(m->watch_table),
                               m->nviews));
  cf_mem state = A(m->watch_state);
  CF_CHECK(clEnqueueReadBuffer(cf_context_queue(m->ctx), state.buf, CL_FALSE, state.off * 4, sizeof w->host[k],
                               w->host[k], 0, NULL, &w->ev[k]));
  w->step[k] = step;
  w->next ^= 1;
  return CF_OK;
}

cf_status cf_model_watch_poll(cf_model *m, int wait_latest, cf_divergence *out) {
  int older = m->watch.next, latest = older ^ 1;  /* next is the slot written two steps ago */
  CF_TRY(look_at(m, older));
  if (wait_latest) CF_TRY(look_at(m, latest));
  *out = m->watch.verdict;
  return CF_OK;
}
