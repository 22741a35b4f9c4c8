/* The encoder-decoder (model.arch encoder_decoder): loss and every gradient against an independent
 * PyTorch implementation (tools/torch_seq2seq.py, float64) for Pre-LN and Post-LN, tied or not,
 * sinusoidal or learned positions, on a batch padded on both sides; gradients by central
 * differences too (a few elements of the cross-attention, encoder and embedding tensors); nothing
 * read from padded source positions; decoding's next-token log-probabilities equal the teacher-
 * forced forward's; bad batches refused. The PyTorch part is skipped, visibly, without PyTorch. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "clformer/clformer.h"
#include "clformer/train.h"
#include "testutil.h"

enum { B = 3, S = 7, T = 6, V = 300, MAX_LEN = 8 };

static const char *python(void) {
  if (system("/usr/bin/python3 -c 'import torch, yaml' >/dev/null 2>&1") == 0) return "/usr/bin/python3";
  return NULL;
}

static void seq2seq_config(cf_config *c, int norm, int tie, int learned, cf_activation act) {
  test_model_config(c, 2, 16, 2, 24);
  c->model.activation = act;
  c->model.arch = CF_ARCH_ENCODER_DECODER;
  c->model.encoder_layers = 3;
  c->model.norm = norm;
  c->model.tie_embeddings = tie;
  c->model.positions = learned ? CF_POS_LEARNED : CF_POS_SINUSOIDAL;
  c->model.scale_embeddings = 1;
  c->model.label_smoothing = 0.1;
  c->data.tokenizer = CF_TOKENIZER_BPE;
  c->data.vocab_size = V;
  snprintf(c->data.valid, sizeof c->data.valid, "unused");
  snprintf(c->data.source_lang, sizeof c->data.source_lang, "es");
  snprintf(c->data.target_lang, sizeof c->data.target_lang, "en");
  c->data.max_len = MAX_LEN;
  c->data.max_tokens = 4 * MAX_LEN;
  test_validate(c);
}

/* A batch of three pairs: sources of 7, 4 and 2 tokens (eos last) and targets of 6, 3 and 5, padded. */
typedef struct batch { int src[B * S], src_len[B], tgt_in[B * T], tgt_out[B * T]; } batch;

static void make_batch(batch *b, test_rng *r) {
  static const int slen[B] = {7, 4, 2}, tlen[B] = {6, 3, 5};
  memset(b, 0, sizeof *b);
  for (int i = 0; i < B; i++) {
    b->src_len[i] = slen[i];
    for (int t = 0; t < slen[i]; t++) b->src[i * S + t] = t == slen[i] - 1 ? 2 : 3 + (int)(test_uniform(r) * (V - 3));
    for (int t = 0; t < tlen[i]; t++) {
      int id = 3 + (int)(test_uniform(r) * (V - 3));
      b->tgt_out[i * T + t] = t == tlen[i] - 1 ? 2 : id;
      if (t + 1 < T) b->tgt_in[i * T + t + 1] = b->tgt_out[i * T + t];
    }
    b->tgt_in[i * T] = 1;
    for (int t = tlen[i]; t < T; t++) b->tgt_in[i * T + t] = 0;  /* after the last target: pad */
  }
}

static cf_pair_input input_of(const batch *b) {
  cf_pair_input in = {B, S, T, b->src, b->src_len, b->tgt_in, b->tgt_out};
  return in;
}

static cf_model *make_model(cf_context *ctx, cf_config *c) {
  cf_model *m;
  int Bm, Tm;
  cf_model_shape(c, &Bm, &Tm);
  TEST_OK(cf_model_create(ctx, &c->model, &c->optim, c->seed, Bm, Tm, &m));
  TEST_OK(cf_model_init(m, 5));
  /* LN gains and biases off their initial values, so their gradients are exercised */
  size_t P = cf_model_flat_floats(m);
  float *p = malloc(P * sizeof *p);
  test_rng r = test_rng_seed(17);
  TEST_OK(cf_model_read(m, 0, p));
  for (size_t i = 0; i < P; i++) p[i] += 0.1f * (float)(test_uniform(&r) - 0.5);
  TEST_OK(cf_model_write(m, 0, p));
  free(p);
  return m;
}

