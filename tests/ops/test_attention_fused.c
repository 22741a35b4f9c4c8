/* Fused attention (cf_attention_fused_*): forward (out, lse) and backward (dq, dk, dv) against the
 * double reference over causal, padded and cross-attention (Tq != Tk) shapes, Tq = 1, key counts off
 * every tile, a sequence with one key left and one with none, head sizes that are not powers of 2,
 * dropout, odd buffer offsets, outputs poisoned; the device backward against central finite
 * differences of the reference forward; equality with the materialised path (cf_attention_*) on
 * the same (B, T, 3C) input, dropout and padding included, and a model's step with either; the
 * streamed range split over several launches (as on a device with a loop limit); bit-identical
 * reruns; argument checks. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "gemm/loop_budget.h"
#include "testutil.h"

#define ATOL 1e-5
#define RTOL 1e-4

typedef struct fcase {
  const char *name;
  int B, Tq, Tk, NH, HS, causal;
  int padded;   /* key lengths: sequence 0 keeps one key, 1 none, the rest random */
  float p;      /* attention dropout */
  size_t off;   /* element offset of every device tensor in its buffer */
} fcase;

static cf_attention_dims dims_of(fcase c) {
  int C = c.NH * c.HS;
  cf_attention_dims d = {c.B, c.Tq, c.Tk, c.NH, c.HS, c.causal, C, C, C, C, (float)(1.0 / sqrt((double)c.HS))};
  return d;
}

static void key_lengths(test_rng *r, int *len, int B, int Tk) {
  for (int b = 0; b < B; b++) len[b] = b == 0 ? 1 : b == 1 ? 0 : (int)(test_uniform(r) * (Tk + 1));
}

static cf_mem int_tensor(cf_context *ctx, const int *host, size_t n, size_t off) {
  cf_mem m = test_tensor(ctx, NULL, n, off);
  TEST_OK(cf_write(ctx, m, host, n));
  return m;
}

