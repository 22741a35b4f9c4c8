/* Activations, bias and the fused bias + activation, forward and backward: against the double
 * references, the reference backwards against central differences, aliasing as documented,
 * bit-identical reruns, bad arguments. */
#include <limits.h>
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/gemm.h"
#include "clformer/ref.h"
#include "testutil.h"

static const cf_activation ACTS[] = {CF_ACT_RELU, CF_ACT_GELU_TANH, CF_ACT_GELU_ERF};

/* Inputs over [-6, 6] plus the points that matter: 0, tiny, large of both signs. */
static void act_inputs(test_rng *r, float *x, size_t n) {
  static const float special[] = {0.0f, 1e-4f, -1e-4f, 30.0f, -30.0f, 12.5f, -12.5f, -0.0f};
  test_fill_uniform(r, x, n, -6, 6);
  for (size_t i = 0; i < n && i < 8; i++) x[i * 7 % n] = special[i];
}

/* h = 2^-17 (~7.6e-6): x +- h is exact in float for |x| < 128, so the float-input reference sees
 * exactly the step; everything after is double. */
static const float H = 0x1p-17f;

static void activation_case(cf_context *ctx, test_rng *r, cf_activation act, size_t n) {
  const char *name = cf_activation_name(act);
  char what[128];
  float *x = test_falloc(n), *dout = test_falloc(n);
  act_inputs(r, x, n);
  test_fill_uniform(r, dout, n, -1, 1);
  double *ref = test_dalloc(n), *gref = test_dalloc(n);
  ref_activation_forward(ref, x, n, act);
  ref_activation_backward(gref, dout, x, n, act);
  cf_mem d_x = test_tensor(ctx, x, n, 3), d_out = test_tensor(ctx, NULL, n, 1), d_dout = test_tensor(ctx, dout, n, 0);
  cf_mem d_dinp = test_tensor(ctx, NULL, n, 5);

  TEST_OK(cf_activation_forward(ctx, d_out, d_x, n, act));
  float *out = test_read(ctx, d_out, n);
  snprintf(what, sizeof what, "%s_forward n=%zu", name, n);
  test_compare(what, out, ref, n, 1e-5, 1e-4);
  test_poison(ctx, d_out, n);
  TEST_OK(cf_activation_forward(ctx, d_out, d_x, n, act));
  test_check_same(what, ctx, d_out, out, n);

  TEST_OK(cf_activation_backward(ctx, d_dinp, d_dout, d_x, n, act));
  float *dinp = test_read(ctx, d_dinp, n);
  snprintf(what, sizeof what, "%s_backward n=%zu", name, n);
  test_compare(what, dinp, gref, n, 1e-5, 1e-4);
  test_poison(ctx, d_dinp, n);
  TEST_OK(cf_activation_backward(ctx, d_dinp, d_dout, d_x, n, act));
  test_check_same(what, ctx, d_dinp, dinp, n);

  /* in place: out aliasing inp, dinp aliasing dout */
  TEST_OK(cf_activation_forward(ctx, d_x, d_x, n, act));
  float *al = test_read(ctx, d_x, n);
  snprintf(what, sizeof what, "%s_forward in place n=%zu", name, n);
  test_compare(what, al, ref, n, 1e-5, 1e-4);
  free(al);
  test_upload(ctx, d_x, x, n);
  TEST_OK(cf_activation_backward(ctx, d_dout, d_dout, d_x, n, act));
  al = test_read(ctx, d_dout, n);
  snprintf(what, sizeof what, "%s_backward dinp aliasing dout n=%zu", name, n);
  test_compare(what, al, gref, n, 1e-5, 1e-4);
  free(al);

  test_free_tensors();
  free(x); free(dout); free(ref); free(gref); free(out); free(dinp);
}

