/* Optimizers (Adam, AdamW, SGD), global and segment norms, clipping: device against the double
 * references in src/ref/ref_optimizer.c, fed the same float state the device saw at every step. */
#include <math.h>
#include <string.h>
#include "clformer/ops.h"
#include "clformer/ref.h"
#include "testutil.h"

#define ATOL 1e-5
#define RTOL 1e-4

/* |out - ref| / ref < 1e-5, as the brief asks of norms. */
static void check_rel(const char *what, const float *out, const double *ref, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)out[i] - ref[i]) / (ref[i] > 0 ? ref[i] : 1.0);
    if (!isfinite(out[i])) e = INFINITY;
    if (!(e <= worst)) worst = e;
  }
  TEST_ASSERT(worst < 1e-5, "%s: relative error %.3g", what, worst);
  if (worst < 1e-5) printf("ok   %s: %zu values, largest relative error %.3g\n", what, n, worst);
}

static void test_global_norm(cf_context *ctx, size_t n, unsigned long long seed) {
  test_rng r = test_rng_seed(seed);
  float *x = malloc((n ? n : 1) * sizeof *x);
  test_fill_uniform(&r, x, n, -2.0f, 2.0f);
  cl_mem bx = test_buffer(ctx, NULL, n + 1), bout = test_buffer(ctx, NULL, 2);
  size_t ns = cf_norm_scratch_floats(n);
  cl_mem scratch = test_buffer(ctx, NULL, ns);
  /* x at offset 1 (after a NaN that must not be read) exercises the offset path */
  TEST_OK(cf_write(ctx, cf_at(bx, 1), x, n));
  TEST_OK(cf_global_norm(ctx, cf_at(bout, 1), cf_at(bx, 1), n, cf_at(scratch, 0)));
  float *out = test_read(ctx, cf_at(bout, 0), 2);
  double ref = ref_global_norm(x, n);
  char what[64];
  snprintf(what, sizeof what, "global_norm n=%zu", n);
  check_rel(what, out + 1, &ref, 1);
  TEST_ASSERT(isnan(out[0]), "global_norm wrote outside its output");
  test_poison(ctx, cf_at(bout, 0), 2);
  TEST_OK(cf_global_norm(ctx, cf_at(bout, 1), cf_at(bx, 1), n, cf_at(scratch, 0)));
  float *again = test_read(ctx, cf_at(bout, 0), 2);
  TEST_ASSERT(!memcmp(out + 1, again + 1, sizeof(float)), "global_norm n=%zu not bit-identical on repeat", n);
  free(x), free(out), free(again);
  cf_buffer_free(bx), cf_buffer_free(bout), cf_buffer_free(scratch);
}

static void test_segment_norms(cf_context *ctx) {
  /* empty, single, WG +- 1, a large one, gaps between segments, not in increasing order */
  size_t counts[] = {1, 0, 257, 255, 100003, 7, 4096, 4097, 33};
  int nseg = (int)(sizeof counts / sizeof *counts);
  size_t offsets[16], total = 0;
  for (int s = 0; s < nseg; s++) {
    offsets[s] = total + 3;
    total += counts[s] + 3 + (size_t)s;
  }
  /* list segments 2 and 6 the other way round: offsets need not increase */
  size_t tmp = offsets[2]; offsets[2] = offsets[6]; offsets[6] = tmp;
  tmp = counts[2]; counts[2] = counts[6]; counts[6] = tmp;
  test_rng r = test_rng_seed(41);
  float *x = malloc(total * sizeof *x);
  test_fill_uniform(&r, x, total, -1.0f, 1.0f);
  cl_mem bx = test_buffer(ctx, x, total), bout = test_buffer(ctx, NULL, (size_t)nseg);
  cl_mem scratch = test_buffer(ctx, NULL, cf_segment_norms_scratch_floats(counts, nseg));
  TEST_OK(cf_segment_norms(ctx, cf_at(bout, 0), cf_at(bx, 0), offsets, counts, nseg, cf_at(scratch, 0)));
  float *out = test_read(ctx, cf_at(bout, 0), (size_t)nseg);
  double ref[16];
  ref_segment_norms(ref, x, offsets, counts, nseg);
  check_rel("segment_norms (9 segments, one empty)", out, ref, (size_t)nseg);
  test_poison(ctx, cf_at(bout, 0), (size_t)nseg);
  TEST_OK(cf_segment_norms(ctx, cf_at(bout, 0), cf_at(bx, 0), offsets, counts, nseg, cf_at(scratch, 0)));
  float *again = test_read(ctx, cf_at(bout, 0), (size_t)nseg);
  TEST_ASSERT(!memcmp(out, again, (size_t)nseg * sizeof(float)), "segment_norms not bit-identical on repeat");
  free(x), free(out), free(again);
  cf_buffer_free(bx), cf_buffer_free(bout), cf_buffer_free(scratch);
}