static void run_case(cf_context *ctx, test_rng *r, fcase c) {
  cf_attention_dims d = dims_of(c);
  size_t nq = (size_t)c.B * c.Tq * d.ldq, nk = (size_t)c.B * c.Tk * d.ldk, nl = (size_t)c.B * c.NH * c.Tq;
  cf_dropout drop = {0};
  drop.p = c.p, drop.seed = 77u, drop.step = 5u, drop.tensor_id = 9u;
  float *q = test_falloc(nq), *k = test_falloc(nk), *v = test_falloc(nk), *dout = test_falloc(nq);
  test_fill_uniform(r, q, nq, -1.5f, 1.5f);
  test_fill_uniform(r, k, nk, -1.5f, 1.5f);
  test_fill_uniform(r, v, nk, -1.0f, 1.0f);
  test_fill_uniform(r, dout, nq, -1.0f, 1.0f);
  int len[64] = {0};
  if (c.padded) key_lengths(r, len, c.B, c.Tk);
  const int *lens = c.padded ? len : NULL;
  size_t off = c.off, ns = cf_attention_fused_scratch_floats(&d);
  cf_mem mq = test_tensor(ctx, q, nq, off), mk = test_tensor(ctx, k, nk, off), mv = test_tensor(ctx, v, nk, off);
  cf_mem mdo = test_tensor(ctx, dout, nq, off), mo = test_tensor(ctx, NULL, nq, off), ml = test_tensor(ctx, NULL, nl, off);
  cf_mem ms = test_tensor(ctx, NULL, ns, off), mdq = test_tensor(ctx, NULL, nq, off);
  cf_mem mdk = test_tensor(ctx, NULL, nk, off), mdv = test_tensor(ctx, NULL, nk, off);
  cf_mem mlen = c.padded ? int_tensor(ctx, len, (size_t)c.B, off) : cf_at(NULL, 0);

  double t0 = test_now();
  TEST_OK(cf_attention_fused_forward(ctx, mo, ml, ms, mq, mk, mv, mlen, &d, drop));
  TEST_OK(cf_context_finish(ctx));
  double t1 = test_now();
  TEST_OK(cf_attention_fused_backward(ctx, mdq, mdk, mdv, ms, mdo, mq, mk, mv, mo, ml, mlen, &d, drop));
  TEST_OK(cf_context_finish(ctx));
  double t2 = test_now();

  double *ro = test_dalloc(nq), *rl = test_dalloc(nl), *rdq = test_dalloc(nq), *rdk = test_dalloc(nk),
         *rdv = test_dalloc(nk);
  ref_attention_fused_forward(ro, rl, q, k, v, lens, &d, drop);
  ref_attention_fused_backward(rdq, rdk, rdv, dout, q, k, v, lens, &d, drop);
  float *got[5] = {test_read(ctx, mo, nq), test_read(ctx, ml, nl), test_read(ctx, mdq, nq), test_read(ctx, mdk, nk),
                   test_read(ctx, mdv, nk)};
  const double *want[5] = {ro, rl, rdq, rdk, rdv};
  const size_t n[5] = {nq, nl, nq, nk, nk};
  const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
  printf("-- %s: B %d, Tq %d, Tk %d, NH %d, HS %d, causal %d, padded %d, p %g: forward %.2f ms, backward %.2f ms\n",
         c.name, c.B, c.Tq, c.Tk, c.NH, c.HS, c.causal, c.padded, (double)c.p, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
  char what[96];
  for (int i = 0; i < 5; i++) {
    snprintf(what, sizeof what, "%s %s", c.name, names[i]);
    test_compare(what, got[i], want[i], n[i], ATOL, RTOL);
  }
  /* again from poisoned outputs: the same bits */
  test_poison(ctx, mo, nq);
  test_poison(ctx, mdq, nq);
  test_poison(ctx, mdk, nk);
  TEST_OK(cf_attention_fused_forward(ctx, mo, ml, ms, mq, mk, mv, mlen, &d, drop));
  TEST_OK(cf_attention_fused_backward(ctx, mdq, mdk, mdv, ms, mdo, mq, mk, mv, mo, ml, mlen, &d, drop));
  snprintf(what, sizeof what, "%s out", c.name);
  test_check_same(what, ctx, mo, got[0], nq);
  snprintf(what, sizeof what, "%s dk", c.name);
  test_check_same(what, ctx, mdk, got[3], nk);
  for (int i = 0; i < 5; i++) free(got[i]);
  free(q); free(k); free(v); free(dout); free(ro); free(rl); free(rdq); free(rdk); free(rdv);
  test_free_tensors();
}

/* loss = sum(out * w) of the reference forward, with x[i] moved by dx. */
static double ref_loss(float *x, size_t i, double dx, const float *q, const float *k, const float *v, const float *w,
                       const int *lens, const cf_attention_dims *d, cf_dropout drop, double *o, size_t nq) {
  float keep = x[i];
  x[i] = (float)(keep + dx);
  double *lse = test_dalloc((size_t)d->B * d->NH * d->Tq), loss = 0;
  ref_attention_fused_forward(o, lse, q, k, v, lens, d, drop);
  x[i] = keep;
  for (size_t j = 0; j < nq; j++) loss += o[j] * w[j];
  free(lse);
  return loss;
}

/* The device backward against central differences of the reference forward. Inputs are
 * multiples of 2^-10 so that x +- 2^-16 is exact in float; the quotients are then good to about
 * 1e-9, far inside the float tolerance the device is held to. */
static void check_finite_differences(cf_context *ctx, test_rng *r, fcase c) {
  cf_attention_dims d = dims_of(c);
  size_t nq = (size_t)c.B * c.Tq * d.ldq, nk = (size_t)c.B * c.Tk * d.ldk;
  cf_dropout drop = {0};
  drop.p = c.p, drop.seed = 3u, drop.step = 1u, drop.tensor_id = 4u;
  float *x[3] = {test_falloc(nq), test_falloc(nk), test_falloc(nk)}, *w = test_falloc(nq);
  const size_t nx[3] = {nq, nk, nk};
  for (int s = 0; s < 3; s++)
    for (size_t i = 0; i < nx[s]; i++) x[s][i] = (float)ldexp(floor(test_uniform(r) * 2048.0) - 1024.0, -10);
  test_fill_uniform(r, w, nq, -1.0f, 1.0f);
  int len[64] = {0};
  if (c.padded) key_lengths(r, len, c.B, c.Tk);
  const int *lens = c.padded ? len : NULL;
  cf_mem m[3], mw = test_tensor(ctx, w, nq, 1), mo = test_tensor(ctx, NULL, nq, 1);
  for (int s = 0; s < 3; s++) m[s] = test_tensor(ctx, x[s], nx[s], 1);
  cf_mem ml = test_tensor(ctx, NULL, (size_t)c.B * c.NH * c.Tq, 1), ms = test_tensor(ctx, NULL, (size_t)c.B * c.NH * c.Tq, 1);
  cf_mem g[3] = {test_tensor(ctx, NULL, nq, 1), test_tensor(ctx, NULL, nk, 1), test_tensor(ctx, NULL, nk, 1)};
  cf_mem mlen = c.padded ? int_tensor(ctx, len, (size_t)c.B, 1) : cf_at(NULL, 0);
  TEST_OK(cf_attention_fused_forward(ctx, mo, ml, ms, m[0], m[1], m[2], mlen, &d, drop));
  TEST_OK(cf_attention_fused_backward(ctx, g[0], g[1], g[2], ms, mw, m[0], m[1], m[2], mo, ml, mlen, &d, drop));
  const double h = ldexp(1.0, -16);
  double *o = test_dalloc(nq), largest = 0;
  const char *names[3] = {"dq", "dk", "dv"};
  for (int s = 0; s < 3; s++) {
    float *got = test_read(ctx, g[s], nx[s]);
    double *fd = test_dalloc(nx[s]);
    for (size_t i = 0; i < nx[s]; i++) {
      fd[i] = (ref_loss(x[s], i, h, x[0], x[1], x[2], w, lens, &d, drop, o, nq) -
               ref_loss(x[s], i, -h, x[0], x[1], x[2], w, lens, &d, drop, o, nq)) / (2 * h);
      largest = fmax(largest, fabs(fd[i]));
    }
    char what[96];
    snprintf(what, sizeof what, "%s %s vs finite differences", c.name, names[s]);
    test_compare(what, got, fd, nx[s], ATOL, RTOL);
    free(got);
    free(fd);
  }
  TEST_ASSERT(largest > 1e-2, "%s: finite differences all vanish (the check would be vacuous)", c.name);
  printf("ok   %s: device backward vs finite differences of the reference forward\n", c.name);
  for (int s = 0; s < 3; s++) free(x[s]);
  free(w);
  free(o);
  test_free_tensors();
}

/* The same (B, T, 3C) input through the materialised path (cf_attention_*) and the fused one
 * (q, k, v read in place with strides 3C, dq, dk, dv written into one (B, T, 3C) gradient): the
 * same outputs to float rounding, dropout included (both key element ((b*NH + h)*T + t)*T + j), and
 * a right-padding key mask against the same key lengths. */
static void check_against_materialised(cf_context *ctx, test_rng *r, int B, int T, int C, int NH, float p, int padded) {
  size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, HS = (size_t)(C / NH);
  cf_dropout drop = {0};
  drop.p = p, drop.seed = 11u, drop.step = 2u, drop.tensor_id = 17u;
  float *inp = test_falloc(nin), *dout = test_falloc(nout);
  test_fill_uniform(r, inp, nin, -1.5f, 1.5f);
  test_fill_uniform(r, dout, nout, -1.0f, 1.0f);
  int len[64] = {0}, *mask = malloc((size_t)B * T * sizeof *mask);
  key_lengths(r, len, B, T);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) mask[b * T + t] = t < len[b];
  cf_mem mi = test_tensor(ctx, inp, nin, 3), mdo = test_tensor(ctx, dout, nout, 3);
  cf_mem mmask = padded ? int_tensor(ctx, mask, (size_t)B * T, 3) : cf_at(NULL, 0);
  cf_mem mlen = padded ? int_tensor(ctx, len, (size_t)B, 3) : cf_at(NULL, 0);
  /* materialised */
  cf_mem out1 = test_tensor(ctx, NULL, nout, 3);
  cf_mem att = test_tensor(ctx, NULL, (size_t)B * NH * T * T, 3);
  cf_mem scr = test_tensor(ctx, NULL, cf_attention_scratch_floats(B, T, C, NH, p > 0), 3);
  cf_mem din1 = test_tensor(ctx, NULL, nin, 3);
  TEST_OK(cf_attention_forward(ctx, out1, att, scr, mi, mmask, B, T, C, NH, drop));
  TEST_OK(cf_attention_backward(ctx, din1, scr, mdo, mi, att, mmask, B, T, C, NH, drop));
  /* fused */
  cf_attention_dims d = {B, T, T, NH, (int)HS, 1, 3 * C, 3 * C, 3 * C, C, (float)(1.0 / sqrt((double)HS))};
  cf_mem out2 = test_tensor(ctx, NULL, nout, 3), lse = test_tensor(ctx, NULL, (size_t)B * NH * T, 3);
  cf_mem fscr = test_tensor(ctx, NULL, cf_attention_fused_scratch_floats(&d), 3), din2 = test_tensor(ctx, NULL, nin, 3);
  TEST_OK(cf_attention_fused_forward(ctx, out2, lse, fscr, mi, cf_shift(mi, C), cf_shift(mi, 2 * C), mlen, &d, drop));
  TEST_OK(cf_attention_fused_backward(ctx, din2, cf_shift(din2, C), cf_shift(din2, 2 * C), fscr, mdo, mi, cf_shift(mi, C),
                                      cf_shift(mi, 2 * C), out2, lse, mlen, &d, drop));
  float *o1 = test_read(ctx, out1, nout), *o2 = test_read(ctx, out2, nout);
  float *g1 = test_read(ctx, din1, nin), *g2 = test_read(ctx, din2, nin);
  char what[96];
  snprintf(what, sizeof what, "fused == materialised out (B %d, T %d, p %g, padded %d)", B, T, (double)p, padded);
  int bad = test_compare_f(what, o2, o1, nout, ATOL, RTOL);
  snprintf(what, sizeof what, "fused == materialised dinp (B %d, T %d, p %g, padded %d)", B, T, (double)p, padded);
  bad += test_compare_f(what, g2, g1, nin, ATOL, RTOL);
  if (!bad) printf("ok   %s\n", what);
  free(inp); free(dout); free(mask); free(o1); free(o2); free(g1); free(g2);
  test_free_tensors();
}