/* act'(x) of the reference and of the device against central differences of the reference. */
static void activation_fd(cf_context *ctx, test_rng *r, cf_activation act) {
  enum { n = 200 };
  char what[128];
  float x[n], ones[n], xp[n], xm[n];
  act_inputs(r, x, n);
  for (int i = 0; i < n; i++) {
    if (act == CF_ACT_RELU && fabsf(x[i]) < 4 * H) x[i] = 0.5f;  /* no kink inside the stencil */
    ones[i] = 1.0f;
    xp[i] = x[i] + H;
    xm[i] = x[i] - H;
  }
  double fp[n], fm[n], fd[n], g[n];
  ref_activation_forward(fp, xp, n, act);
  ref_activation_forward(fm, xm, n, act);
  for (int i = 0; i < n; i++) fd[i] = (fp[i] - fm[i]) / (2.0 * (double)H);
  ref_activation_backward(g, ones, x, n, act);
  float gf[n];
  for (int i = 0; i < n; i++) gf[i] = (float)g[i];
  snprintf(what, sizeof what, "ref %s_backward vs central differences", cf_activation_name(act));
  test_compare(what, gf, fd, n, 1e-6, 1e-5);  /* float-rounded reference: ~6e-8 relative */
  cf_mem d_x = test_tensor(ctx, x, n, 2), d_one = test_tensor(ctx, ones, n, 0), d_g = test_tensor(ctx, NULL, n, 1);
  TEST_OK(cf_activation_backward(ctx, d_g, d_one, d_x, n, act));
  float *dg = test_read(ctx, d_g, n);
  snprintf(what, sizeof what, "device %s_backward vs central differences", cf_activation_name(act));
  test_compare(what, dg, fd, n, 1e-5, 1e-4);
  free(dg);
  test_free_tensors();
}

/* Column sums over N rows of O(1) terms in fp32 round like sqrt(N) * eps * |partial sums|:
 * their atol grows with sqrt(N) (8e-5 at N = 4096). */
static double sum_atol(int N) { return 1e-5 * fmax(1.0, sqrt(N / 64.0)); }

static void bias_case(cf_context *ctx, test_rng *r, int N, int C) {
  size_t NC = (size_t)N * C;
  char what[128];
  float *x = test_falloc(NC), *b = test_falloc(C), *dout = test_falloc(NC), *db0 = test_falloc(C);
  test_fill_uniform(r, x, NC, -3, 3);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, dout, NC, -1, 1);
  test_fill_uniform(r, db0, C, -1, 1);
  double *ref = test_dalloc(NC), *rdb = test_dalloc(C);
  ref_bias_forward(ref, x, b, N, C);
  for (int c = 0; c < C; c++) rdb[c] = db0[c];
  ref_bias_backward(rdb, dout, N, C);
  cf_mem d_x = test_tensor(ctx, x, NC, 1), d_b = test_tensor(ctx, b, C, 2), d_dout = test_tensor(ctx, dout, NC, 3), d_db = test_tensor(ctx, db0, C, 1);

  TEST_OK(cf_bias_forward(ctx, d_x, d_b, N, C));
  float *out = test_read(ctx, d_x, NC);
  snprintf(what, sizeof what, "bias_forward N=%d C=%d", N, C);
  test_compare(what, out, ref, NC, 1e-5, 1e-4);
  test_upload(ctx, d_x, x, NC);
  TEST_OK(cf_bias_forward(ctx, d_x, d_b, N, C));
  test_check_same(what, ctx, d_x, out, NC);

  TEST_OK(cf_bias_backward(ctx, d_db, d_dout, N, C));
  float *db = test_read(ctx, d_db, C);
  snprintf(what, sizeof what, "bias_backward (+=) N=%d C=%d", N, C);
  test_compare(what, db, rdb, C, sum_atol(N), 1e-4);
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_bias_backward(ctx, d_db, d_dout, N, C));
  test_check_same(what, ctx, d_db, db, C);

  /* the linear layers' weight gradient with the bias's in its pass (cf_gemm_tn_dbias, W (C, 64) =
   * dout^T h): where the GEMM fuses them, the same bits as bias_backward on a CPU device up to its
   * 2048 rows a launch (each column summed in the rows' order from 0 by both), near them elsewhere */
  float *h = test_falloc((size_t)N * 64);
  test_fill_uniform(r, h, (size_t)N * 64, -1, 1);
  cf_mem d_h = test_tensor(ctx, h, (size_t)N * 64, 1), d_w = test_tensor(ctx, NULL, (size_t)C * 64, 0);
  test_upload(ctx, d_db, db0, C);
  int fused = 0;
  TEST_OK(cf_gemm_tn_dbias(ctx, (size_t)C, 64, (size_t)N, d_dout, (size_t)C, d_h, 64, 0.0f, d_w, 64, d_db, &fused));
  if (!fused) TEST_OK(cf_bias_backward(ctx, d_db, d_dout, N, C));
  snprintf(what, sizeof what, "cf_gemm_tn_dbias's bias gradient (fused %d) N=%d C=%d", fused, N, C);
  if (fused && cf_context_cpu_shapes(ctx) && N <= 2048) test_check_same(what, ctx, d_db, db, C);
  float *db2 = test_read(ctx, d_db, C);
  test_compare(what, db2, rdb, C, sum_atol(N), 1e-4);
  free(db2);
  free(h);

  test_free_tensors();
  free(x); free(b); free(dout); free(db0); free(ref); free(rdb); free(out); free(db);
}