static void test_clip(cf_context *ctx, size_t n, float clip_factor) {
  test_rng r = test_rng_seed(7 + n);
  float *x = malloc(n * sizeof *x);
  test_fill_uniform(&r, x, n, -1.0f, 1.0f);
  cl_mem bx = test_buffer(ctx, x, n), bn = test_buffer(ctx, NULL, 1);
  cl_mem scratch = test_buffer(ctx, NULL, cf_norm_scratch_floats(n));
  TEST_OK(cf_global_norm(ctx, cf_at(bn, 0), cf_at(bx, 0), n, cf_at(scratch, 0)));
  float norm;
  TEST_OK(cf_read(ctx, cf_at(bn, 0), &norm, 1));
  float clip = clip_factor * norm;
  TEST_OK(cf_clip_by_norm(ctx, cf_at(bx, 0), n, cf_at(bn, 0), clip));
  float *out = test_read(ctx, cf_at(bx, 0), n);
  double *ref = malloc(n * sizeof *ref);
  ref_clip_by_norm(ref, x, n, norm, clip);
  char what[80];
  snprintf(what, sizeof what, "clip_by_norm n=%zu clip=%.2f*norm", n, clip_factor);
  test_compare(what, out, ref, n, ATOL, RTOL);
  if (clip_factor < 1) {  /* clipping must have scaled: the new norm is the clip */
    double nn = ref_global_norm(out, n);
    TEST_ASSERT(fabs(nn - clip) <= 1e-5 * clip, "%s: norm after clipping %.9g, want %.9g", what, nn, clip);
  } else {
    TEST_ASSERT(!memcmp(out, x, n * sizeof *x), "%s: clipping changed x although clip > norm", what);
  }
  free(x), free(out), free(ref);
  cf_buffer_free(bx), cf_buffer_free(bn), cf_buffer_free(scratch);
}

/* Several Adam or AdamW steps with fresh gradients; each compared with the reference started
 * from the device's previous float state. clip: 0 none, 1 a norm buffer with clip below the norm,
 * 2 a norm buffer with clip above it (no effect). */
