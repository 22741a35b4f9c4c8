/* Translating text with a trained encoder-decoder: BPE in, beam search on the device, BPE out; and
 * the BLEU of a test set's translations. Sentences of similar length share a batch, each repeated
 * once per hypothesis (row s*beam + k of the model's batch is hypothesis k of sentence s). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "clformer/experiments.h"
#include "model/beam.h"

enum { PAD = CF_BPE_PAD, BOS = CF_BPE_BOS, EOS = CF_BPE_EOS };

/* A sentence's source ids (eos last). */
typedef struct source {
  int *ids, n;
  size_t line;
} source;

static int by_length(const void *a, const void *b) {
  const source *x = a, *y = b;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return x->line < y->line ? -1 : x->line > y->line;
}

/* Every line's ids, eos appended, cut to max_len - 1 tokens before it; sorted by length. */
static cf_status encode_lines(const cf_bpe *bpe, const char *const *lines, size_t n, int max_len, source *src,
                              size_t *truncated) {
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(lines[i]);
    src[i].line = i;
    src[i].ids = malloc((len + 1) * sizeof *src[i].ids);
    if (!src[i].ids) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    size_t k = cf_bpe_encode(bpe, lines[i], len, src[i].ids);
    if (k > (size_t)max_len - 1) {
      k = (size_t)max_len - 1;
      if (truncated) (*truncated)++;
    }
    src[i].ids[k] = EOS;
    src[i].n = (int)k + 1;
  }
  qsort(src, n, sizeof *src, by_length);
  return CF_OK;
}

/* The scorer: the decoder over each row's new position, the earlier positions' keys and values
 * kept (cf_model_decode_next). A beam's rows change places from step to step, so the kept rows
 * follow their hypotheses: each row's parent is the row of the step before whose prefix it
 * extends. */
typedef struct scorer {
  cf_model *m;
  int max_len, beam;
  int known;            /* ids the BPE has; a model's larger vocabulary (data.vocab_size) has unused ones */
  int *prev, *parents;  /* the last step's prefixes (n, len - 1); each row's parent */
} scorer;

/* Each row's parent among its sentence's rows (itself when its own prefix goes on); whether any
 * row moved. A row holding no hypothesis may match none: its scores are ignored, so it stays. */
static int find_parents(scorer *s, const int *prefix, int n, int len) {
  int moved = 0, L = len - 1;
  size_t bytes = (size_t)L * sizeof *prefix;
  for (int i = 0; i < n; i++) {
    const int *mine = prefix + (size_t)i * len;
    int parent = i, first = i / s->beam * s->beam;
    if (memcmp(mine, s->prev + (size_t)i * L, bytes))
      for (int j = first; j < first + s->beam; j++)
        if (!memcmp(mine, s->prev + (size_t)j * L, bytes)) {
          parent = j;
          break;
        }
    s->parents[i] = parent;
    moved |= parent != i;
  }
  return moved;
}

static cf_status next_logprobs(void *user, const int *prefix, int n, int len, float *logprobs) {
  scorer *s = user;
  if (len == 1) CF_TRY(cf_model_decode_start(s->m, s->max_len));
  else if (find_parents(s, prefix, n, len)) CF_TRY(cf_model_decode_reorder(s->m, s->parents));
  CF_TRY(cf_model_decode_next(s->m, prefix, len, logprobs));
  memcpy(s->prev, prefix, (size_t)n * len * sizeof *prefix);
  int V = cf_model_vocab(s->m);
  for (int i = 0; i < n; i++)  /* an id the BPE never made is never the answer */
    for (int v = s->known; v < V; v++) logprobs[(size_t)i * V + v] = -INFINITY;
  return CF_OK;
}

/* The longest output of a source of S tokens: twice its length and some, within the model. */
static int output_limit(int S, int max_len) { return 2 * S + 10 < max_len ? 2 * S + 10 : max_len; }

/* Sentences from[0..count) (all of at most S tokens), beam-searched; their translations' text. */
static cf_status translate_batch(cf_model *m, const cf_bpe *bpe, const source *from, int count, int S, int max_out,
                                 const cf_translate_options *o, char **out) {
  int k = o->beam, rows = count * k;
  int *src = calloc((size_t)rows * S, sizeof *src), *len = malloc((size_t)rows * sizeof *len);
  int *ids = malloc((size_t)count * max_out * sizeof *ids), *lens = malloc((size_t)count * sizeof *lens);
  scorer sc = {m, max_out, k, cf_bpe_vocab_size(bpe), malloc((size_t)rows * max_out * sizeof(int)),
               malloc((size_t)rows * sizeof(int))};
  cf_status st = src && len && ids && lens && sc.prev && sc.parents ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int r = 0; st == CF_OK && r < rows; r++) {
    const source *s = &from[r / k];
    memcpy(src + (size_t)r * S, s->ids, (size_t)s->n * sizeof *src);
    len[r] = s->n;
  }
  if (st == CF_OK) st = cf_model_encode(m, src, len, rows, S);
  int *limits = malloc((size_t)count * sizeof *limits);  /* each sentence's own, as if alone */
  for (int i = 0; limits && i < count; i++) limits[i] = output_limit(from[i].n, cf_model_seq_len(m));
  if (st == CF_OK && !limits) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_beam_options bo = {k, o->len_penalty, max_out, BOS, EOS, PAD, cf_model_vocab(m), limits};
  if (st == CF_OK) st = cf_beam_search(&bo, count, next_logprobs, &sc, ids, lens, NULL);
  for (int i = 0; st == CF_OK && i < count; i++) {
    size_t bytes;
    st = cf_bpe_decode(bpe, ids + (size_t)i * max_out, (size_t)lens[i], &out[from[i].line], &bytes);
    if (st == CF_OK) st = cf_utf8_replace_invalid(&out[from[i].line], bytes);
  }
  free(src);
  free(len);
  free(ids);
  free(lens);
  free(sc.prev);
  free(sc.parents);
  free(limits);
  return st;
}

