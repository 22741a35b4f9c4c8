/* Beam search over a caller's scorer (see beam.h): fairseq's sequence generator on the host, in
 * double-precision scores so that the result does not hang on float rounding of long sums. Not a
 * device path: a step's cost is the scorer's; the search itself is about beam*V comparisons. */
#include "model/beam.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"

/* One continuation: hypothesis hyp (within its sentence) followed by token, with the summed
 * log-probability score. */
typedef struct candidate {
  double score;
  int token, hyp;
} candidate;

typedef struct beam_state {
  const cf_beam_options *o;
  int S, n, K;           /* sentences, rows (S*beam), candidates kept per sentence (2*beam) */
  int *tokens, *next;    /* (n, max_len): each row's generated ids, then pad */
  double *score, *next_score; /* (n): summed log-probabilities; -inf: the row holds no hypothesis */
  int *prefix;           /* (n, len) packed for the scorer: bos, then the row's ids */
  float *logprobs;       /* (n, V) */
  candidate *cand;       /* (K) the best candidates, best first */
  int *finished;         /* (S) finished hypotheses so far */
  unsigned char *done;   /* (S) */
  double *best;          /* (S) the best finished hypothesis' normalized score */
  int *ids, *lens;       /* the caller's outputs, updated as hypotheses finish */
} beam_state;

static cf_status check_options(const cf_beam_options *o, int S, cf_next_logprobs_fn fn, const int *ids,
                               const int *lens) {
  if (!o || !fn || S < 0 || (S > 0 && (!ids || !lens)))
    return CF_FAIL(CF_ERR_INVALID_ARG, "beam search: missing options, scorer or outputs, or %d sentences", S);
  if (o->beam < 1 || o->beam > INT_MAX / 2 || o->V < 3 || o->max_len < 1 || !isfinite(o->len_penalty))
    return CF_FAIL(CF_ERR_INVALID_ARG, "beam search: needs beam >= 1, V >= 3, max_len >= 1 and a finite "
                   "len_penalty (got beam %d, V %d, max_len %d, len_penalty %g)", o->beam, o->V, o->max_len,
                   o->len_penalty);
  int b = o->bos, e = o->eos, p = o->pad;
  if (b < 0 || b >= o->V || e < 0 || e >= o->V || p < 0 || p >= o->V || b == e || b == p || e == p)
    return CF_FAIL(CF_ERR_INVALID_ARG, "beam search: bos %d, eos %d and pad %d must be distinct ids below V = %d",
                   b, e, p, o->V);
  for (int s = 0; o->max_lens && s < S; s++)
    if (o->max_lens[s] < 1 || o->max_lens[s] > o->max_len)
      return CF_FAIL(CF_ERR_INVALID_ARG, "beam search: sentence %d's max_len %d is outside [1, %d]", s, o->max_lens[s],
                     o->max_len);
  if (S > INT_MAX / o->beam)  /* the scorer counts rows in an int */
    return CF_FAIL(CF_ERR_INVALID_ARG, "beam search: %d sentences x beam %d rows is too many", S, o->beam);
  return CF_OK;
}

static void state_free(beam_state *b) {
  free(b->tokens);
  free(b->next);
  free(b->score);
  free(b->next_score);
  free(b->prefix);
  free(b->logprobs);
  free(b->cand);
  free(b->finished);
  free(b->done);
  free(b->best);
}

static cf_status state_alloc(beam_state *b) {
  size_t n = (size_t)b->n, L = (size_t)b->o->max_len, S = (size_t)b->S;
  b->tokens = malloc(n * L * sizeof *b->tokens);
  b->next = malloc(n * L * sizeof *b->next);
  b->score = malloc(n * sizeof *b->score);
  b->next_score = malloc(n * sizeof *b->next_score);
  b->prefix = malloc(n * L * sizeof *b->prefix);
  b->logprobs = malloc(n * (size_t)b->o->V * sizeof *b->logprobs);
  b->cand = malloc((size_t)b->K * sizeof *b->cand);
  b->finished = calloc(S, sizeof *b->finished);
  b->done = calloc(S, sizeof *b->done);
  b->best = malloc(S * sizeof *b->best);
  if (b->tokens && b->next && b->score && b->next_score && b->prefix && b->logprobs && b->cand && b->finished &&
      b->done && b->best)
    return CF_OK;
  return CF_FAIL(CF_ERR_NO_MEMORY, "beam search: out of memory for %d rows of %d tokens over V = %d", b->n,
                 b->o->max_len, b->o->V);
}