static void test_adam(cf_context *ctx, size_t n, int decoupled, int clip, int steps) {
  test_rng r = test_rng_seed(1000 + n + 10 * decoupled + clip);
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
  double *rp = malloc(n * sizeof *rp), *rm = malloc(n * sizeof *rm), *rv = malloc(n * sizeof *rv);
  test_fill_uniform(&r, p, n, -1.0f, 1.0f);
  cl_mem bp = test_buffer(ctx, p, n), bg = test_buffer(ctx, NULL, n), bm = test_buffer(ctx, m, n),
         bv = test_buffer(ctx, v, n), bn = test_buffer(ctx, NULL, 1);
  cl_mem scratch = test_buffer(ctx, NULL, cf_norm_scratch_floats(n));
  cf_adam h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-8f, .weight_decay = 0.1f,
               .decoupled = decoupled};
  int bad = 0;
  for (int s = 1; s <= steps; s++) {
    test_fill_uniform(&r, g, n, -0.5f, 0.5f);
    TEST_OK(cf_write(ctx, cf_at(bg, 0), g, n));
    float norm = 0, clip_norm = 0;
    if (clip) {
      TEST_OK(cf_global_norm(ctx, cf_at(bn, 0), cf_at(bg, 0), n, cf_at(scratch, 0)));
      TEST_OK(cf_read(ctx, cf_at(bn, 0), &norm, 1));
      clip_norm = clip == 1 ? 0.3f * norm : 2.0f * norm;
    }
    h.step = s;
    TEST_OK(cf_adam_update(ctx, cf_at(bp, 0), cf_at(bg, 0), cf_at(bm, 0), cf_at(bv, 0), n, &h,
                           clip ? cf_at(bn, 0) : cf_at(NULL, 0), clip_norm));
    ref_adam_update(rp, rm, rv, p, g, m, v, n, &h, clip ? &norm : NULL, clip_norm);
    TEST_OK(cf_read(ctx, cf_at(bp, 0), p, n));
    TEST_OK(cf_read(ctx, cf_at(bm, 0), m, n));
    TEST_OK(cf_read(ctx, cf_at(bv, 0), v, n));
    char what[96];
    snprintf(what, sizeof what, "%s n=%zu clip=%d step %d params", decoupled ? "adamw" : "adam", n, clip, s);
    bad += test_compare(what, p, rp, n, ATOL, RTOL);
    snprintf(what, sizeof what, "%s n=%zu clip=%d step %d m", decoupled ? "adamw" : "adam", n, clip, s);
    bad += test_compare(what, m, rm, n, ATOL, RTOL);
    snprintf(what, sizeof what, "%s n=%zu clip=%d step %d v", decoupled ? "adamw" : "adam", n, clip, s);
    bad += test_compare(what, v, rv, n, ATOL, RTOL);
  }
  /* The clip must matter when active: the same step without clipping gives other moments. */
  if (clip == 1) {
    ref_adam_update(rp, rm, rv, p, g, m, v, n, &h, NULL, 0);
    double *rp2 = malloc(n * sizeof *rp2), *rm2 = malloc(n * sizeof *rm2), *rv2 = malloc(n * sizeof *rv2);
    float norm;
    TEST_OK(cf_read(ctx, cf_at(bn, 0), &norm, 1));
    float cn = 0.3f * norm;
    ref_adam_update(rp2, rm2, rv2, p, g, m, v, n, &h, &norm, cn);
    TEST_ASSERT(fabs(rm[0] - rm2[0]) > 1e-3 * fabs(rm[0]), "clipping has no effect on m");
    free(rp2), free(rm2), free(rv2);
  }
  free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
  cf_buffer_free(bp), cf_buffer_free(bg), cf_buffer_free(bm), cf_buffer_free(bv), cf_buffer_free(bn);
  cf_buffer_free(scratch);
}