static void bias_act_case(cf_context *ctx, test_rng *r, int N, int C, cf_activation act) {
  size_t NC = (size_t)N * C;
  const char *name = cf_activation_name(act);
  char what[128];
  float *pre = test_falloc(NC), *b = test_falloc(C), *dout = test_falloc(NC), *db0 = test_falloc(C);
  act_inputs(r, pre, NC);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, dout, NC, -1, 1);
  test_fill_uniform(r, db0, C, -1, 1);
  double *rout = test_dalloc(NC), *rpre = test_dalloc(NC), *rdpre = test_dalloc(NC), *rdb = test_dalloc(C);
  ref_bias_act_forward(rout, rpre, pre, b, N, C, act);
  cf_mem d_pre = test_tensor(ctx, pre, NC, 2), d_b = test_tensor(ctx, b, C, 1), d_out = test_tensor(ctx, NULL, NC, 3);
  cf_mem d_dout = test_tensor(ctx, dout, NC, 1), d_dpre = test_tensor(ctx, NULL, NC, 0), d_db = test_tensor(ctx, db0, C, 2);

  TEST_OK(cf_bias_act_forward(ctx, d_out, d_pre, d_b, N, C, act));
  float *out = test_read(ctx, d_out, NC), *pb = test_read(ctx, d_pre, NC);
  snprintf(what, sizeof what, "bias_act_forward %s out N=%d C=%d", name, N, C);
  test_compare(what, out, rout, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "bias_act_forward %s pre (in place) N=%d C=%d", name, N, C);
  test_compare(what, pb, rpre, NC, 1e-5, 1e-4);
  test_upload(ctx, d_pre, pre, NC);
  test_poison(ctx, d_out, NC);
  TEST_OK(cf_bias_act_forward(ctx, d_out, d_pre, d_b, N, C, act));
  test_check_same(what, ctx, d_pre, pb, NC);
  test_check_same(what, ctx, d_out, out, NC);

  /* backward from the biased pre-activation the device left */
  for (int c = 0; c < C; c++) rdb[c] = db0[c];
  ref_bias_act_backward(rdpre, rdb, dout, pb, N, C, act);
  TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, (cf_dropout){0}));
  float *dpre = test_read(ctx, d_dpre, NC), *db = test_read(ctx, d_db, C);
  snprintf(what, sizeof what, "bias_act_backward %s dpre N=%d C=%d", name, N, C);
  test_compare(what, dpre, rdpre, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "bias_act_backward %s dbias (+=) N=%d C=%d", name, N, C);
  test_compare(what, db, rdb, C, sum_atol(N), 1e-4);
  test_poison(ctx, d_dpre, NC);
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, (cf_dropout){0}));
  test_check_same(what, ctx, d_dpre, dpre, NC);
  test_check_same(what, ctx, d_db, db, C);
  /* dpre aliasing dout */
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_bias_act_backward(ctx, d_dout, d_db, d_dout, d_pre, N, C, act, (cf_dropout){0}));
  float *al = test_read(ctx, d_dout, NC);
  snprintf(what, sizeof what, "bias_act_backward %s dpre aliasing dout N=%d C=%d", name, N, C);
  test_compare(what, al, rdpre, NC, 1e-5, 1e-4);
  test_check_same(what, ctx, d_db, db, C);

  /* with the dropout that followed the activation folded in: the same bits as dropout's backward
   * followed by the plain op (the mask's group0 odd, and a launch per 2048 rows starting mid-group
   * when C is odd) */
  cf_dropout drop = {0.3f, 77u, 5u, 9u, 3u};
  test_upload(ctx, d_dout, dout, NC);
  test_upload(ctx, d_db, db0, C);
  TEST_OK(cf_dropout_backward(ctx, d_dout, NC, drop));
  TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, (cf_dropout){0}));
  float *two = test_read(ctx, d_dpre, NC), *two_db = test_read(ctx, d_db, C);
  size_t dropped = 0;
  for (size_t i = 0; i < NC; i++) dropped += !cf_dropout_keep(drop, (uint32_t)i);
  test_upload(ctx, d_dout, dout, NC);
  test_upload(ctx, d_db, db0, C);
  test_poison(ctx, d_dpre, NC);
  TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, drop));
  snprintf(what, sizeof what, "bias_act_backward %s with dropout (%zu of %zu dropped), against dropout's backward "
           "then the op, N=%d C=%d", name, dropped, NC, N, C);
  test_check_same(what, ctx, d_dpre, two, NC);
  test_check_same(what, ctx, d_db, two_db, C);
  TEST_ASSERT(NC < 100 || (dropped > NC / 5 && dropped < NC / 2), "%s: the mask drops %zu of %zu", what, dropped, NC);

  /* out = pre, as the ReLU FFN runs it (only its output kept): pre ends as the same act(pre + bias),
   * and ReLU's backward read from that output, dropout applied to it or not, gives the same bits as
   * from pre + bias */
  test_upload(ctx, d_pre, pre, NC);
  TEST_OK(cf_bias_act_forward(ctx, d_pre, d_pre, d_b, N, C, act));
  snprintf(what, sizeof what, "bias_act_forward %s out = pre N=%d C=%d", name, N, C);
  test_check_same(what, ctx, d_pre, out, NC);
  if (act == CF_ACT_RELU) {
    test_upload(ctx, d_db, db0, C);
    TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, (cf_dropout){0}));
    snprintf(what, sizeof what, "bias_act_backward relu from its output N=%d C=%d", N, C);
    test_check_same(what, ctx, d_dpre, dpre, NC);
    test_check_same(what, ctx, d_db, db, C);
    TEST_OK(cf_dropout_forward(ctx, d_pre, NC, drop));
    test_upload(ctx, d_db, db0, C);
    TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_dout, d_pre, N, C, act, drop));
    snprintf(what, sizeof what, "bias_act_backward relu with dropout from its dropped output N=%d C=%d", N, C);
    test_check_same(what, ctx, d_dpre, two, NC);
    test_check_same(what, ctx, d_db, two_db, C);
    /* the same from the output's zeros, no mask drawn */
    test_upload(ctx, d_db, db0, C);
    test_poison(ctx, d_dpre, NC);
    TEST_OK(cf_bias_relu_backward_from_output(ctx, d_dpre, d_db, d_dout, d_pre, N, C, drop));
    snprintf(what, sizeof what, "bias_relu_backward_from_output with dropout N=%d C=%d", N, C);
    test_check_same(what, ctx, d_dpre, two, NC);
    test_check_same(what, ctx, d_db, two_db, C);
  }
  free(two);
  free(two_db);

  test_free_tensors();
  free(pre); free(b); free(dout); free(db0); free(rout); free(rpre); free(rdpre); free(rdb);
  free(out); free(pb); free(dpre); free(db); free(al);
}