/* A whole model (Pre-LN, 2 layers, attention dropout on) trained one step with each
 * model.attention: the same loss and gradients to float rounding, from the same weights. */
static void check_model(cf_context *ctx, test_rng *r) {
  const int B = 3, T = 37;
  int in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) in[i] = (int)(test_uniform(r) * 256), tg[i] = (int)(test_uniform(r) * 256);
  float loss[2] = {0}, *grads[2] = {NULL, NULL};
  size_t n = 0;
  for (int k = 0; k < 2; k++) {
    cf_config c;
    test_model_config(&c, 2, 48, 3, 96);
    c.model.attn_dropout = 0.1;
    c.model.attention = k ? CF_ATTENTION_MATERIALIZED : CF_ATTENTION_FUSED;
    test_validate(&c);
    cf_model *m;
    TEST_OK(cf_model_create(ctx, &c.model, &c.optim, 5, B, T, &m));
    TEST_OK(cf_model_init(m, 5));
    TEST_OK(cf_model_forward(m, in, tg, 3, 1));
    TEST_OK(cf_model_backward(m));
    TEST_OK(cf_model_loss(m, &loss[k]));
    n = cf_model_flat_floats(m);
    grads[k] = test_falloc(n);
    TEST_OK(cf_model_read(m, 1, grads[k]));
    cf_model_free(m);
  }
  TEST_ASSERT(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[1]), "model loss: fused %.9g, materialised %.9g",
              (double)loss[0], (double)loss[1]);
  int bad = test_compare_f("model gradients: fused == materialised", grads[0], grads[1], n, ATOL, RTOL);
  if (!bad) printf("ok   model step: loss %.7f (fused) and %.7f (materialised)\n", (double)loss[0], (double)loss[1]);
  free(grads[0]);
  free(grads[1]);
}