static void test_sgd(cf_context *ctx, size_t n, float momentum, int clip, int steps) {
  test_rng r = test_rng_seed(2000 + n + clip);
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *b = calloc(n, sizeof *b);
  double *rp = malloc(n * sizeof *rp), *rb = malloc(n * sizeof *rb);
  test_fill_uniform(&r, p, n, -1.0f, 1.0f);
  cl_mem bp = test_buffer(ctx, p, n), bg = test_buffer(ctx, NULL, n), bn = test_buffer(ctx, NULL, 1);
  cl_mem bb = momentum != 0 ? test_buffer(ctx, b, n) : NULL;
  cl_mem scratch = test_buffer(ctx, NULL, cf_norm_scratch_floats(n));
  for (int s = 1; s <= steps; s++) {
    test_fill_uniform(&r, g, n, -0.5f, 0.5f);
    TEST_OK(cf_write(ctx, cf_at(bg, 0), g, n));
    float norm = 0, clip_norm = 0;
    if (clip) {
      TEST_OK(cf_global_norm(ctx, cf_at(bn, 0), cf_at(bg, 0), n, cf_at(scratch, 0)));
      TEST_OK(cf_read(ctx, cf_at(bn, 0), &norm, 1));
      clip_norm = 0.5f * norm;
    }
    TEST_OK(cf_sgd_update(ctx, cf_at(bp, 0), cf_at(bg, 0), cf_at(bb, 0), n, 0.1f, momentum, 0.01f,
                          clip ? cf_at(bn, 0) : cf_at(NULL, 0), clip_norm));
    ref_sgd_update(rp, bb ? rb : NULL, p, g, bb ? b : NULL, n, 0.1f, momentum, 0.01f, clip ? &norm : NULL, clip_norm);
    TEST_OK(cf_read(ctx, cf_at(bp, 0), p, n));
    char what[96];
    snprintf(what, sizeof what, "sgd n=%zu momentum=%.1f clip=%d step %d params", n, momentum, clip, s);
    test_compare(what, p, rp, n, ATOL, RTOL);
    if (bb) {
      TEST_OK(cf_read(ctx, cf_at(bb, 0), b, n));
      snprintf(what, sizeof what, "sgd n=%zu momentum=%.1f clip=%d step %d buf", n, momentum, clip, s);
      test_compare(what, b, rb, n, ATOL, RTOL);
    }
  }
  free(p), free(g), free(b), free(rp), free(rb);
  cf_buffer_free(bp), cf_buffer_free(bg), cf_buffer_free(bn), cf_buffer_free(bb), cf_buffer_free(scratch);
}

/* Large n with offsets into shared buffers; run twice from the same state: bit-identical. */
static void test_adam_large(cf_context *ctx) {
  size_t n = 3000001, off = 5;
  test_rng r = test_rng_seed(77);
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *m = malloc(n * sizeof *m), *v = malloc(n * sizeof *v);
  test_fill_uniform(&r, p, n, -1.0f, 1.0f);
  test_fill_uniform(&r, g, n, -1.0f, 1.0f);
  test_fill_uniform(&r, m, n, -0.1f, 0.1f);
  test_fill_uniform(&r, v, n, 0.0f, 0.01f);
  /* one buffer holding params, grads, m, v back to back, like the model's flat layout */
  cl_mem all = test_buffer(ctx, NULL, off + 4 * n), bn = test_buffer(ctx, NULL, 1);
  cf_mem P = cf_at(all, off), G = cf_at(all, off + n), M = cf_at(all, off + 2 * n), Vm = cf_at(all, off + 3 * n);
  cl_mem scratch = test_buffer(ctx, NULL, cf_norm_scratch_floats(n));
  cf_adam h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .decoupled = 1,
               .step = 7};
  float *out[2][3];
  float norm = 0;
  for (int rep = 0; rep < 2; rep++) {
    TEST_OK(cf_write(ctx, P, p, n));
    TEST_OK(cf_write(ctx, G, g, n));
    TEST_OK(cf_write(ctx, M, m, n));
    TEST_OK(cf_write(ctx, Vm, v, n));
    TEST_OK(cf_global_norm(ctx, cf_at(bn, 0), G, n, cf_at(scratch, 0)));
    TEST_OK(cf_read(ctx, cf_at(bn, 0), &norm, 1));
    TEST_OK(cf_adam_update(ctx, P, G, M, Vm, n, &h, cf_at(bn, 0), 0.25f * norm));
    out[rep][0] = test_read(ctx, P, n);
    out[rep][1] = test_read(ctx, M, n);
    out[rep][2] = test_read(ctx, Vm, n);
  }
  double *rp = malloc(n * sizeof *rp), *rm = malloc(n * sizeof *rm), *rv = malloc(n * sizeof *rv);
  ref_adam_update(rp, rm, rv, p, g, m, v, n, &h, &norm, 0.25f * norm);
  test_compare("adamw n=3000001 clipped params", out[0][0], rp, n, ATOL, RTOL);
  test_compare("adamw n=3000001 clipped m", out[0][1], rm, n, ATOL, RTOL);
  test_compare("adamw n=3000001 clipped v", out[0][2], rv, n, ATOL, RTOL);
  for (int k = 0; k < 3; k++)
    TEST_ASSERT(!memcmp(out[0][k], out[1][k], n * sizeof(float)), "adamw large: output %d differs on repeat", k);
  float *gg = test_read(ctx, G, n);
  TEST_ASSERT(!memcmp(gg, g, n * sizeof *g), "adam_update modified the gradients");
  double dn = ref_global_norm(g, n);
  check_rel("global_norm n=3000001 (grads)", &norm, &dn, 1);
  free(gg), free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
  for (int rep = 0; rep < 2; rep++)
    for (int k = 0; k < 3; k++) free(out[rep][k]);
  cf_buffer_free(all), cf_buffer_free(bn), cf_buffer_free(scratch);
}