cf_status cf_translate_lines(cf_model *m, const cf_bpe *bpe, const char *const *lines, size_t n,
                             const cf_translate_options *o, char **out, size_t *truncated, cf_progress_fn progress,
                             void *user) {
  int T = cf_model_seq_len(m), cap = cf_model_batch(m) * T;  /* tokens a side the model holds */
  if (o->beam < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "a beam of %d: at least 1", o->beam);
  if ((size_t)o->beam * T > (size_t)cap)
    return CF_FAIL(CF_ERR_INVALID_ARG, "a beam of %d x %d tokens is more than the %d tokens the model holds a batch "
                   "(data.max_tokens): lower the beam", o->beam, T, cap);
  if (truncated) *truncated = 0;
  for (size_t i = 0; i < n; i++) out[i] = NULL;
  source *src = calloc(n ? n : 1, sizeof *src);
  if (!src) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = encode_lines(bpe, lines, n, T, src, truncated);
  double t0 = cf_now();
  for (size_t i = 0; st == CF_OK && i < n;) {
    /* the longest sentence is the batch's last: as many as fit with it */
    size_t j = i + 1;
    while (j < n && (j + 1 - i) * o->beam * output_limit(src[j].n, T) <= (size_t)cap &&
           (j + 1 - i) * o->beam * src[j].n <= (size_t)cap)
      j++;
    int S = src[j - 1].n;
    st = translate_batch(m, bpe, src + i, (int)(j - i), S, output_limit(S, T), o, out);
    if (st == CF_OK && progress) progress(user, (int)j, (int)n, "sentences", cf_now() - t0, 0);
    i = j;
  }
  cf_model_decode_end(m);  /* the cache is outside the model's memory plan: not kept past translating */
  for (size_t i = 0; i < n; i++) free(src[i].ids);
  free(src);
  if (st != CF_OK)
    for (size_t i = 0; i < n; i++) free(out[i]), out[i] = NULL;
  return st;
}

/* A file's lines (without their '\n' or a '\r' before it), at most limit (0: all), pointing into *text. */
static cf_status read_lines(const char *path, size_t limit, char **text, char ***lines, size_t *n) {
  size_t len;
  *lines = NULL;
  *n = 0;
  CF_TRY(cf_read_regular_file(path, (size_t)1 << 31, "text", CF_ERR_DATA, text, &len));
  size_t cap = 1;
  for (size_t i = 0; i < len; i++) cap += (*text)[i] == '\n';
  *lines = malloc(cap * sizeof **lines);
  if (!*lines) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (char *p = *text; *p && (!limit || *n < limit);) {
    char *nl = strchr(p, '\n');
    (*lines)[(*n)++] = p;
    if (!nl) break;
    *nl = 0;
    if (nl > p && nl[-1] == '\r') nl[-1] = 0;  /* CRLF reads as LF, as training's pairs and translate's input */
    p = nl + 1;
  }
  return CF_OK;
}

cf_status cf_translate_bleu(cf_model *m, const cf_bpe *bpe, const char *src_path, const char *ref_path, size_t limit,
                            const cf_translate_options *o, cf_bleu_score *score) {
  char *stext = NULL, *rtext = NULL, **src = NULL, **ref = NULL, **hyp = NULL;
  size_t ns = 0, nr = 0;
  cf_bleu *b = NULL;
  cf_status st = read_lines(src_path, limit, &stext, &src, &ns);
  if (st == CF_OK) st = read_lines(ref_path, limit, &rtext, &ref, &nr);
  if (st == CF_OK && ns != nr)
    st = CF_FAIL(CF_ERR_DATA, "%s has %zu lines and %s %zu: not aligned", src_path, ns, ref_path, nr);
  if (st == CF_OK && !(hyp = calloc(ns ? ns : 1, sizeof *hyp))) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) st = cf_translate_lines(m, bpe, (const char *const *)src, ns, o, hyp, NULL, NULL, NULL);
  if (st == CF_OK) st = cf_bleu_create(CF_BLEU_13A, &b);
  for (size_t i = 0; st == CF_OK && i < ns; i++) st = cf_bleu_add(b, hyp[i], (const char *const *)&ref[i], 1);
  if (st == CF_OK) *score = cf_bleu_result(b, CF_BLEU_SMOOTH_EXP);
  cf_bleu_free(b);
  for (size_t i = 0; hyp && i < ns; i++) free(hyp[i]);
  free(hyp);
  free(src);
  free(ref);
  free(stext);
  free(rtext);
  return st;
}