static float loss_of(cf_model *m, const batch *b) {
  cf_pair_input in = input_of(b);
  float loss;
  TEST_OK(cf_model_forward_pairs(m, &in, 1, 0, 1, 0));
  TEST_OK(cf_model_loss(m, &loss));
  return loss;
}

/* Save the checkpoint and the batch with clformer's loss and gradients; torch_seq2seq.py compares. */
static void torch_agrees(const char *py, const char *dir, cf_model *m, const cf_config *c, const batch *b, float loss,
                         const float *g) {
  char ckpt[512], grads[512], cmd[2048];
  snprintf(ckpt, sizeof ckpt, "%s/model.safetensors", dir);
  snprintf(grads, sizeof grads, "%s/grads.safetensors", dir);
  cf_train_state ts = {.best_valid = 0};
  TEST_OK(cf_checkpoint_save(m, c, &ts, ckpt));
  int nv = cf_model_num_views(m);
  cf_st_tensor *t = calloc((size_t)nv + 5, sizeof *t);
  float src[B * S], len[B], in[B * T], out[B * T];
  for (int i = 0; i < B * S; i++) src[i] = (float)b->src[i];
  for (int i = 0; i < B; i++) len[i] = (float)b->src_len[i];
  for (int i = 0; i < B * T; i++) in[i] = (float)b->tgt_in[i], out[i] = (float)b->tgt_out[i];
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    t[i] = (cf_st_tensor){v->name, g + v->off, v->ndim, {v->shape[0], v->shape[1]}};
  }
  t[nv] = (cf_st_tensor){"src", src, 2, {B, S}};
  t[nv + 1] = (cf_st_tensor){"src_len", len, 1, {B}};
  t[nv + 2] = (cf_st_tensor){"tgt_in", in, 2, {B, T}};
  t[nv + 3] = (cf_st_tensor){"tgt_out", out, 2, {B, T}};
  t[nv + 4] = (cf_st_tensor){"loss", &loss, 1, {1}};
  TEST_OK(cf_safetensors_write(grads, t, nv + 5, NULL, 0));
  free(t);
  fflush(stdout);
  snprintf(cmd, sizeof cmd, "%s %s/tools/torch_seq2seq.py %s %s --tol 1e-4", py, CLFORMER_SOURCE_DIR, ckpt, grads);
  TEST_ASSERT(system(cmd) == 0, "PyTorch disagrees (%s)", cmd);
}

/* The index (in the flat buffer) of the element of tensor v with the largest |g| not in taken. */
static size_t largest(const cf_tensor_view *v, const float *g, const size_t *taken, int n) {
  size_t best = v->off;
  for (size_t i = v->off; i < v->off + v->numel; i++) {
    int skip = 0;
    for (int k = 0; k < n; k++) skip |= taken[k] == i;
    if (!skip && fabsf(g[i]) > fabsf(g[best])) best = i;
  }
  return best;
}

/* d loss / d p for tensor `name`'s three elements of largest gradient, by central differences in
 * float: h = 1e-2 on a smooth model (GELU: no ReLU kink between p - h and p + h), the loss a mean of
 * O(1) terms, so rounding stays near 1e-6 / h and the curvature's error O(h^2). */
static void finite_differences(cf_model *m, const batch *b, const float *g, const char *name) {
  const cf_tensor_view *v = cf_model_find_view(m, name);
  TEST_ASSERT(v != NULL, "no tensor %s", name);
  if (!v) return;
  size_t P = cf_model_flat_floats(m), taken[3];
  float *p = malloc(P * sizeof *p);
  TEST_OK(cf_model_read(m, 0, p));
  for (int k = 0; k < 3; k++) {
    size_t i = taken[k] = largest(v, g, taken, k);
    float keep = p[i], h = 1e-2f;
    p[i] = keep + h;
    TEST_OK(cf_model_write(m, 0, p));
    double up = loss_of(m, b);
    p[i] = keep - h;
    TEST_OK(cf_model_write(m, 0, p));
    double down = loss_of(m, b);
    p[i] = keep;
    double fd = (up - down) / (2.0 * h);
    TEST_ASSERT(fabs(fd - g[i]) <= 3e-4 + 1e-2 * fabs(fd), "%s[%zu]: backward %g, central difference %g", name,
                i - v->off, g[i], fd);
  }
  TEST_OK(cf_model_write(m, 0, p));
  free(p);
}