static void test_bad_args(cf_context *ctx) {
  cf_set_verbosity(-1);
  cf_adam h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0};
  cl_mem b = test_buffer(ctx, NULL, 4);
  TEST_ASSERT(cf_adam_update(ctx, cf_at(b, 0), cf_at(b, 0), cf_at(b, 0), cf_at(b, 0), 1, &h, cf_at(NULL, 0), 0) ==
                  CF_ERR_INVALID_ARG, "step 0 accepted");
  TEST_ASSERT(cf_sgd_update(ctx, cf_at(b, 0), cf_at(b, 0), cf_at(NULL, 0), 1, 0.1f, 0.9f, 0, cf_at(NULL, 0), 0) ==
                  CF_ERR_INVALID_ARG, "momentum without a buffer accepted");
  cf_buffer_free(b);
  cf_set_verbosity(1);
  cf_clear_error();
}

/* Equal as floats, NaN equal to NaN (what the watch stores is non-finite by definition). */
static int same(float a, double b) { return (isnan(a) && isnan(b)) || (double)a == b; }

/* The watch's every path: healthy stays 0 (stored values untouched), a NaN loss, an infinite norm
 * or a loss above the limit at state 0 becomes 1 and is stored, 1 and 2 become 2 keeping what was
 * stored. */
static void test_divergence_watch(cf_context *ctx) {
  struct { float state[3], loss, norm; } cases[] = {
      {{0, 5, 6}, 2.5f, 1.0f},     {{0, 5, 6}, NAN, 1.0f},      {{0, 5, 6}, 2.5f, INFINITY}, {{0, 5, 6}, -INFINITY, NAN},
      {{0, 5, 6}, 16.5f, 1.0f},    {{0, 5, 6}, 16.75f, 1.0f},   {{1, NAN, 3}, 2.5f, 1.0f},   {{2, 7, NAN}, NAN, NAN},
  };
  const float limit = 16.5f;  /* case 4 at the limit stays healthy, case 5 above it does not */
  const float expect[] = {0, 1, 1, 1, 0, 1, 2, 2};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cf_mem state = test_tensor(ctx, cases[i].state, 3, 5), loss = test_tensor(ctx, &cases[i].loss, 1, 3),
           norm = test_tensor(ctx, &cases[i].norm, 1, 1);
    TEST_OK(cf_divergence_watch(ctx, state, loss, norm, limit));
    float *out = test_read(ctx, state, 3), *before = test_read(ctx, cf_at(state.buf, 0), 5);
    double ref[3];
    ref_divergence_watch(ref, cases[i].state, cases[i].loss, cases[i].norm, limit);
    int ok = same(out[0], ref[0]) && same(out[1], ref[1]) && same(out[2], ref[2]) && out[0] == expect[i];
    TEST_ASSERT(ok, "divergence_watch case %zu: state (%g %g %g), reference (%g %g %g)", i, out[0], out[1], out[2], ref[0],
                ref[1], ref[2]);
    TEST_ASSERT(isnan(before[4]), "divergence_watch wrote before its state");
    if (ok) printf("ok   divergence_watch case %zu: state %g -> %g\n", i, cases[i].state[0], out[0]);
    free(out), free(before);
  }
  test_free_tensors();
}

