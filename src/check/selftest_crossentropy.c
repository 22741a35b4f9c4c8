/* Cross-entropy self-test: one small random case (N 7, V 37, label smoothing 0.1, one ignored
 * row) of the forward (per-row losses and the mean), the backward and the two in one launch,
 * against the double references. All tensors share one buffer. */
#include <stdlib.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

enum { N = 7, V = 37, IGNORE = -100 };
enum { TGT = 0, LOGITS = TGT + N, LOSSES = LOGITS + N * V, LOSS = LOSSES + N, DLOGITS = LOSS + 1,
       FLOSSES = DLOGITS + N * V, FLOSS = FLOSSES + N, FDLOGITS = FLOSS + 1, TOTAL = FDLOGITS + N * V };

cf_status cf_selftest_crossentropy(cf_context *ctx, cf_selftest *t) {
  float *h = malloc(TOTAL * sizeof *h);
  double *ref = malloc(TOTAL * sizeof *ref);
  cl_mem d = NULL;
  cf_status st = CF_OK;
  if (!h || !ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  int tgt[N] = {5, 36, IGNORE, 0, 17, 5, 22};
  unsigned long long s = 0xc055e47;
  for (int i = 0; i < TOTAL; i++) h[i] = 5.0f * cf_selftest_random(&s);
  const float eps = 0.1f;
  int count = cf_crossentropy_count(tgt, N, IGNORE);
  if ((st = cf_buffer_create(ctx, TOTAL * sizeof(float), &d)) || (st = cf_write(ctx, cf_at(d, 0), h, TOTAL)) ||
      (st = cf_write(ctx, cf_at(d, TGT), tgt, N)))
    goto done;

  double t0 = cf_now();
  if ((st = cf_crossentropy_forward(ctx, cf_at(d, LOSS), cf_at(d, LOSSES), cf_at(d, LOGITS), cf_at(d, TGT), N, V, eps,
                                    IGNORE)) ||
      (st = cf_read(ctx, cf_at(d, LOSSES), h + LOSSES, N + 1)))
    goto done;
  double t1 = cf_now();
  if ((st = cf_crossentropy_backward(ctx, cf_at(d, DLOGITS), cf_at(d, LOGITS), cf_at(d, TGT), N, V, eps, IGNORE,
                                     1.0f / count)) ||
      (st = cf_read(ctx, cf_at(d, DLOGITS), h + DLOGITS, N * V)))
    goto done;
  double t2 = cf_now();
  if ((st = cf_crossentropy_forward_backward(ctx, cf_at(d, FLOSS), cf_at(d, FLOSSES), cf_at(d, FDLOGITS),
                                             cf_at(d, LOGITS), cf_at(d, TGT), N, V, eps, IGNORE, 1.0f / count)) ||
      (st = cf_read(ctx, cf_at(d, FLOSSES), h + FLOSSES, N + 1 + N * V)))
    goto done;
  double t3 = cf_now();

  ref_crossentropy_forward(ref + LOSS, ref + LOSSES, h + LOGITS, tgt, N, V, eps, IGNORE);
  ref_crossentropy_backward(ref + DLOGITS, h + LOGITS, tgt, N, V, eps, IGNORE, 1.0 / count);
  cf_selftest_check(t, "crossentropy_forward", h + LOSSES, ref + LOSSES, N + 1, 1e-5, 1e-4, 1e3 * (t1 - t0));
  cf_selftest_check(t, "crossentropy_backward", h + DLOGITS, ref + DLOGITS, N * V, 1e-5, 1e-4, 1e3 * (t2 - t1));
  for (int i = 0; i < N + 1 + N * V; i++) ref[FLOSSES + i] = ref[LOSSES + i];  /* the same references */
  cf_selftest_check(t, "crossentropy_forward_backward", h + FLOSSES, ref + FLOSSES, N + 1 + N * V, 1e-5, 1e-4,
                    1e3 * (t3 - t2));
done:
  cf_buffer_free(d);
  free(h);
  free(ref);
  return st;
}