static void check_bad_args(cf_context *ctx) {
  cf_mem m = test_tensor(ctx, NULL, 64, 0), none = cf_at(NULL, 0);
  cf_dropout ok = {0}, bad_p = {0};
  bad_p.p = 1.0f;
  const cf_attention_dims good = {1, 2, 2, 1, 4, 1, 4, 4, 4, 4, 0.5f};
  cf_attention_dims d[7];
  for (int i = 0; i < 7; i++) d[i] = good;
  d[0].Tq = 0;                          /* no query rows */
  d[1].HS = -1;                         /* negative head size */
  d[2].ldk = 3;                         /* a stride below NH x HS */
  d[3].scale = NAN;                     /* scale not finite */
  d[4].B = 70000, d[4].Tq = 40000;      /* more than 2^31 elements */
  d[5].Tq = d[5].Tk = 70000, d[5].ldq = d[5].ldk = d[5].ldv = d[5].ldo = 4;  /* with dropout: > 2^32 elements */
  d[6].HS = d[6].ldq = d[6].ldk = d[6].ldv = d[6].ldo = 1 << 22;              /* GPU shapes: more local memory than any device */
  cf_dropout some = {0};
  some.p = 0.1f;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  int gpu_shapes = !cf_context_cpu_shapes(ctx);  /* the CPU shapes use no local memory: 6 is fine there */
  for (int i = 0; i < 6 + gpu_shapes; i++) {
    cf_dropout dr = i == 5 ? some : ok;
    TEST_ASSERT(cf_attention_fused_forward(ctx, m, m, m, m, m, m, none, &d[i], dr) == CF_ERR_INVALID_ARG,
                "forward: bad dimensions %d accepted", i);
    TEST_ASSERT(cf_attention_fused_backward(ctx, m, m, m, m, m, m, m, m, m, m, none, &d[i], dr) == CF_ERR_INVALID_ARG,
                "backward: bad dimensions %d accepted", i);
  }
  TEST_ASSERT(cf_attention_fused_forward(ctx, m, m, m, m, m, m, none, &good, bad_p) == CF_ERR_INVALID_ARG, "p = 1");
  TEST_ASSERT(cf_attention_fused_forward(ctx, m, m, m, m, m, m, none, NULL, ok) == CF_ERR_INVALID_ARG, "no dims");
  TEST_ASSERT(cf_attention_fused_scratch_floats(NULL) == 0 && cf_attention_fused_scratch_floats(&d[0]) == 0,
              "scratch of bad dimensions");
  TEST_ASSERT(cf_attention_fused_scratch_floats(&good) == 2, "scratch: B x NH x Tq");
  cf_set_verbosity(v);
  cf_clear_error();
  test_free_tensors();
  printf("ok   argument checks\n");
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(20250219);
  const fcase cases[] = {
      {"causal", 2, 70, 70, 3, 8, 1, 0, 0.0f, 0},
      {"causal+dropout+offset", 2, 45, 45, 2, 12, 1, 0, 0.2f, 5},
      {"padded", 3, 33, 33, 2, 8, 1, 1, 0.0f, 1},
      {"cross Tq < Tk", 3, 19, 130, 2, 10, 0, 1, 0.1f, 0},
      {"cross Tq > Tk, causal", 2, 71, 9, 3, 5, 1, 0, 0.0f, 0},
      {"Tq = 1", 3, 1, 37, 4, 6, 1, 1, 0.1f, 3},
      {"Tk = 1", 2, 5, 1, 1, 3, 0, 0, 0.0f, 0},
      {"HS = 1", 2, 9, 9, 5, 1, 1, 0, 0.0f, 0},
      {"HS = 20, long", 3, 200, 200, 2, 20, 1, 1, 0.1f, 0},
      {"HS = 64 (whole 16-channel blocks), T off 16", 4, 53, 53, 2, 64, 1, 1, 0.0f, 2},
      {"HS = 64, unpadded", 2, 37, 37, 2, 64, 1, 0, 0.0f, 0},
      {"HS = 35, cross, dropout", 2, 21, 40, 2, 35, 0, 0, 0.1f, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(ctx, &r, cases[i]);

  /* a device whose work-items may loop only so long: the streamed range in several launches */
  TEST_OK(cf_gemm_loop_budget_set(ctx, 3000));
  run_case(ctx, &r, (fcase){"split over launches", 3, 150, 150, 2, 12, 1, 1, 0.1f, 0});
  run_case(ctx, &r, (fcase){"split, cross", 1, 90, 170, 2, 7, 0, 0, 0.0f, 0});
  TEST_OK(cf_gemm_loop_budget_set(ctx, 0));

  check_finite_differences(ctx, &r, (fcase){"fd causal+dropout", 2, 5, 5, 2, 3, 1, 0, 0.3f, 0});
  check_finite_differences(ctx, &r, (fcase){"fd cross+padded", 3, 4, 6, 2, 3, 0, 1, 0.0f, 0});
  check_against_materialised(ctx, &r, 2, 37, 24, 3, 0.0f, 0);
  check_against_materialised(ctx, &r, 3, 64, 32, 2, 0.1f, 0);
  check_against_materialised(ctx, &r, 3, 29, 16, 2, 0.0f, 1);
  check_model(ctx, &r);
  check_bad_args(ctx);
  cf_context_free(ctx);
  return test_finish("test_attention_fused");
}
