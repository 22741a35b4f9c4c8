/* Cases of the op table's rows: tensors sized from the dimensions, filled from a seed, placed at odd
 * offsets of their own device buffers (ending where they end), outputs poisoned; the run, the
 * reference and the comparison. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/check.h"
#include "runtime/runtime.h"

static size_t dim(const cf_op_dims *d, char letter) {
  switch (letter) {
    case 'N': return (size_t)d->N;
    case 'C': return (size_t)d->C;
    case 'B': return (size_t)d->B;
    case 'T': return (size_t)d->T;
    case 'H': return (size_t)d->NH;
    case 'V': return (size_t)d->V;
    case 'S': return d->S;
    default: return 0;  /* a typo in a row sizes its tensor 0, which its first check reports */
  }
}

static size_t tensor_size(const cf_op_tensor *t, const cf_op_dims *d) {
  size_t n = t->mult ? (size_t)t->mult : 1;
  for (const char *p = t->size; *p; p++) n *= dim(d, *p);
  return n;
}

static int compared(cf_op_role r) { return r == CF_OP_OUT || r == CF_OP_ACC || r == CF_OP_INOUT; }

static int ntensors(const cf_op *op) {
  int n = 0;
  while (n < CF_OP_MAX_TENSORS && op->t[n].name) n++;
  return n;
}

/* Key padding: even sequences padded on the right (their last key), odd ones on the left (their
 * first two keys, so their first query rows attend to nothing). */
static int mask_value(size_t k, int T) {
  int t = (int)(k % (size_t)(T > 0 ? T : 1)), b = (int)(k / (size_t)(T > 0 ? T : 1));
  return b % 2 ? t >= 2 : t < T - 1;
}

/* Host values of tensor i before the run. */
static void fill(cf_op_case *c, int i, unsigned long long *state) {
  const cf_op_tensor *t = &c->op->t[i];
  float *h = c->host[i], scale = t->scale != 0 ? t->scale : 1.0f;
  int *ints = (int *)(void *)h, V = c->d.V > 0 ? c->d.V : 1;
  for (size_t k = 0; k < c->size[i]; k++) {
    float u = cf_selftest_random(state);
    switch (t->role) {
      case CF_OP_INT: ints[k] = (int)((u + 1.0f) * 0.5f * (float)V) % V; break;
      case CF_OP_TARGETS: ints[k] = k == 2 ? -100 : (int)((u + 1.0f) * 0.5f * (float)V) % V; break;
      case CF_OP_MASK: ints[k] = mask_value(k, c->d.T); break;
      case CF_OP_OUT: h[k] = NAN; break;
      case CF_OP_SAVED: case CF_OP_SCRATCH: h[k] = 0; break;
      default: h[k] = t->shift + scale * u;
    }
  }
}

static cf_status upload(cf_op_case *c) {
  for (int i = 0; i < ntensors(c->op); i++)
    if (c->op->t[i].role != CF_OP_SAVED || !c->op->prepare) CF_TRY(cf_write(c->ctx, c->dev[i], c->host[i], c->size[i]));
  if (!c->op->prepare) return CF_OK;
  CF_TRY(c->op->prepare(c));
  for (int i = 0; i < ntensors(c->op); i++)  /* what prepare computed, for the reference */
    if (c->op->t[i].role == CF_OP_SAVED) CF_TRY(cf_read(c->ctx, c->dev[i], c->host[i], c->size[i]));
  return CF_OK;
}

/* Host arrays and a device buffer per tensor: pad floats, then the tensor, and nothing after it. */
static cf_status allocate(cf_op_case *c, size_t pad) {
  for (int i = 0; i < ntensors(c->op); i++) {
    c->size[i] = tensor_size(&c->op->t[i], &c->d);
    c->host[i] = malloc((c->size[i] + 1) * sizeof(float));
    c->ref[i] = compared(c->op->t[i].role) ? malloc((c->size[i] + 1) * sizeof(double)) : NULL;
    if (!c->host[i] || (compared(c->op->t[i].role) && !c->ref[i])) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    size_t floats = pad + c->size[i] ? pad + c->size[i] : 1;  /* an empty buffer is not allowed */
    CF_TRY(cf_buffer_create(c->ctx, floats * sizeof(float), &c->bufs[i]));
    c->dev[i] = cf_at(c->bufs[i], pad);
  }
  return CF_OK;
}