/* loss = sum(act(pre + bias) * rw) of the reference */
static double bias_act_loss(const float *pre, const float *b, const float *rw, int N, int C, cf_activation act) {
  size_t NC = (size_t)N * C;
  double *out = test_dalloc(NC), *p = test_dalloc(NC), l = 0;
  ref_bias_act_forward(out, p, pre, b, N, C, act);
  for (size_t i = 0; i < NC; i++) l += out[i] * rw[i];
  free(out); free(p);
  return l;
}
static double central(float *v, size_t i, const float *pre, const float *b, const float *rw, int N, int C,
                      cf_activation act) {
  float v0 = v[i];
  v[i] = v0 + H;
  double lp = bias_act_loss(pre, b, rw, N, C, act);
  v[i] = v0 - H;
  double lm = bias_act_loss(pre, b, rw, N, C, act);
  v[i] = v0;
  return (lp - lm) / (2.0 * (double)H);
}

/* bias_act_backward (reference and device) and bias_backward against central differences:
 * the gradients of sum(act(pre + bias) * rw) in pre and in bias. */
static void bias_act_fd(cf_context *ctx, test_rng *r, cf_activation act) {
  enum { N = 5, C = 9, NC = N * C };
  char what[128];
  const char *name = cf_activation_name(act);
  float pre[NC], b[C], rw[NC];
  act_inputs(r, pre, NC);
  test_fill_uniform(r, b, C, -1, 1);
  test_fill_uniform(r, rw, NC, -1, 1);
  if (act == CF_ACT_RELU)
    for (int i = 0; i < NC; i++)
      if (fabsf(pre[i] + b[i % C]) < 4 * H) pre[i] += 0.5f;  /* no kink inside the stencil */
  double fdp[NC], fdb[C];
  for (int i = 0; i < NC; i++) fdp[i] = central(pre, i, pre, b, rw, N, C, act);
  for (int c = 0; c < C; c++) fdb[c] = central(b, c, pre, b, rw, N, C, act);

  double out[NC], pb[NC], dpre[NC], db[C] = {0};
  float pbf[NC], g[NC + C];
  ref_bias_act_forward(out, pb, pre, b, N, C, act);
  for (int i = 0; i < NC; i++) pbf[i] = (float)pb[i];
  ref_bias_act_backward(dpre, db, rw, pbf, N, C, act);
  for (int i = 0; i < NC; i++) g[i] = (float)dpre[i];
  for (int c = 0; c < C; c++) g[NC + c] = (float)db[c];
  /* pre + bias rounded to float shifts act' by ~6e-8 relative */
  snprintf(what, sizeof what, "ref bias_act_backward %s dpre vs central differences", name);
  test_compare(what, g, fdp, NC, 1e-6, 1e-5);
  snprintf(what, sizeof what, "ref bias_act_backward %s dbias vs central differences", name);
  test_compare(what, g + NC, fdb, C, 1e-6, 1e-5);

  cf_mem d_pre = test_tensor(ctx, pre, NC, 1), d_b = test_tensor(ctx, b, C, 0), d_out = test_tensor(ctx, NULL, NC, 2);
  cf_mem d_rw = test_tensor(ctx, rw, NC, 3), d_dpre = test_tensor(ctx, NULL, NC, 1), d_db = test_tensor(ctx, NULL, C, 1);
  TEST_OK(cf_fill(ctx, d_db, 0, C));
  TEST_OK(cf_bias_act_forward(ctx, d_out, d_pre, d_b, N, C, act));
  TEST_OK(cf_bias_act_backward(ctx, d_dpre, d_db, d_rw, d_pre, N, C, act, (cf_dropout){0}));
  float *ddp = test_read(ctx, d_dpre, NC), *ddb = test_read(ctx, d_db, C);
  snprintf(what, sizeof what, "device bias_act_backward %s dpre vs central differences", name);
  test_compare(what, ddp, fdp, NC, 1e-5, 1e-4);
  snprintf(what, sizeof what, "device bias_act_backward %s dbias vs central differences", name);
  test_compare(what, ddb, fdb, C, 1e-5, 1e-4);
  free(ddb);

  /* bias_backward: d/dbias of the same loss, from dpre (the gradient bias_forward receives) */
  if (act == CF_ACT_GELU_TANH) {
    double rdb[C] = {0};
    float fdpf[NC];
    for (int i = 0; i < NC; i++) fdpf[i] = (float)fdp[i];
    ref_bias_backward(rdb, fdpf, N, C);
    float rdbf[C];
    for (int c = 0; c < C; c++) rdbf[c] = (float)rdb[c];
    test_compare("ref bias_backward vs central differences", rdbf, fdb, C, 1e-6, 1e-5);
    TEST_OK(cf_fill(ctx, d_db, 0, C));
    TEST_OK(cf_bias_backward(ctx, d_db, d_dpre, N, C));
    ddb = test_read(ctx, d_db, C);
    test_compare("device bias_backward vs central differences", ddb, fdb, C, 1e-5, 1e-4);
    free(ddb);
  }
  free(ddp);
  test_free_tensors();
}

