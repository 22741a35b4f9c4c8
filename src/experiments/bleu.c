/* Corpus BLEU as sacreBLEU 2.x (metrics/bleu.py) computes it: per sentence, the hypothesis's n-grams
 * (n = 1..4) clipped by their largest count in any reference and the closest reference length (ties
 * to the shorter); summed over the corpus; then BLEU.compute_bleu's brevity penalty, smoothing and
 * geometric mean, step for step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "experiments/bleu.h"

struct cf_bleu {
  cf_bleu_tokenizer tok;
  long long counts[4], totals[4], hyp_len, ref_len, segments;
  int nrefs;  /* references per segment; -1 when segments had different numbers ("var") */
};

typedef struct { const char *p; size_t len; } token;
typedef struct { char *text; token *t; size_t n; } segment;

const char *cf_bleu_tok_name(cf_bleu_tok tok) { return tok == CF_BLEU_NONE ? "none" : tok == CF_BLEU_INTL ? "intl" : "13a"; }

int cf_bleu_tok_parse(const char *name, cf_bleu_tok *tok) {
  static const cf_bleu_tok all[] = {CF_BLEU_13A, CF_BLEU_NONE, CF_BLEU_INTL};
  for (int i = 0; i < 3; i++)
    if (name && !strcmp(name, cf_bleu_tok_name(all[i]))) return *tok = all[i], 1;
  return 0;
}

cf_status cf_bleu_create(cf_bleu_tok tok, cf_bleu **out) {
  cf_bleu *b = calloc(1, sizeof *b);
  *out = NULL;
  if (!b) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = cf_bleu_tokenizer_init(&b->tok, tok);
  if (st != CF_OK) { free(b); return st; }
  *out = b;
  return CF_OK;
}

void cf_bleu_free(cf_bleu *b) {
  if (!b) return;
  cf_bleu_tokenizer_free(&b->tok);
  free(b);
}

static void segment_free(segment *s) {
  free(s->text);
  free(s->t);
  memset(s, 0, sizeof *s);
}

/* Tokenize text and cut it at the single spaces the tokenizer leaves between tokens. */
static cf_status segment_make(const cf_bleu_tokenizer *tk, const char *text, segment *s) {
  memset(s, 0, sizeof *s);
  CF_TRY(cf_bleu_tokenizer_run(tk, text, &s->text));
  size_t len = strlen(s->text);
  s->t = malloc((len / 2 + 1) * sizeof *s->t);
  if (!s->t) { segment_free(s); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); }
  for (const char *p = s->text; *p;) {
    const char *e = strchr(p, ' ');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    s->t[s->n++] = (token){p, l};
    p += l + (e != NULL);
  }
  return CF_OK;
}

/* Tokens a[i..i+n) equal b[j..j+n). */
static int same(const token *a, size_t i, const token *b, size_t j, int n) {
  for (int k = 0; k < n; k++)
    if (a[i + k].len != b[j + k].len || memcmp(a[i + k].p, b[j + k].p, a[i + k].len)) return 0;
  return 1;
}

/* How often the n-gram g[i..i+n) occurs in s. */
static long long occurrences(const segment *s, const token *g, size_t i, int n) {
  long long c = 0;
  for (size_t j = 0; j + (size_t)n <= s->n; j++) c += same(s->t, j, g, i, n);
  return c;
}

/* _get_closest_ref_len: the reference length nearest the hypothesis's, the shorter on a tie. */
static long long closest_ref_len(long long hyp, const segment *refs, int nrefs) {
  long long best = -1, best_diff = -1;
  for (int r = 0; r < nrefs; r++) {
    long long len = (long long)refs[r].n, diff = llabs(hyp - len);
    if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < best)) best = len, best_diff = diff;
  }
  return best;
}

/* _compute_segment_statistics: each distinct hypothesis n-gram counts min(its count, its largest
 * count in one reference) matches. */
