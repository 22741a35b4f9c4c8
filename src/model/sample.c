/* Generation: the next byte after a text, greedy or sampled (temperature, top-k, nucleus). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/model.h"
#include "runtime/runtime.h"

typedef struct candidate { float p; int v; } candidate;

static int by_probability(const void *a, const void *b) {
  float x = ((const candidate *)a)->p, y = ((const candidate *)b)->p;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int argmax(const float *logits, int V) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  return best;
}

/* A draw from the softmax of logits / temperature, restricted to the top_k most likely and then to
 * the smallest set whose probability reaches top_p; u in [0, 1) is the draw's uniform number. */
static int draw(const float *logits, int V, const cf_sample_options *o, double u, candidate *c) {
  float mx = -INFINITY;
  for (int v = 0; v < V; v++) mx = fmaxf(mx, logits[v]);
  double sum = 0;
  for (int v = 0; v < V; v++) {
    c[v].v = v;
    c[v].p = expf((float)((logits[v] - mx) / o->temperature));
    sum += c[v].p;
  }
  qsort(c, (size_t)V, sizeof *c, by_probability);
  int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  double cum = 0, kept = 0, run = 0;
  for (int i = 0; i < keep; i++) {
    cum += c[i].p / sum;
    if (cum >= o->top_p) { keep = i + 1; break; }
  }
  for (int i = 0; i < keep; i++) kept += c[i].p;
  u *= kept;
  for (int i = 0; i < keep; i++) {
    run += c[i].p;
    if (u < run) return c[i].v;
  }
  return c[keep - 1].v;
}

cf_status cf_model_sample_next(cf_model *m, const int *text, size_t n, const cf_sample_options *o, uint32_t index,
                               int *next) {
  int T = cf_model_seq_len(m), V = cf_model_vocab(m);
  if (n == 0 || cf_model_batch(m) != 1) return CF_FAIL(CF_ERR_INVALID_ARG, "sampling needs a text and a batch-1 model");
  size_t start = n > (size_t)T ? n - (size_t)T : 0, len = n - start;
  int *window = calloc((size_t)T, sizeof *window);
  float *logits = malloc((size_t)V * sizeof *logits);
  candidate *c = malloc((size_t)V * sizeof *c);
  cf_status st = window && logits && c ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) {
    memcpy(window, text + start, len * sizeof *window);
    st = cf_model_forward(m, window, NULL, 0, 0);
  }
  if (st == CF_OK) st = cf_model_logits(m, 0, (int)len - 1, logits);
  if (st == CF_OK && o->temperature == 0) *next = argmax(logits, V);
  else if (st == CF_OK)
    *next = draw(logits, V, o, cf_random_uniform((uint32_t)o->seed, (uint32_t)(o->seed >> 32), 0x5a3e, index), c);
  free(window);
  free(logits);
  free(c);
  return st;
}
