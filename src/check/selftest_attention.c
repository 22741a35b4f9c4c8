/* Self-test of the attention family: one small random case with a key padding mask and dropout
 * (B 2, T 7, C 12, NH 3), forward (out) and backward (dinp) against the double reference. */
#include <stdlib.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "clformer/runtime.h"
#include "clformer/check.h"
#include "runtime/runtime.h"

cf_status cf_selftest_attention(cf_context *ctx, cf_selftest *t) {
  enum { B = 2, T = 7, C = 12, NH = 3 };
  const size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
  const size_t nscr = cf_attention_scratch_floats(B, T, C, NH, 1);
  cf_dropout drop = {0.1f, 17u, 1u, 2u};
  int mask[B * T];
  for (int i = 0; i < B * T; i++) mask[i] = !(i == T - 1 || i == T || i == T + 1);  /* right pad, left pad */

  cf_status st = CF_ERR_NO_MEMORY;
  float *inp = malloc(nin * sizeof *inp), *dout = malloc(nout * sizeof *dout);
  float *out = malloc(nout * sizeof *out), *dinp = malloc(nin * sizeof *dinp);
  double *ref_out = malloc(nout * sizeof *ref_out), *ref_dinp = malloc(nin * sizeof *ref_dinp);
  cl_mem d_inp = NULL, d_dout = NULL, d_mask = NULL, d_out = NULL, d_qkvp = NULL, d_att = NULL, d_scr = NULL,
         d_dinp = NULL;
  if (!inp || !dout || !out || !dinp || !ref_out || !ref_dinp) {
    st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    goto done;
  }
  unsigned long long s = 0xa77e7710;
  for (size_t i = 0; i < nin; i++) inp[i] = 1.5f * cf_selftest_random(&s);
  for (size_t i = 0; i < nout; i++) dout[i] = cf_selftest_random(&s);

  if ((st = cf_buffer_create(ctx, nin * 4, &d_inp)) || (st = cf_buffer_create(ctx, nout * 4, &d_dout)) ||
      (st = cf_buffer_create(ctx, sizeof mask, &d_mask)) || (st = cf_buffer_create(ctx, nout * 4, &d_out)) ||
      (st = cf_buffer_create(ctx, nin * 4, &d_qkvp)) || (st = cf_buffer_create(ctx, natt * 4, &d_att)) ||
      (st = cf_buffer_create(ctx, nscr * 4, &d_scr)) || (st = cf_buffer_create(ctx, nin * 4, &d_dinp)))
    goto done;
  if ((st = cf_write(ctx, cf_at(d_inp, 0), inp, nin)) || (st = cf_write(ctx, cf_at(d_dout, 0), dout, nout)) ||
      (st = cf_write(ctx, cf_at(d_mask, 0), mask, B * T)))
    goto done;

  double t0 = cf_now();
  if ((st = cf_attention_forward(ctx, cf_at(d_out, 0), cf_at(d_qkvp, 0), cf_at(d_att, 0), cf_at(d_scr, 0),
                                 cf_at(d_inp, 0), cf_at(d_mask, 0), B, T, C, NH, drop)) ||
      (st = cf_read(ctx, cf_at(d_out, 0), out, nout)))
    goto done;
  double t1 = cf_now();
  if ((st = cf_attention_backward(ctx, cf_at(d_dinp, 0), cf_at(d_scr, 0), cf_at(d_dout, 0), cf_at(d_qkvp, 0),
                                  cf_at(d_att, 0), cf_at(d_mask, 0), B, T, C, NH, drop)) ||
      (st = cf_read(ctx, cf_at(d_dinp, 0), dinp, nin)))
    goto done;
  double t2 = cf_now();

  ref_attention_forward(ref_out, NULL, inp, mask, B, T, C, NH, drop);
  ref_attention_backward(ref_dinp, dout, inp, mask, B, T, C, NH, drop);
  cf_selftest_check(t, "attention_forward", out, ref_out, nout, 1e-5, 1e-4, 1e3 * (t1 - t0));
  cf_selftest_check(t, "attention_backward", dinp, ref_dinp, nin, 1e-5, 1e-4, 1e3 * (t2 - t1));
  st = CF_OK;
done:
  cf_buffer_free(d_inp); cf_buffer_free(d_dout); cf_buffer_free(d_mask); cf_buffer_free(d_out);
  cf_buffer_free(d_qkvp); cf_buffer_free(d_att); cf_buffer_free(d_scr); cf_buffer_free(d_dinp);
  free(inp); free(dout); free(out); free(dinp); free(ref_out); free(ref_dinp);
  return st;
}
