/* Causal multi-head self-attention: forward (out, att) and backward (dinp) against the
 * double reference computed straight from the fused (B, T, 3C) layout, over shapes that are not
 * multiples of anything, NH = 1, T = 1, C = 1, a key padding mask (with fully masked rows),
 * dropout, nonzero buffer offsets and a large case; the reference backward against central
 * finite differences of the reference forward; bit-identical reruns; argument checks. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "clformer/runtime.h"
#include "base/base.h"  /* cf_now */
#include "testutil.h"

#define ATOL 1e-5
#define RTOL 1e-4

typedef struct tcase {
  const char *name;
  int B, T, C, NH;
  int mask;      /* use a key padding mask */
  float p;       /* attention dropout */
  size_t off;    /* element offset of every device tensor in its buffer */
} tcase;

/* A key mask with right padding on even batches and left padding on odd ones (so the first
 * query rows of odd batches see no key at all), plus a hole now and then. */
static void make_mask(test_rng *r, int *mask, int B, int T) {
  for (int b = 0; b < B; b++) {
    int pad = (int)(test_uniform(r) * (T / 2 + 1));
    for (int t = 0; t < T; t++) {
      int valid = (b % 2 == 0) ? t < T - pad : t >= pad;
      if (T > 4 && test_uniform(r) < 0.1) valid = 0;
      mask[b * T + t] = valid;
    }
  }
}

static cl_mem int_buffer(cf_context *ctx, const int *host, size_t off, size_t n) {
  cl_mem b;
  TEST_OK(cf_buffer_create(ctx, (off + n) * sizeof(int), &b));
  TEST_OK(cf_write(ctx, cf_at(b, off), host, n));
  return b;
}

static cl_mem poisoned(cf_context *ctx, size_t off, size_t n) { return test_buffer(ctx, NULL, off + n); }

static void run_case(cf_context *ctx, test_rng *r, tcase c) {
  int B = c.B, T = c.T, C = c.C, NH = c.NH;
  size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T, off = c.off;
  size_t nscr = cf_attention_scratch_floats(B, T, C, NH, c.p > 0);
  cf_dropout drop = {c.p, 1234u, 7u, 42u, 0};
  printf("-- %s: B %d, T %d, C %d, NH %d, mask %d, p %g, offset %zu\n", c.name, B, T, C, NH, c.mask, (double)c.p, off);

  float *inp = malloc(nin * sizeof *inp), *dout = malloc(nout * sizeof *dout);
  int *mask = c.mask ? malloc((size_t)B * T * sizeof *mask) : NULL;
  test_fill_uniform(r, inp, nin, -1.5f, 1.5f);
  test_fill_uniform(r, dout, nout, -1.0f, 1.0f);
  if (mask) make_mask(r, mask, B, T);

  cl_mem d_inp = poisoned(ctx, off, nin), d_dout = poisoned(ctx, off, nout);
  TEST_OK(cf_write(ctx, cf_at(d_inp, off), inp, nin));
  TEST_OK(cf_write(ctx, cf_at(d_dout, off), dout, nout));
  cl_mem d_mask = mask ? int_buffer(ctx, mask, off, (size_t)B * T) : NULL;
  cl_mem d_out = poisoned(ctx, off, nout), d_att = poisoned(ctx, off, natt);
  cl_mem d_scr = poisoned(ctx, off, nscr), d_dinp = poisoned(ctx, off, nin);
  cf_mem m_out = cf_at(d_out, off), m_att = cf_at(d_att, off);
  cf_mem m_scr = cf_at(d_scr, off), m_dinp = cf_at(d_dinp, off), m_mask = cf_at(d_mask, d_mask ? off : 0);

  /* ---- forward ---- */
  double t0 = cf_now();
  TEST_OK(cf_attention_forward(ctx, m_out, m_att, m_scr, cf_at(d_inp, off), m_mask, B, T, C, NH, drop));
  TEST_OK(cf_context_finish(ctx));
  double t_fwd = cf_now() - t0;
  float *out = test_read(ctx, m_out, nout), *att = test_read(ctx, m_att, natt);

  double *ref_out = malloc(nout * sizeof *ref_out), *ref_att = malloc(natt * sizeof *ref_att);
  ref_attention_forward(ref_out, ref_att, inp, mask, B, T, C, NH, drop);
  char what[128];
  snprintf(what, sizeof what, "%s forward out", c.name);
  test_compare(what, out, ref_out, nout, ATOL, RTOL);
  snprintf(what, sizeof what, "%s forward att", c.name);
  test_compare(what, att, ref_att, natt, ATOL, RTOL);


  /* every masked entry (future keys, padded keys, rows without keys) exactly 0, written */
  size_t nonzero = 0;
  for (size_t i = 0; i < natt; i++)
    if (ref_att[i] == 0.0 && att[i] != 0.0f) nonzero++;
  TEST_ASSERT(nonzero == 0, "%s: %zu masked attention entries are not exactly 0", c.name, nonzero);

  /* ---- backward ---- */
  t0 = cf_now();
  TEST_OK(cf_attention_backward(ctx, m_dinp, m_scr, cf_at(d_dout, off), cf_at(d_inp, off), m_att, m_mask, B, T, C, NH,
                                drop));
  TEST_OK(cf_context_finish(ctx));
  double t_bwd = cf_now() - t0;
  float *dinp = test_read(ctx, m_dinp, nin);
  /* q, k and v are read where they lie, in the forward and again in the backward: untouched */
  float *inp_after = test_read(ctx, cf_at(d_inp, off), nin);
  snprintf(what, sizeof what, "%s inp after forward and backward", c.name);
  test_compare_f(what, inp_after, inp, nin, 0.0, 0.0);
  free(inp_after);
  double *ref_dinp = malloc(nin * sizeof *ref_dinp);
  ref_attention_backward(ref_dinp, dout, inp, mask, B, T, C, NH, drop);
  snprintf(what, sizeof what, "%s backward dinp", c.name);
  test_compare(what, dinp, ref_dinp, nin, ATOL, RTOL);
  printf("   device forward %.2f ms, backward %.2f ms\n", 1e3 * t_fwd, 1e3 * t_bwd);

  /* ---- determinism: everything again from poisoned outputs, bit-identical ---- */
  test_poison(ctx, m_out, nout);
  test_poison(ctx, m_att, natt);
  test_poison(ctx, m_scr, nscr);
  TEST_OK(cf_attention_forward(ctx, m_out, m_att, m_scr, cf_at(d_inp, off), m_mask, B, T, C, NH, drop));
  float *out2 = test_read(ctx, m_out, nout), *att2 = test_read(ctx, m_att, natt);
  TEST_ASSERT(!memcmp(out, out2, nout * sizeof *out), "%s: forward out differs between two runs", c.name);
  TEST_ASSERT(!memcmp(att, att2, natt * sizeof *att), "%s: forward att differs between two runs", c.name);
  test_poison(ctx, m_dinp, nin);
  test_poison(ctx, m_scr, nscr);
  TEST_OK(cf_attention_backward(ctx, m_dinp, m_scr, cf_at(d_dout, off), cf_at(d_inp, off), m_att, m_mask, B, T, C, NH,
                                drop));
  float *dinp2 = test_read(ctx, m_dinp, nin);
  TEST_ASSERT(!memcmp(dinp, dinp2, nin * sizeof *dinp), "%s: backward dinp differs between two runs", c.name);

  free(inp); free(dout); free(mask); free(out); free(att); free(ref_out); free(ref_att);
  free(dinp); free(ref_dinp); free(out2); free(att2); free(dinp2);
  cf_buffer_free(d_inp); cf_buffer_free(d_dout); cf_buffer_free(d_mask); cf_buffer_free(d_out);
  cf_buffer_free(d_att); cf_buffer_free(d_scr); cf_buffer_free(d_dinp);
}