static void add_stats(cf_bleu *b, const segment *h, const segment *refs, int nrefs) {
  for (int n = 1; n <= 4; n++) {
    for (size_t i = 0; i + (size_t)n <= h->n; i++) {
      b->totals[n - 1]++;
      size_t j = 0;
      while (j < i && !same(h->t, j, h->t, i, n)) j++;
      if (j < i) continue;  /* counted at its first occurrence */
      long long in_hyp = occurrences(h, h->t, i, n), in_ref = 0;
      for (int r = 0; r < nrefs; r++) {
        long long c = occurrences(&refs[r], h->t, i, n);
        if (c > in_ref) in_ref = c;
      }
      b->counts[n - 1] += in_hyp < in_ref ? in_hyp : in_ref;
    }
  }
  b->hyp_len += (long long)h->n;
  b->ref_len += closest_ref_len((long long)h->n, refs, nrefs);
}

cf_status cf_bleu_add(cf_bleu *b, const char *hyp, const char *const *refs, int nrefs) {
  if (!b || !hyp || !refs || nrefs < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "cf_bleu_add needs a hypothesis and references");
  segment h, *r = calloc((size_t)nrefs, sizeof *r);
  if (!r) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = segment_make(&b->tok, hyp, &h);
  int made = 0;
  while (st == CF_OK && made < nrefs) {
    if (!refs[made]) st = CF_FAIL(CF_ERR_INVALID_ARG, "cf_bleu_add: reference %d is NULL", made);
    else if ((st = segment_make(&b->tok, refs[made], &r[made])) == CF_OK) made++;
  }
  if (st == CF_OK) {
    add_stats(b, &h, r, nrefs);
    b->nrefs = b->segments++ == 0 || b->nrefs == nrefs ? nrefs : -1;
  }
  segment_free(&h);
  for (int i = 0; i < made; i++) segment_free(&r[i]);
  free(r);
  return st;
}

/* Python's my_log: log, with log(0) floored at -9999999999. */
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

cf_bleu_score cf_bleu_result(const cf_bleu *b, cf_bleu_smooth smooth) {
  cf_bleu_score s = {0};
  memcpy(s.counts, b->counts, sizeof s.counts);
  memcpy(s.totals, b->totals, sizeof s.totals);
  s.hyp_len = b->hyp_len, s.ref_len = b->ref_len;
  s.ratio = s.ref_len ? (double)s.hyp_len / (double)s.ref_len : 0.0;
  if (s.hyp_len < s.ref_len) s.bp = s.hyp_len > 0 ? exp(1.0 - (double)s.ref_len / (double)s.hyp_len) : 0.0;
  else s.bp = 1.0;
  if (!s.counts[0] && !s.counts[1] && !s.counts[2] && !s.counts[3]) return s;  /* no match at all: 0 (#141) */
  double smooth_mteval = 1.0, logs = 0.0;
  for (int n = 0; n < 4; n++) {
    if (s.totals[n] == 0) break;  /* the remaining precisions stay 0 */
    if (s.counts[n] == 0) {
      if (smooth == CF_BLEU_SMOOTH_EXP) {  /* NIST's: 1 / (2^k total) for the k-th zero */
        smooth_mteval *= 2;
        s.precisions[n] = 100.0 / (smooth_mteval * (double)s.totals[n]);
      }
    } else {
      s.precisions[n] = 100.0 * (double)s.counts[n] / (double)s.totals[n];
    }
  }
  for (int n = 0; n < 4; n++) logs += my_log(s.precisions[n]);
  s.bleu = s.bp * exp(logs / 4);
  return s;
}

void cf_bleu_format(const cf_bleu_score *s, char *buf, size_t size) {
  snprintf(buf, size, "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", s->bleu,
           s->precisions[0], s->precisions[1], s->precisions[2], s->precisions[3], s->bp, s->ratio, s->hyp_len,
           s->ref_len);
}

void cf_bleu_signature(const cf_bleu *b, cf_bleu_smooth smooth, char *buf, size_t size) {
  char nrefs[16];
  if (b->nrefs < 0) snprintf(nrefs, sizeof nrefs, "var");
  else snprintf(nrefs, sizeof nrefs, "%d", b->nrefs ? b->nrefs : 1);
  snprintf(buf, size, "nrefs:%s|case:mixed|eff:no|tok:%s|smooth:%s", nrefs, cf_bleu_tok_name(b->tok.tok),
           smooth == CF_BLEU_SMOOTH_EXP ? "exp" : "none");
}
