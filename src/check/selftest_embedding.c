/* Embedding self-test: one small random case (B 2, T 5, C 13, V 11, repeated tokens) of the
 * forward with learned and with sinusoidal positions and of the backward (dwte and dwpe, added
 * into nonzero gradients), against the double references. All tensors share one buffer. */
#include <math.h>
#include <stdlib.h>
#include "clformer/runtime.h"
#include "clformer/ref.h"
#include "clformer/ops.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

enum { B = 2, T = 5, TMAX = 6, C = 13, V = 11, N = B * T };
/* offsets in the device buffer and in the host mirror h (floats; tokens stored as int bits) */
enum { TOK = 0, WTE = TOK + N, WPE = WTE + V * C, DOUT = WPE + TMAX * C, OUT = DOUT + N * C, OUT2 = OUT + N * C,
       DWTE = OUT2 + N * C, DWPE = DWTE + V * C, TOTAL = DWPE + TMAX * C };

cf_status cf_selftest_embedding(cf_context *ctx, cf_selftest *t) {
  float *h = malloc(TOTAL * sizeof *h);
  double *ref = malloc(TOTAL * sizeof *ref);
  cl_mem d = NULL;
  cf_status st = CF_OK;
  if (!h || !ref) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  int tok[N] = {3, 7, 3, 0, 10, 3, 3, 9, 0, 7};  /* repeats within and across sequences */
  unsigned long long s = 0xe3bedd1a;
  for (int i = 0; i < TOTAL; i++) h[i] = cf_selftest_random(&s);
  float scale = sqrtf((float)C);
  if ((st = cf_buffer_create(ctx, TOTAL * sizeof(float), &d)) || (st = cf_write(ctx, cf_at(d, 0), h, TOTAL)) ||
      (st = cf_write(ctx, cf_at(d, TOK), tok, N)))
    goto done;

  double t0 = cf_now();
  if ((st = cf_embedding_forward(ctx, cf_at(d, OUT), cf_at(d, TOK), cf_at(d, WTE), cf_at(d, WPE), B, T, C, V, scale)) ||
      (st = cf_read(ctx, cf_at(d, OUT), h + OUT, N * C)))
    goto done;
  double t1 = cf_now();
  if ((st = cf_embedding_forward(ctx, cf_at(d, OUT2), cf_at(d, TOK), cf_at(d, WTE), cf_at(NULL, 0), B, T, C, V,
                                 scale)) ||
      (st = cf_read(ctx, cf_at(d, OUT2), h + OUT2, N * C)))
    goto done;
  double t2 = cf_now();
  if ((st = cf_embedding_backward(ctx, cf_at(d, DWTE), cf_at(d, DWPE), cf_at(d, DOUT), cf_at(d, TOK), B, T, C, V,
                                  scale)))
    goto done;
  for (int i = DWTE; i < TOTAL; i++) ref[i] = h[i];  /* the gradients before the += */
  if ((st = cf_read(ctx, cf_at(d, DWTE), h + DWTE, TOTAL - DWTE))) goto done;
  double t3 = cf_now();

  ref_embedding_forward(ref + OUT, tok, h + WTE, h + WPE, B, T, C, V, scale);
  ref_embedding_forward(ref + OUT2, tok, h + WTE, NULL, B, T, C, V, scale);
  ref_embedding_backward(ref + DWTE, ref + DWPE, h + DOUT, tok, B, T, C, V, scale);
  cf_selftest_check(t, "embedding_forward", h + OUT, ref + OUT, N * C, 1e-5, 1e-4, 1e3 * (t1 - t0));
  cf_selftest_check(t, "embedding_forward_sinusoidal", h + OUT2, ref + OUT2, N * C, 1e-5, 1e-4, 1e3 * (t2 - t1));
  cf_selftest_check(t, "embedding_backward", h + DWTE, ref + DWTE, TOTAL - DWTE, 1e-5, 1e-4, 1e3 * (t3 - t2));
done:
  cf_buffer_free(d);
  free(h);
  free(ref);
  return st;
}