/* The reference backward against central differences of the reference forward, with
 * loss = sum(out * w). Inputs are multiples of 2^-10 in [-1, 1] so that x +- h, h = 2^-16, is
 * exact in float (the reference takes float inputs, as the device does); the difference
 * quotient is then accurate to about 1e-9 (O(h^2) truncation plus double rounding / h). */
static void check_finite_differences(test_rng *r, const char *name, int B, int T, int C, int NH, int use_mask,
                                     float p) {
  size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
  cf_dropout drop = {p, 99u, 3u, 5u, 0};
  float *inp = malloc(nin * sizeof *inp), *w = malloc(nout * sizeof *w);
  int *mask = use_mask ? malloc((size_t)B * T * sizeof *mask) : NULL;
  for (size_t i = 0; i < nin; i++) inp[i] = (float)ldexp(floor(test_uniform(r) * 2048.0) - 1024.0, -10);
  test_fill_uniform(r, w, nout, -1.0f, 1.0f);
  if (mask) make_mask(r, mask, B, T);
  double *grad = malloc(nin * sizeof *grad), *fd = malloc(nin * sizeof *fd), *o = malloc(nout * sizeof *o);
  ref_attention_backward(grad, w, inp, mask, B, T, C, NH, drop);
  const double h = ldexp(1.0, -16);
  double nonzero = 0;
  for (size_t i = 0; i < nin; i++) {
    float x = inp[i];
    double loss[2];
    for (int side = 0; side < 2; side++) {
      inp[i] = (float)(x + (side ? -h : h));
      ref_attention_forward(o, NULL, inp, mask, B, T, C, NH, drop);
      loss[side] = 0;
      for (size_t j = 0; j < nout; j++) loss[side] += o[j] * w[j];
    }
    inp[i] = x;
    fd[i] = (loss[0] - loss[1]) / (2 * h);
    nonzero = fmax(nonzero, fabs(fd[i]));
  }
  int bad = 0;
  double max_err = 0;
  for (size_t i = 0; i < nin; i++) {
    double err = fabs(grad[i] - fd[i]);
    max_err = fmax(max_err, err);
    if (!(err <= 1e-8 + 1e-6 * fabs(fd[i]))) {
      if (bad++ < 5) fprintf(stderr, "  %s dinp[%zu]: reference %.12g, finite difference %.12g\n", name, i, grad[i], fd[i]);
    }
  }
  TEST_ASSERT(bad == 0, "%s: %d of %zu reference gradients disagree with finite differences", name, bad, nin);
  TEST_ASSERT(nonzero > 1e-3, "%s: finite differences all vanish (the check would be vacuous)", name);
  if (!bad) printf("ok   %s: reference backward vs finite differences, %zu inputs, largest error %.3g\n", name, nin, max_err);
  free(inp); free(w); free(mask); free(grad); free(fd); free(o);
}