static void check(cf_context *ctx, const char *py, const char *dir, int norm, int tie, int learned, cf_activation act) {
  cf_config c;
  seq2seq_config(&c, norm, tie, learned, act);
  cf_model *m = make_model(ctx, &c);
  test_rng r = test_rng_seed(3);
  batch b;
  make_batch(&b, &r);
  float loss = loss_of(m, &b);
  TEST_ASSERT(isfinite(loss) && loss > 0, "loss %g", loss);
  TEST_OK(cf_model_backward(m));
  float *g = malloc(cf_model_flat_floats(m) * sizeof *g);
  TEST_OK(cf_model_read(m, 1, g));
  printf("%s-LN, tied %d, learned positions %d, activation %d: loss %.6f\n", norm == CF_NORM_PRE ? "Pre" : "Post", tie,
         learned, act, loss);
  if (py) torch_agrees(py, dir, m, &c, &b, loss, g);
  if (act != CF_ACT_RELU) {
    finite_differences(m, &b, g, "decoder.layers.1.cross.kv.weight");
    finite_differences(m, &b, g, "decoder.layers.0.cross.q.weight");
    finite_differences(m, &b, g, "encoder.layers.0.attn.qkv.weight");
    finite_differences(m, &b, g, "wte");
  }
  /* padded source positions are never read: other ids there change nothing */
  batch other = b;
  for (int i = 0; i < B; i++)
    for (int t = b.src_len[i]; t < S; t++) other.src[i * S + t] = 7 + t;
  TEST_ASSERT(loss_of(m, &other) == loss, "the loss depends on padded source ids");
  free(g);
  cf_model_free(m);
}

/* The largest difference between the log-probabilities lp (B, V) after prefixes of length len and
 * the log-softmax of the teacher-forced logits (B, T, V) at position len - 1; NaN counts as worst. */
static double worst_difference(const float *teacher, const float *lp, int len) {
  double worst = 0;
  for (int i = 0; i < B; i++) {
    const float *row = teacher + ((size_t)i * T + len - 1) * V;
    double most = row[0], sum = 0;
    for (int v = 1; v < V; v++) most = fmax(most, row[v]);
    for (int v = 0; v < V; v++) sum += exp(row[v] - most);
    for (int v = 0; v < V; v++) {
      double err = fabs(lp[i * V + v] - (row[v] - most - log(sum)));
      if (!(err <= worst)) worst = err;
    }
  }
  return worst;
}

/* Decoding: encode, then the log-probabilities after each prefix of the targets equal the
 * log-softmax of the teacher-forced forward's logits at that position (the decoder is causal), over
 * whole prefixes and incrementally (the keys and values of earlier positions kept). */