static void fill(int *x, size_t n, int v) {
  for (size_t i = 0; i < n; i++) x[i] = v;
}

/* Every row starts empty; only hypothesis 0 of each sentence is live, since its siblings would
 * expand the same prefix into duplicates (fairseq's first step). */
static void state_start(beam_state *b) {
  const cf_beam_options *o = b->o;
  fill(b->tokens, (size_t)b->n * (size_t)o->max_len, o->pad);
  fill(b->ids, (size_t)b->S * (size_t)o->max_len, o->pad);
  for (int r = 0; r < b->n; r++) b->score[r] = r % o->beam == 0 ? 0.0 : -INFINITY;
  for (int s = 0; s < b->S; s++) b->lens[s] = 0;
}

/* The scorer's input at step t: (n, t), bos then each row's first t - 1 ids. */
static void pack_prefix(beam_state *b, int t) {
  for (int r = 0; r < b->n; r++) {
    int *p = b->prefix + (size_t)r * (size_t)t;
    p[0] = b->o->bos;
    memcpy(p + 1, b->tokens + (size_t)r * (size_t)b->o->max_len, (size_t)(t - 1) * sizeof *p);
  }
}

/* The search's total order: higher score, then lower token id, then lower hypothesis index. */
static int ranks_before(candidate a, candidate b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.token != b.token) return a.token < b.token;
  return a.hyp < b.hyp;
}

/* Keep cand[0..*count) the best K offered so far, best first. Most candidates lose to the worst
 * kept at the first comparison, so a sentence's step costs about beam*V comparisons, not a sort. */
static void offer(candidate *cand, int *count, int K, candidate c) {
  if (*count == K && !ranks_before(c, cand[K - 1])) return;
  int i = *count < K ? (*count)++ : K - 1;
  for (; i > 0 && ranks_before(c, cand[i - 1]); i--) cand[i] = cand[i - 1];
  cand[i] = c;
}

/* Tokens a hypothesis may take at step t: never pad or bos (no target holds them), only eos at
 * the last step. */
static int allowed(const cf_beam_options *o, int s, int v, int t) {
  if (t == (o->max_lens ? o->max_lens[s] : o->max_len)) return v == o->eos;
  return v != o->pad && v != o->bos;
}

/* Sentence s's best K candidates at step t into b->cand. A NaN or +inf from the scorer for a live
 * hypothesis is an error here rather than a silent ranking (NaN compares false with everything). */
static cf_status gather(beam_state *b, int s, int t, int *count) {
  const cf_beam_options *o = b->o;
  *count = 0;
  for (int k = 0; k < o->beam; k++) {
    int r = s * o->beam + k;
    if (b->score[r] == -INFINITY) continue;  /* no hypothesis: the scorer's row is ignored */
    const float *lp = b->logprobs + (size_t)r * (size_t)o->V;
    for (int v = 0; v < o->V; v++) {
      if (isnan(lp[v]) || lp[v] == INFINITY)
        return CF_FAIL(CF_ERR_NONFINITE, "beam search: the scorer's log-probability of token %d is %s for "
                       "hypothesis %d of sentence %d at step %d (row %d of %d)", v, isnan(lp[v]) ? "NaN" : "+inf",
                       k, s, t, r, b->n);
      candidate c = {b->score[r] + lp[v], v, k};
      if (allowed(o, s, v, t) && c.score > -INFINITY) offer(b->cand, count, b->K, c);
    }
  }
  return CF_OK;
}

/* A hypothesis ending in eos at step t (t tokens with the eos): kept when it beats the sentence's
 * best so far, strictly, so that of equal scores the one finished first stays. */
static void finish(beam_state *b, int s, int t, candidate c) {
  const cf_beam_options *o = b->o;
  double normalized = c.score / pow((double)t, o->len_penalty);
  if (b->finished[s]++ > 0 && !(normalized > b->best[s])) return;
  const int *row = b->tokens + (size_t)(s * o->beam + c.hyp) * (size_t)o->max_len;
  int *out = b->ids + (size_t)s * (size_t)o->max_len;
  fill(out, (size_t)o->max_len, o->pad);
  memcpy(out, row, (size_t)(t - 1) * sizeof *out);
  b->lens[s] = t - 1;
  b->best[s] = normalized;
}

