/* Optimizer self-test: one small random case (n 301) of Adam and AdamW (step 3, clipped by a
 * norm computed on the device), SGD with momentum, the global norm, segment norms and clipping,
 * against the double references. All tensors share one buffer; h holds the inputs (never
 * overwritten), o the outputs read back. */
#include <stdlib.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

enum { NP = 301, NSEG = 4, NSCRATCH = 2048 };
/* P, M, VV adjacent so one comparison covers an Adam step's three outputs; the same for SGD's P2, BUF */
enum { P = 0, M = P + NP, VV = M + NP, G = VV + NP, P2 = G + NP, BUF = P2 + NP, X = BUF + NP, NORM = X + NP,
       SEGS = NORM + 1, SCRATCH = SEGS + NSEG, TOTAL = SCRATCH + NSCRATCH };

/* One clipped Adam (or AdamW) step from the state in h; P, M, VV on the device are reset first. */
static cf_status adam_row(cf_context *ctx, cf_selftest *t, cl_mem d, const float *h, float *o, double *ref,
                          float norm, int decoupled) {
  cf_adam hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-8f, .weight_decay = 0.1f,
                .decoupled = decoupled, .step = 3};
  cf_status st;
  if ((st = cf_write(ctx, cf_at(d, P), h + P, 3 * NP))) return st;
  double t0 = cf_now();
  if ((st = cf_adam_update(ctx, cf_at(d, P), cf_at(d, G), cf_at(d, M), cf_at(d, VV), NP, &hp, cf_at(d, NORM),
                           0.5f * norm)) ||
      (st = cf_read(ctx, cf_at(d, P), o + P, 3 * NP)))
    return st;
  double t1 = cf_now();
  ref_adam_update(ref + P, ref + M, ref + VV, h + P, h + G, h + M, h + VV, NP, &hp, &norm, 0.5f * norm);
  cf_selftest_check(t, decoupled ? "adamw_update" : "adam_update", o + P, ref + P, 3 * NP, 1e-5, 1e-4,
                    1e3 * (t1 - t0));
  return CF_OK;
}

cf_status cf_selftest_optimizer(cf_context *ctx, cf_selftest *t) {
  float *h = malloc(TOTAL * sizeof *h), *o = malloc(TOTAL * sizeof *o);
  double *ref = malloc(TOTAL * sizeof *ref);
  cl_mem d = NULL;
  cf_status st = CF_OK;
  if (!h || !o || !ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  unsigned long long s = 0x0971312e;
  for (int i = 0; i < TOTAL; i++) h[i] = cf_selftest_random(&s);
  for (int i = VV; i < VV + NP; i++) h[i] = 0.01f * (h[i] + 1.0f);  /* second moments are >= 0 */
  size_t offs[NSEG] = {0, 1, 40, 300}, counts[NSEG] = {1, 39, 260, 1};
  if (cf_segment_norms_scratch_floats(counts, NSEG) > NSCRATCH || cf_norm_scratch_floats(NP) > NSCRATCH) {
    st = CF_FAIL(CF_ERR_INVALID_ARG, "selftest_optimizer: scratch too small");
    goto done;
  }
  if ((st = cf_buffer_create(ctx, TOTAL * sizeof(float), &d)) || (st = cf_write(ctx, cf_at(d, 0), h, TOTAL))) goto done;

  /* the global norm of G, which the clipped steps below then read on the device */
  double t0 = cf_now();
  if ((st = cf_global_norm(ctx, cf_at(d, NORM), cf_at(d, G), NP, cf_at(d, SCRATCH))) ||
      (st = cf_read(ctx, cf_at(d, NORM), o + NORM, 1)))
    goto done;
  double t1 = cf_now();
  float norm = o[NORM];
  ref[NORM] = ref_global_norm(h + G, NP);
  cf_selftest_check(t, "global_norm", o + NORM, ref + NORM, 1, 1e-6, 1e-5, 1e3 * (t1 - t0));

  if ((st = cf_segment_norms(ctx, cf_at(d, SEGS), cf_at(d, G), offs, counts, NSEG, cf_at(d, SCRATCH))) ||
      (st = cf_read(ctx, cf_at(d, SEGS), o + SEGS, NSEG)))
    goto done;
  double t2 = cf_now();
  ref_segment_norms(ref + SEGS, h + G, offs, counts, NSEG);
  cf_selftest_check(t, "segment_norms", o + SEGS, ref + SEGS, NSEG, 1e-6, 1e-5, 1e3 * (t2 - t1));

  if ((st = adam_row(ctx, t, d, h, o, ref, norm, 0)) || (st = adam_row(ctx, t, d, h, o, ref, norm, 1))) goto done;

  double t3 = cf_now();
  if ((st = cf_sgd_update(ctx, cf_at(d, P2), cf_at(d, G), cf_at(d, BUF), NP, 0.1f, 0.9f, 0.01f, cf_at(d, NORM),
                          0.5f * norm)) ||
      (st = cf_read(ctx, cf_at(d, P2), o + P2, 2 * NP)))
    goto done;
  double t4 = cf_now();
  ref_sgd_update(ref + P2, ref + BUF, h + P2, h + G, h + BUF, NP, 0.1f, 0.9f, 0.01f, &norm, 0.5f * norm);
  cf_selftest_check(t, "sgd_update", o + P2, ref + P2, 2 * NP, 1e-5, 1e-4, 1e3 * (t4 - t3));

  if ((st = cf_clip_by_norm(ctx, cf_at(d, X), NP, cf_at(d, NORM), 0.5f * norm)) ||
      (st = cf_read(ctx, cf_at(d, X), o + X, NP)))
    goto done;
  double t5 = cf_now();
  ref_clip_by_norm(ref + X, h + X, NP, norm, 0.5f * norm);
  cf_selftest_check(t, "clip_by_norm", o + X, ref + X, NP, 1e-5, 1e-4, 1e3 * (t5 - t4));
done:
  cf_buffer_free(d);
  free(h);
  free(o);
  free(ref);
  return st;
}