static void check_bad_args(cf_context *ctx) {
  cl_mem b = test_buffer(ctx, NULL, 64);
  cf_mem m = cf_at(b, 0), none = {0};
  cf_dropout ok = {0}, bad_p = {1.0f, 0, 0, 0, 0};
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_attention_forward(ctx, m, m, m, m, none, 1, 2, 6, 4, ok) == CF_ERR_INVALID_ARG, "C %% NH != 0");
  TEST_ASSERT(cf_attention_forward(ctx, m, m, m, m, none, 1, 0, 4, 1, ok) == CF_ERR_INVALID_ARG, "T = 0");
  TEST_ASSERT(cf_attention_forward(ctx, m, m, m, m, none, 1, 2, 4, 1, bad_p) == CF_ERR_INVALID_ARG, "p = 1");
  TEST_ASSERT(cf_attention_backward(ctx, m, m, m, m, m, none, 1, 2, 6, 4, ok) == CF_ERR_INVALID_ARG, "C %% NH != 0");
  cf_set_verbosity(v);
  cf_clear_error();
  cf_buffer_free(b);
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(20240611);
  const tcase cases[] = {
      {"odd", 2, 7, 12, 3, 0, 0.0f, 0},
      {"nh1", 1, 5, 6, 1, 0, 0.0f, 0},       /* HS = 6: products whose N is not a multiple of 64 */
      {"t1", 3, 1, 16, 4, 0, 0.0f, 0},
      {"c1", 2, 3, 1, 1, 0, 0.0f, 0},
      {"mask", 3, 9, 12, 2, 1, 0.0f, 0},
      {"dropout", 2, 13, 16, 4, 0, 0.1f, 0},
      {"mask+dropout+offset", 2, 11, 20, 5, 1, 0.25f, 3},
      {"long rows", 1, 300, 64, 2, 1, 0.1f, 0},  /* T > CF_WG: each work-item loops over a row */
      {"large", 4, 128, 256, 8, 0, 0.0f, 0},
      {"large+mask+dropout", 4, 128, 256, 8, 1, 0.1f, 0},
      /* heads of 64: the products our strip kernels take whole, skipping their causal triangles
       * (cf_gemm_tri) over several 64-column panels; T = 1024 packs A^T (gemm_at_rows) in slices of K */
      {"hs64 T=140 mask+dropout", 2, 140, 128, 2, 1, 0.2f, 0},
      {"hs64 T=1024", 1, 1024, 64, 1, 0, 0.0f, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ctx, &r, cases[i]);
  check_finite_differences(&r, "fd plain", 2, 4, 8, 2, 0, 0.0f);
  check_finite_differences(&r, "fd mask+dropout", 2, 5, 8, 2, 1, 0.3f);
  check_finite_differences(&r, "fd nh1", 1, 3, 4, 1, 0, 0.0f);
  check_bad_args(ctx);

  cf_selftest st = {0};  /* the self-test's rows of this family */
  const char *rows[] = {"attention_forward", "attention_backward"};
  for (int i = 0; i < 2; i++) {
    const cf_op *op = cf_op_find(rows[i]);
    TEST_ASSERT(op != NULL, "the op table has no row %s", rows[i]);
    if (op) TEST_OK(cf_op_check(ctx, op, &op->check_dims, 3, 0xa77e, &st));
  }
  TEST_ASSERT(st.n == 2, "self-test gave %d rows, want 2", st.n);
  for (int i = 0; i < st.n; i++) {
    printf("   self-test %-24s max err %.3g worst %.3g %s\n", st.rows[i].op, st.rows[i].max_err, st.rows[i].worst,
           st.rows[i].pass ? "pass" : "FAIL");
    TEST_ASSERT(st.rows[i].pass, "self-test row %s fails", st.rows[i].op);
  }
  cf_context_free(ctx);
  return test_finish("test_attention");
}