static void bad_arguments(cf_context *ctx) {
  cf_mem z = test_tensor(ctx, NULL, 16, 0);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_activation_forward(ctx, z, z, 4, (cf_activation)7) == CF_ERR_INVALID_ARG, "activation 7 accepted");
  TEST_ASSERT(cf_activation_backward(ctx, z, z, z, 4, (cf_activation)-1) == CF_ERR_INVALID_ARG,
              "activation -1 accepted");
  TEST_ASSERT(cf_activation_forward(ctx, z, z, (size_t)INT_MAX + 1, CF_ACT_RELU) == CF_ERR_INVALID_ARG,
              "n > INT_MAX accepted");
  TEST_ASSERT(cf_bias_forward(ctx, z, z, 2, 0) == CF_ERR_INVALID_ARG, "C = 0 accepted");
  TEST_ASSERT(cf_bias_backward(ctx, z, z, -1, 2) == CF_ERR_INVALID_ARG, "N < 0 accepted");
  TEST_ASSERT(cf_bias_act_forward(ctx, z, z, z, 2, 2, (cf_activation)3) == CF_ERR_INVALID_ARG,
              "activation 3 accepted");
  TEST_ASSERT(cf_bias_act_backward(ctx, z, z, z, z, 2, 0, CF_ACT_RELU, (cf_dropout){0}) == CF_ERR_INVALID_ARG,
              "C = 0 accepted");
  cf_set_verbosity(v);
  cf_clear_error();
  TEST_ASSERT(cf_activation_forward(ctx, z, z, 0, CF_ACT_RELU) == CF_OK, "n = 0 rejected");
  TEST_ASSERT(cf_bias_backward(ctx, z, z, 0, 3) == CF_OK, "N = 0 rejected");
  TEST_ASSERT(strcmp(cf_activation_name(CF_ACT_GELU_ERF), "gelu_erf") == 0, "name of CF_ACT_GELU_ERF");
  test_free_tensors();
}

int main(void) {
  cf_context *ctx = test_context();
  test_rng r = test_rng_seed(777);
  static const size_t sizes[] = {1, 3, 1000, 4096 * 512};
  static const int shapes[][2] = {{1, 1}, {5, 1}, {1, 7}, {13, 77}, {3, 700}, {2050, 13}, {4096, 512}};
  for (int k = 0; k < 3; k++) {
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) activation_case(ctx, &r, ACTS[k], sizes[s]);
    activation_fd(ctx, &r, ACTS[k]);
    bias_act_fd(ctx, &r, ACTS[k]);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) bias_act_case(ctx, &r, shapes[s][0], shapes[s][1], ACTS[k]);
  }
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) bias_case(ctx, &r, shapes[s][0], shapes[s][1]);
  bad_arguments(ctx);
  cf_context_free(ctx);
  return test_finish("test_activation");
}