static void decoding_matches_forward(cf_context *ctx, int norm) {
  cf_config c;
  seq2seq_config(&c, norm, 1, 0, CF_ACT_RELU);
  cf_model *m = make_model(ctx, &c);
  test_rng r = test_rng_seed(4);
  batch b;
  make_batch(&b, &r);
  loss_of(m, &b);
  float *teacher = malloc((size_t)B * T * V * sizeof *teacher), *lp = malloc((size_t)B * V * sizeof *lp);
  for (int i = 0; i < B; i++)
    for (int t = 0; t < T; t++) TEST_OK(cf_model_logits(m, i, t, teacher + ((size_t)i * T + t) * V));
  TEST_OK(cf_model_encode(m, b.src, b.src_len, B, S));
  int prefix[B * T];
  for (int incremental = 0; incremental < 2; incremental++) {
    if (incremental) TEST_OK(cf_model_decode_start(m, T));
    for (int len = 1; len <= T; len++) {
      for (int i = 0; i < B; i++) memcpy(prefix + i * len, b.tgt_in + i * T, (size_t)len * sizeof(int));
      if (incremental) TEST_OK(cf_model_decode_next(m, prefix, len, lp));
      else TEST_OK(cf_model_next_logprobs(m, prefix, B, len, lp));
      double worst = worst_difference(teacher, lp, len);
      TEST_ASSERT(worst <= 1e-4, "%s decoding differs from the forward by %g at prefix length %d",
                  incremental ? "incremental" : "whole-prefix", worst, len);
    }
  }
  TEST_ASSERT(cf_model_decode_next(m, prefix, 2, lp) == CF_ERR_INVALID_ARG, "a position out of turn");
  /* a backward needs a forward with targets, not a decode */
  TEST_ASSERT(cf_model_backward(m) == CF_ERR_INVALID_ARG, "backward after decoding");
  free(teacher);
  free(lp);
  cf_model_free(m);
}

static void refuses_bad_batches(cf_context *ctx) {
  cf_config c;
  seq2seq_config(&c, CF_NORM_PRE, 1, 1, CF_ACT_RELU);
  cf_model *m = make_model(ctx, &c);
  test_rng r = test_rng_seed(5);
  batch b;
  make_batch(&b, &r);
  cf_pair_input in = input_of(&b);
  batch bad = b;
  bad.src_len[1] = 0;
  cf_pair_input x = input_of(&bad);
  TEST_ASSERT(cf_model_forward_pairs(m, &x, 1, 0, 1, 1) == CF_ERR_INVALID_ARG, "a source of length 0");
  bad = b;
  bad.tgt_out[4] = V;
  x = input_of(&bad);
  TEST_ASSERT(cf_model_forward_pairs(m, &x, 1, 0, 1, 1) == CF_ERR_INVALID_ARG, "a target outside the vocabulary");
  x = in;
  x.S = MAX_LEN + 1;
  TEST_ASSERT(cf_model_forward_pairs(m, &x, 1, 0, 1, 1) == CF_ERR_INVALID_ARG, "a source longer than data.max_len");
  int many[5 * MAX_LEN], lens[5] = {7, 7, 7, 7, 7};
  for (int i = 0; i < 5 * MAX_LEN; i++) many[i] = 2;
  cf_pair_input wide = {5, 7, 6, many, lens, many, many};  /* 5 x 7 source tokens: over the 32 laid out */
  TEST_ASSERT(cf_model_forward_pairs(m, &wide, 1, 0, 1, 1) == CF_ERR_INVALID_ARG, "more tokens than data.max_tokens");
  int ids[4] = {1, 5, 6, 7};
  TEST_ASSERT(cf_model_forward(m, ids, ids, 1, 1) == CF_ERR_INVALID_ARG, "a language-model forward");
  TEST_OK(cf_model_forward_pairs(m, &in, 1, 0, 1, 1));  /* still usable */
  TEST_OK(cf_model_backward(m));
  cf_model_free(m);
}

int main(void) {
  const char *py = python();
  if (!py) printf("SKIP (PyTorch part): PyTorch is not installed (apt-get install python3-torch; tools/test.sh does)\n");
  cf_context *ctx = test_context();
  char dir[] = "/tmp/clformer-seq2seq-XXXXXX";
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  check(ctx, py, dir, CF_NORM_PRE, 1, 0, CF_ACT_RELU);
  check(ctx, py, dir, CF_NORM_POST, 0, 1, CF_ACT_GELU_TANH);
  check(ctx, py, dir, CF_NORM_PRE, 0, 1, CF_ACT_GELU_TANH);
  check(ctx, py, dir, CF_NORM_POST, 1, 0, CF_ACT_RELU);
  decoding_matches_forward(ctx, CF_NORM_PRE);
  decoding_matches_forward(ctx, CF_NORM_POST);
  refuses_bad_batches(ctx);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  TEST_ASSERT(system(cmd) == 0, "cleanup");
  cf_context_free(ctx);
  return test_finish("test_seq2seq");
}