/* The scan at the bad step (state 1) flags exactly the segments holding a NaN or an infinity,
 * whatever their size and wherever in them; at states 0 and 2 it writes nothing. */
static void test_nonfinite_segments(cf_context *ctx) {
  size_t counts[] = {1, 0, 257, 4099, 100003, 7, 64}, offsets[7], total = 0;
  int nseg = 7;
  for (int s = 0; s < nseg; s++) offsets[s] = total, total += counts[s] + 1;
  test_rng r = test_rng_seed(7);
  float *x = test_falloc(total);
  test_fill_uniform(&r, x, total, -3.0f, 3.0f);
  x[offsets[0]] = NAN;                      /* a one-element segment */
  x[offsets[3] + counts[3] - 1] = INFINITY; /* the last element of an odd size */
  x[offsets[4] + 50001] = -INFINITY;        /* the middle of a long one */
  x[offsets[5] + counts[5]] = NAN;          /* the gap after segment 5: belongs to none */
  uint32_t table[14];
  TEST_OK(cf_segment_table(offsets, counts, nseg, table));
  cf_mem bx = test_tensor(ctx, x, total, 3), bt = test_tensor(ctx, (const float *)(const void *)table, 14, 1);
  for (int state0 = 0; state0 < 3; state0++) {
    float state[3] = {(float)state0, 0, 0}, before[7];
    for (int s = 0; s < nseg; s++) before[s] = 0.5f;
    cf_mem flags = test_tensor(ctx, before, (size_t)nseg, 2), st = test_tensor(ctx, state, 3, 0);
    TEST_OK(cf_nonfinite_segments(ctx, flags, st, bx, bt, nseg));
    float *out = test_read(ctx, flags, (size_t)nseg);
    double *ref = test_dalloc((size_t)nseg);
    ref_nonfinite_segments(ref, before, state, x, offsets, counts, nseg);
    char what[64];
    snprintf(what, sizeof what, "nonfinite_segments state %d", state0);
    test_compare(what, out, ref, (size_t)nseg, 0, 0);
    if (state0 == 1)
      TEST_ASSERT(out[0] == 1 && out[1] == 0 && out[2] == 0 && out[3] == 1 && out[4] == 1 && out[5] == 0 && out[6] == 0,
                  "nonfinite_segments flags %g %g %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
    free(out), free(ref);
  }
  free(x);
  test_free_tensors();
}

int main(void) {
  cf_context *ctx = test_context();
  size_t norm_sizes[] = {0, 1, 257, 1000003};
  for (int i = 0; i < 4; i++) test_global_norm(ctx, norm_sizes[i], 11 + i);
  test_segment_norms(ctx);
  test_clip(ctx, 1, 0.5f);
  test_clip(ctx, 1001, 0.3f);
  test_clip(ctx, 1001, 1.5f);
  for (int dec = 0; dec < 2; dec++)
    for (int clip = 0; clip < 3; clip++) test_adam(ctx, 1037, dec, clip, 4);
  test_adam(ctx, 1, 0, 1, 3);
  test_sgd(ctx, 1037, 0.9f, 0, 3);
  test_sgd(ctx, 1037, 0.9f, 1, 3);
  test_sgd(ctx, 513, 0.0f, 0, 2);
  test_adam_large(ctx);
  test_bad_args(ctx);
  test_divergence_watch(ctx);
  test_nonfinite_segments(ctx);
  cf_context_free(ctx);
  return test_finish("test_optimizer");
}