cf_status cf_op_case_create(cf_context *ctx, const cf_op *op, const cf_op_dims *d, size_t pad, unsigned long long seed,
                            cf_op_case **out) {
  cf_op_case *c = calloc(1, sizeof *c);
  if (!c) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  c->ctx = ctx;
  c->op = op;
  c->d = *d;
  if (op->scratch) c->d.S = op->scratch(&c->d);
  cf_status st = allocate(c, pad);
  unsigned long long state = seed;
  for (int i = 0; st == CF_OK && i < ntensors(op); i++) fill(c, i, &state);
  if (st == CF_OK) st = upload(c);
  if (st != CF_OK) {
    cf_op_case_free(c);
    return st;
  }
  *out = c;
  return CF_OK;
}

cf_status cf_op_case_reset(cf_op_case *c) {
  for (int i = 0; i < ntensors(c->op); i++)  /* what prepare left stays */
    if (c->op->t[i].role != CF_OP_SAVED && c->op->t[i].role != CF_OP_SCRATCH) CF_TRY(cf_write(c->ctx, c->dev[i], c->host[i], c->size[i]));
  return cf_context_finish(c->ctx);
}

cf_status cf_op_case_run(cf_op_case *c, double *ms) {
  CF_TRY(cf_context_finish(c->ctx));
  double t0 = cf_now();
  CF_TRY(c->op->run(c));
  CF_TRY(cf_context_finish(c->ctx));
  if (ms) *ms = 1e3 * (cf_now() - t0);
  return CF_OK;
}

cf_status cf_op_case_read(cf_op_case *c, float **out, size_t *n) {
  size_t total = 0, at = 0;
  for (int i = 0; i < ntensors(c->op); i++) total += compared(c->op->t[i].role) ? c->size[i] : 0;
  float *v = malloc((total + 1) * sizeof *v);
  if (!v) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < ntensors(c->op); i++) {
    if (!compared(c->op->t[i].role)) continue;
    cf_status st = cf_read(c->ctx, c->dev[i], v + at, c->size[i]);
    if (st != CF_OK) { free(v); return st; }
    at += c->size[i];
  }
  *out = v;
  *n = total;
  return CF_OK;
}

/* The reference's results of the compared tensors, concatenated like cf_op_case_read's. */
static double *reference(cf_op_case *c) {
  size_t total = 0, at = 0;
  for (int i = 0; i < ntensors(c->op); i++)
    if (compared(c->op->t[i].role)) {
      for (size_t k = 0; k < c->size[i]; k++) c->ref[i][k] = c->op->t[i].role == CF_OP_OUT ? NAN : c->host[i][k];
      total += c->size[i];
    }
  c->op->reference(c);
  double *r = malloc((total + 1) * sizeof *r);
  for (int i = 0; r && i < ntensors(c->op); i++)
    if (compared(c->op->t[i].role)) {
      memcpy(r + at, c->ref[i], c->size[i] * sizeof *r);
      at += c->size[i];
    }
  return r;
}

void cf_op_case_free(cf_op_case *c) {
  if (!c) return;
  for (int i = 0; i < CF_OP_MAX_TENSORS; i++) {
    free(c->host[i]);
    free(c->ref[i]);
    cf_buffer_free(c->bufs[i]);
  }
  free(c);
}

cf_status cf_op_check(cf_context *ctx, const cf_op *op, const cf_op_dims *d, size_t pad, unsigned long long seed,
                      cf_selftest *t) {
  cf_op_case *c;
  CF_TRY(cf_op_case_create(ctx, op, d, pad, seed, &c));
  double ms = 0;
  float *got = NULL;
  double *ref = NULL;
  size_t n = 0;
  cf_status st = cf_op_case_run(c, NULL);  /* builds the program */
  if (st == CF_OK) st = cf_op_case_reset(c);
  if (st == CF_OK) st = cf_op_case_run(c, &ms);
  if (st == CF_OK) st = cf_op_case_read(c, &got, &n);
  if (st == CF_OK && !(ref = reference(c))) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) cf_selftest_check(t, op->name, got, ref, n, op->atol, op->rtol, ms);
  free(got);
  free(ref);
  cf_op_case_free(c);
  return st;
}