/* Row k of sentence s for the next step: its parent's ids and the candidate's token (column t-1:
 * pad so far, since a row holds its ids then pad). */
static void extend(beam_state *b, int s, int k, int t, candidate c) {
  size_t L = (size_t)b->o->max_len, r = (size_t)(s * b->o->beam + k);
  int *row = b->next + r * L;
  memcpy(row, b->tokens + (size_t)(s * b->o->beam + c.hyp) * L, L * sizeof *row);
  row[t - 1] = c.token;
  b->next_score[r] = c.score;
}

/* Rows r0 .. r0+count carried to the next step unchanged: a done sentence's, or (with score -inf)
 * rows left without a hypothesis. */
static void carry(beam_state *b, int r0, int count, int empty) {
  size_t L = (size_t)b->o->max_len;
  for (int r = r0; r < r0 + count; r++) {
    int *row = b->next + (size_t)r * L;
    if (empty)
      fill(row, L, b->o->pad);
    else
      memcpy(row, b->tokens + (size_t)r * L, L * sizeof *row);
    b->next_score[r] = empty ? -INFINITY : b->score[r];
  }
}

/* One step of sentence s: eos among the first beam candidates finishes (while fewer than beam have),
 * the first beam other candidates go on; the sentence is done with beam finished or none going on
 * (always so at its max_len, where only eos is allowed). */
static cf_status step_sentence(beam_state *b, int s, int t) {
  int beam = b->o->beam, count, kept = 0;
  CF_TRY(gather(b, s, t, &count));
  for (int i = 0; i < count; i++) {
    candidate c = b->cand[i];
    if (c.token == b->o->eos) {
      if (i < beam && b->finished[s] < beam) finish(b, s, t, c);
    } else if (kept < beam) {
      extend(b, s, kept++, t, c);
    }
  }
  carry(b, s * beam + kept, beam - kept, 1);
  b->done[s] = b->finished[s] >= beam || kept == 0;
  return CF_OK;
}

/* One step of every sentence not done; *live: how many are still not done after it. */
static cf_status step(beam_state *b, int t, cf_next_logprobs_fn fn, void *user, int *live) {
  pack_prefix(b, t);
  CF_TRY(fn(user, b->prefix, b->n, t, b->logprobs));
  *live = 0;
  for (int s = 0; s < b->S; s++) {
    if (b->done[s]) {
      carry(b, s * b->o->beam, b->o->beam, 0);
      continue;
    }
    CF_TRY(step_sentence(b, s, t));
    *live += !b->done[s];
  }
  int *tokens = b->tokens;  /* the next step's rows become the current ones */
  b->tokens = b->next;
  b->next = tokens;
  double *score = b->score;
  b->score = b->next_score;
  b->next_score = score;
  return CF_OK;
}

/* Every sentence must end with a finished hypothesis: none means every candidate scored -inf. */
static cf_status results(const beam_state *b, double *scores) {
  for (int s = 0; s < b->S; s++) {
    if (b->finished[s] == 0)
      return CF_FAIL(CF_ERR_NONFINITE, "beam search: sentence %d ended with no hypothesis of finite score "
                     "(the scorer gave -inf to every continuation)", s);
    if (scores) scores[s] = b->best[s];
  }
  return CF_OK;
}

cf_status cf_beam_search(const cf_beam_options *o, int n_sentences, cf_next_logprobs_fn fn, void *user, int *ids,
                         int *lens, double *scores) {
  CF_TRY(check_options(o, n_sentences, fn, ids, lens));
  if (n_sentences == 0) return CF_OK;
  beam_state b = {.o = o, .S = n_sentences, .n = n_sentences * o->beam, .K = 2 * o->beam, .ids = ids, .lens = lens};
  cf_status st = state_alloc(&b);
  if (st == CF_OK) state_start(&b);
  int live = n_sentences;
  for (int t = 1; st == CF_OK && t <= o->max_len && live > 0; t++) st = step(&b, t, fn, user, &live);
  if (st == CF_OK) st = results(&b, scores);
  state_free(&b);
  return st;
}
