/* Beam search (src/model/beam.c) against a toy scorer: a fixed random model whose next-token
 * log-probabilities depend on the sentence, the last token and the position. Small enough (V = 6,
 * max_len = 6: 364 finished sequences) that brute-force enumeration finds the exact optimum of the
 * length-normalized score, which a beam wider than every step's candidate set must find too. Host
 * only: no OpenCL device is needed. */
#include <math.h>
#include <string.h>
#include "base/base.h"
#include "model/beam.h"
#include "testutil.h"

enum { PAD = 0, BOS = 1, EOS = 2, MAXL = 8, WIDE = 512 };

typedef struct toy {
  int V, beam;         /* the search's V and beam: row r is sentence first + r / beam */
  int first;           /* the sentence of row 0, so one sentence can be decoded alone */
  unsigned seed;
  double eos_bias;     /* added to eos's logit: very negative makes eos (almost) never chosen */
  int uniform;         /* every token equally likely: ties everywhere */
  int nan_sentence, nan_step, nan_junk; /* NaN planted for that sentence's hypothesis 0 at that step;
                                           nan_junk: NaN in every row that holds no hypothesis */
  int fail_step;       /* return CF_ERR_IO at this step (0: never) */
  int all_ninf;        /* every log-probability -inf */
  int calls, longest;  /* how often called, the longest prefix seen */
  int record_len;      /* the prefixes of this length are kept in recorded (at most 64 ids) */
  int recorded[64];
} toy;

/* Log-softmax of hashed logits in [-2, 2) for (sentence, last token, prefix length). */
static void toy_row(const toy *m, int sentence, int last, int len, float *lp) {
  double z[64], mx = -INFINITY, sum = 0;
  for (int v = 0; v < m->V; v++) {
    uint32_t bits[4];
    cf_random_bits(m->seed, (uint32_t)len, (uint32_t)sentence, (uint32_t)(last * m->V + v), bits);
    z[v] = m->uniform ? 0 : 4.0 * (bits[0] >> 8) / 16777216.0 - 2.0;
    if (v == EOS) z[v] += m->eos_bias;
    mx = fmax(mx, z[v]);
  }
  for (int v = 0; v < m->V; v++) sum += exp(z[v] - mx);
  for (int v = 0; v < m->V; v++) lp[v] = m->all_ninf ? -INFINITY : (float)(z[v] - mx - log(sum));
}

static int holds_pad(const int *row, int len) {
  for (int i = 0; i < len; i++)
    if (row[i] == PAD) return 1;
  return 0;
}

static cf_status toy_scorer(void *user, const int *prefix, int n, int len, float *logprobs) {
  toy *m = user;
  m->calls++;
  if (len > m->longest) m->longest = len;
  if (len == m->fail_step) return CF_FAIL(CF_ERR_IO, "toy scorer: failing at step %d on purpose", len);
  if (len == m->record_len && n * len <= 64) memcpy(m->recorded, prefix, (size_t)(n * len) * sizeof *prefix);
  for (int r = 0; r < n; r++) {
    const int *row = prefix + (size_t)r * (size_t)len;
    float *lp = logprobs + (size_t)r * (size_t)m->V;
    int sentence = m->first + r / m->beam, k = r % m->beam;
    toy_row(m, sentence, row[len - 1], len, lp);
    if (sentence == m->nan_sentence && k == 0 && len == m->nan_step) lp[m->V - 1] = NAN;
    if (m->nan_junk && ((len == 1 && k > 0) || holds_pad(row, len)))
      for (int v = 0; v < m->V; v++) lp[v] = NAN;
  }
  return CF_OK;
}

static toy toy_make(int V, unsigned seed) {
  toy m = {.V = V, .beam = 1, .seed = seed, .nan_sentence = -1};
  return m;
}

static cf_beam_options options(int V, int beam, int max_len, double len_penalty) {
  cf_beam_options o = {.beam = beam, .len_penalty = len_penalty, .max_len = max_len, .bos = BOS, .eos = EOS,
                       .pad = PAD, .V = V};
  return o;
}

/* The best sequence of one sentence. */
typedef struct result {
  int ids[MAXL], len;
  double score;
} result;

static result decode_one(toy *m, const cf_beam_options *o, int sentence) {
  result r = {{0}, 0, 0};
  m->beam = o->beam;
  m->first = sentence;
  TEST_OK(cf_beam_search(o, 1, toy_scorer, m, r.ids, &r.len, &r.score));
  return r;
}

/* The sum of log-probabilities of ids then eos, accumulated in the search's order, normalized. */
static double rescore(const toy *m, const cf_beam_options *o, int sentence, const int *ids, int len) {
  float lp[64];
  double sum = 0;
  for (int t = 0; t <= len; t++) {
    toy_row(m, sentence, t ? ids[t - 1] : BOS, t + 1, lp);
    sum += lp[t < len ? ids[t] : EOS];
  }
  return sum / pow(len + 1, o->len_penalty);
}

/* Every sequence of len ids (no pad, bos or eos) then eos, len + 1 <= max_len, depth first. */
static void brute(const toy *m, const cf_beam_options *o, int sentence, int *seq, int len, double sum, result *best) {
  float lp[64];
  toy_row(m, sentence, len ? seq[len - 1] : BOS, len + 1, lp);
  double normalized = (sum + lp[EOS]) / pow(len + 1, o->len_penalty);
  if (best->len < 0 || normalized > best->score) {
    best->len = len;
    best->score = normalized;
    memcpy(best->ids, seq, (size_t)len * sizeof *seq);
  }
  if (len + 1 >= o->max_len) return;
  for (int v = EOS + 1; v < m->V; v++) {
    seq[len] = v;
    brute(m, o, sentence, seq, len + 1, sum + lp[v], best);
  }
}

static result brute_best(const toy *m, const cf_beam_options *o, int sentence) {
  result best = {{0}, -1, 0};
  int seq[MAXL];
  brute(m, o, sentence, seq, 0, 0.0, &best);
  return best;
}

/* Greedy decoding spelled out: the likeliest allowed token each step, lower id on ties. */
static result argmax_decode(const toy *m, const cf_beam_options *o, int sentence) {
  result r = {{0}, 0, 0};
  float lp[64];
  double sum = 0;
  for (int t = 1; t <= o->max_len; t++) {
    toy_row(m, sentence, r.len ? r.ids[r.len - 1] : BOS, t, lp);
    int best = EOS;
    for (int v = EOS + 1; v < m->V && t < o->max_len; v++)
      if (lp[v] > lp[best]) best = v;
    sum += lp[best];
    if (best == EOS) break;
    r.ids[r.len++] = best;
  }
  r.score = sum / pow(r.len + 1, o->len_penalty);
  return r;
}

static int same(const result *a, const result *b) {
  return a->len == b->len && !memcmp(a->ids, b->ids, (size_t)a->len * sizeof *a->ids) && a->score == b->score;
}

static const double PENALTIES[] = {0.0, 0.6, 1.0, 1.5};
enum { NPEN = 4, NSEED = 6 };

/* A beam wider than any step's candidates (WIDE = 512 >= 364 sequences) is exhaustive: it must
 * return the brute-force optimum, with the score the sequence really has. */
static void wide_beam_is_exact(int V, int max_len) {
  int fails = test_failures;
  for (int p = 0; p < NPEN; p++)
    for (unsigned seed = 1; seed <= NSEED; seed++) {
      toy m = toy_make(V, seed);
      cf_beam_options o = options(V, WIDE, max_len, PENALTIES[p]);
      result got = decode_one(&m, &o, 3), want = brute_best(&m, &o, 3);
      TEST_ASSERT(same(&got, &want), "V %d max_len %d lenpen %g seed %u: beam %d found len %d score %.9g, "
                  "brute force len %d score %.9g", V, max_len, PENALTIES[p], seed, WIDE, got.len, got.score,
                  want.len, want.score);
      TEST_ASSERT(got.score == rescore(&m, &o, 3, got.ids, got.len), "returned score is not the sequence's");
    }
  if (test_failures == fails)
    printf("ok   V %d, max_len %d: a beam of %d finds the brute-force optimum (%d seeds x %d length penalties)\n",
           V, max_len, WIDE, NSEED, NPEN);
}

static void greedy_is_argmax(void) {
  int fails = test_failures;
  for (int p = 0; p < NPEN; p++)
    for (unsigned seed = 1; seed <= NSEED; seed++) {
      toy m = toy_make(6, seed);
      m.eos_bias = -1.0;  /* longer outputs, so more than one step is compared */
      cf_beam_options o = options(6, 1, 6, PENALTIES[p]);
      result got = decode_one(&m, &o, 0), want = argmax_decode(&m, &o, 0);
      TEST_ASSERT(same(&got, &want), "seed %u lenpen %g: beam 1 gave len %d, argmax len %d", seed, PENALTIES[p],
                  got.len, want.len);
    }
  if (test_failures == fails) printf("ok   beam 1 is step-by-step argmax decoding\n");
}

/* fairseq's beam search for one sentence written plainly, as a second opinion on beam.c's
 * bookkeeping: hypotheses in a list, every candidate of a step sorted. */
typedef struct cand {
  double score;
  int token, hyp;
} cand;

static int cand_order(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  if (a->token != b->token) return a->token < b->token ? -1 : 1;
  return a->hyp < b->hyp ? -1 : a->hyp > b->hyp;
}

static result naive_beam(const toy *m, const cf_beam_options *o, int sentence) {
  int beam = o->beam, nlive = 1, nfin = 0;
  result *live = calloc((size_t)beam, sizeof *live), *next = calloc((size_t)beam, sizeof *next), best = {{0}, -1, 0};
  cand *all = malloc((size_t)beam * (size_t)m->V * sizeof *all);
  if (!live || !next || !all) exit(1);
  float lp[64];
  for (int t = 1; t <= o->max_len && nlive > 0 && nfin < beam; t++) {
    int count = 0, nnext = 0;
    for (int h = 0; h < nlive; h++) {
      toy_row(m, sentence, t > 1 ? live[h].ids[t - 2] : BOS, t, lp);
      for (int v = 0; v < m->V; v++)
        if (v != PAD && v != BOS && (t < o->max_len || v == EOS)) all[count++] = (cand){live[h].score + lp[v], v, h};
    }
    qsort(all, (size_t)count, sizeof *all, cand_order);
    for (int i = 0; i < count && i < 2 * beam; i++) {
      const result *parent = &live[all[i].hyp];
      if (all[i].token == EOS && i < beam && nfin < beam) {
        double normalized = all[i].score / pow(t, o->len_penalty);
        if (nfin++ == 0 || normalized > best.score) {
          best = *parent;
          best.score = normalized;
        }
      } else if (all[i].token != EOS && nnext < beam) {
        next[nnext] = *parent;
        next[nnext].ids[next[nnext].len++] = all[i].token;
        next[nnext++].score = all[i].score;
      }
    }
    result *swap = live;
    live = next;
    next = swap;
    nlive = nnext;
  }
  free(live);
  free(next);
  free(all);
  return best;
}

/* Every beam agrees with the plain version and stays at or below the exact optimum. A wider beam
 * is not always better: fairseq's stop at beam finished hypotheses (taken in order of their raw
 * sums) can end a wide search before the hypothesis a narrower one reaches; the count is printed,
 * and one such case is pinned (seed 6, lenpen 1.5: beam 2 below greedy) so that a change of the
 * stopping rule shows. */
static void beams_agree_with_plain_version(void) {
  static const int beams[] = {1, 2, 3, 4, 6, 8, 16, 64, WIDE};
  int fails = test_failures, nb = (int)(sizeof beams / sizeof *beams), worse = 0, cases = 0;
  for (int p = 0; p < NPEN; p++)
    for (unsigned seed = 1; seed <= NSEED; seed++) {
      toy m = toy_make(6, seed);
      m.eos_bias = -0.5;
      cf_beam_options exact = options(6, 1, 6, PENALTIES[p]);
      double prev = -INFINITY, opt = brute_best(&m, &exact, 1).score;
      for (int i = 0; i < nb; i++) {
        cf_beam_options o = options(6, beams[i], 6, PENALTIES[p]);
        result r = decode_one(&m, &o, 1), plain = naive_beam(&m, &o, 1);
        TEST_ASSERT(same(&r, &plain), "seed %u lenpen %g beam %d: len %d score %.9g, the plain version len %d %.9g",
                    seed, PENALTIES[p], beams[i], r.len, r.score, plain.len, plain.score);
        TEST_ASSERT(r.score <= opt, "seed %u lenpen %g beam %d: %.9g above the optimum %.9g", seed, PENALTIES[p],
                    beams[i], r.score, opt);
        worse += r.score < prev;
        cases += i > 0;
        prev = r.score;
        if (seed == 6 && PENALTIES[p] == 1.5 && beams[i] == 2)
          TEST_ASSERT(r.score < opt && r.score < argmax_decode(&m, &exact, 1).score,
                      "the pinned case no longer ends below greedy (%.9g)", r.score);
      }
      TEST_ASSERT(prev == opt, "seed %u lenpen %g: the widest beam misses the optimum", seed, PENALTIES[p]);
    }
  if (test_failures == fails)
    printf("ok   beams 1..%d agree with the plain version, none above brute force (a wider beam scored below the "
           "next narrower in %d of %d pairs)\n", WIDE, worse, cases);
}

/* Several sentences in one call decode as each does alone, bit for bit. */
static void sentences_are_independent(void) {
  enum { S = 5 };
  static const int beams[] = {1, 3, 4};
  int fails = test_failures;
  for (int b = 0; b < 3; b++)
    for (unsigned seed = 1; seed <= 3; seed++) {
      toy m = toy_make(7, seed);
      m.eos_bias = -0.7;
      cf_beam_options o = options(7, beams[b], 7, 1.0);
      int ids[S * 7], lens[S];
      double scores[S];
      m.beam = o.beam;
      TEST_OK(cf_beam_search(&o, S, toy_scorer, &m, ids, lens, scores));
      for (int s = 0; s < S; s++) {
        result alone = decode_one(&m, &o, s), together = {{0}, lens[s], scores[s]};
        memcpy(together.ids, ids + s * 7, sizeof(int) * 7);
        TEST_ASSERT(same(&alone, &together), "beam %d seed %u sentence %d: len %d score %.9g together, %d %.9g alone",
                    o.beam, seed, s, together.len, together.score, alone.len, alone.score);
        for (int i = lens[s]; i < 7; i++) TEST_ASSERT(ids[s * 7 + i] == PAD, "sentence %d: no pad after its ids", s);
      }
    }
  if (test_failures == fails) printf("ok   %d sentences in one call decode as each alone (beams 1, 3, 4)\n", S);
}

/* With eos all but impossible the search still ends: at max_len, eos forced, scorer called max_len
 * times with prefixes of at most max_len ids (bos included). max_len 1 allows only eos. */
static void max_len_ends_it(void) {
  int fails = test_failures;
  for (int beam = 1; beam <= 4; beam += 3)
    for (int max_len = 1; max_len <= 6; max_len += 5) {
      toy m = toy_make(6, 9);
      m.eos_bias = -30;
      cf_beam_options o = options(6, beam, max_len, 1.0);
      result r = decode_one(&m, &o, 0);
      TEST_ASSERT(r.len == max_len - 1 && m.calls == max_len && m.longest == max_len,
                  "beam %d max_len %d: %d ids, %d calls, longest prefix %d", beam, max_len, r.len, m.calls,
                  m.longest);
      TEST_ASSERT(r.score == rescore(&m, &o, 0, r.ids, r.len), "forced eos scored off its log-probability");
    }
  if (test_failures == fails) printf("ok   max_len ends the search with eos forced (max_len 1 and 6)\n");
}

/* All tokens equally likely: every ranking is a tie, decided by the lower id, then the lower
 * hypothesis; eos, last in this vocabulary, is never preferred before max_len. Two max_lens, since
 * a reversed hypothesis order would alternate the rows and come out right at every other one; and
 * beam 3's rows at step 3 spelled out: token 2 after each of step 2's hypotheses, in their order. */
static void ties_are_deterministic(void) {
  int fails = test_failures;
  for (int beam = 1; beam <= 3; beam++)
    for (int max_len = 4; max_len <= 5; max_len++) {
      toy m = toy_make(6, 1);
      m.uniform = 1;
      cf_beam_options o = options(6, beam, max_len, 1.0);
      o.eos = 5;
      int ids[5], len, twos = 0;
      double score;
      m.beam = beam;
      m.record_len = 3;
      TEST_OK(cf_beam_search(&o, 1, toy_scorer, &m, ids, &len, &score));
      for (int i = 0; i < len; i++) twos += ids[i] == 2;
      TEST_ASSERT(len == max_len - 1 && twos == len, "beam %d max_len %d: %d ids, %d of them 2 (want all)", beam,
                  max_len, len, twos);
      static const int rows3[9] = {BOS, 2, 2, BOS, 3, 2, BOS, 4, 2};
      TEST_ASSERT(beam != 3 || !memcmp(m.recorded, rows3, sizeof rows3), "beam 3 step 3 rows: %d %d %d / %d %d %d / "
                  "%d %d %d", m.recorded[0], m.recorded[1], m.recorded[2], m.recorded[3], m.recorded[4],
                  m.recorded[5], m.recorded[6], m.recorded[7], m.recorded[8]);
    }
  if (test_failures == fails) printf("ok   ties go to the lower token id, then the lower hypothesis\n");
}

/* V = 3 leaves only eos: one step, then every sentence is done with fewer than beam finished and
 * none to extend, and the scorer is not called again. */
static void nothing_to_extend_stops(void) {
  int fails = test_failures, ids[2 * 5], lens[2];
  toy m = toy_make(3, 5);
  cf_beam_options o = options(3, 2, 5, 1.0);
  m.beam = 2;
  TEST_OK(cf_beam_search(&o, 2, toy_scorer, &m, ids, lens, NULL));
  TEST_ASSERT(lens[0] == 0 && lens[1] == 0 && m.calls == 1, "V 3: lens %d %d after %d calls (want 0 0 after 1)",
              lens[0], lens[1], m.calls);
  if (test_failures == fails) printf("ok   V 3 (only eos allowed) ends after one step\n");
}

/* The scorer's NaN for a live hypothesis is an error naming it; NaN in rows holding no hypothesis
 * (step 1's siblings, rows padded after a sentence lost hypotheses) is ignored. */
static void nan_fails_cleanly(void) {
  int fails = test_failures;
  toy m = toy_make(6, 4);
  cf_beam_options o = options(6, 3, 6, 1.0);
  int ids[3 * 6], lens[3];
  m.beam = 3;
  m.nan_sentence = 1;
  m.nan_step = 3;
  cf_set_verbosity(-1);
  cf_status st = cf_beam_search(&o, 3, toy_scorer, &m, ids, lens, NULL);
  cf_set_verbosity(1);
  const char *msg = cf_last_error();
  TEST_ASSERT(st == CF_ERR_NONFINITE && strstr(msg, "NaN") && strstr(msg, "sentence 1 ") && strstr(msg, "step 3 ") &&
              strstr(msg, "hypothesis 0 ") && strstr(msg, "token 5 "), "got %s: %s", cf_status_str(st), msg);

  toy clean = toy_make(6, 4), junk = toy_make(6, 4);
  clean.beam = junk.beam = 3;
  clean.eos_bias = junk.eos_bias = 2.0;  /* hypotheses finish early, rows empty out */
  junk.nan_junk = 1;
  int ids2[3 * 6], lens2[3];
  double s1[3], s2[3];
  TEST_OK(cf_beam_search(&o, 3, toy_scorer, &clean, ids, lens, s1));
  TEST_OK(cf_beam_search(&o, 3, toy_scorer, &junk, ids2, lens2, s2));
  TEST_ASSERT(!memcmp(ids, ids2, sizeof ids) && !memcmp(lens, lens2, sizeof lens) && !memcmp(s1, s2, sizeof s1),
              "NaN in rows without a hypothesis changed the result");
  if (test_failures == fails) printf("ok   a NaN log-probability fails naming sentence, hypothesis, token, step\n");
}

static void scorer_failures_pass_through(void) {
  int fails = test_failures, ids[6], len;
  cf_beam_options o = options(6, 2, 6, 1.0);
  toy m = toy_make(6, 2);
  m.beam = 2;
  m.eos_bias = -30;
  m.fail_step = 2;
  cf_set_verbosity(-1);
  cf_status st = cf_beam_search(&o, 1, toy_scorer, &m, ids, &len, NULL);
  TEST_ASSERT(st == CF_ERR_IO && m.calls == 2, "failing scorer: got %s after %d calls", cf_status_str(st), m.calls);
  toy dead = toy_make(6, 2);
  dead.beam = 2;
  dead.all_ninf = 1;
  st = cf_beam_search(&o, 1, toy_scorer, &dead, ids, &len, NULL);
  TEST_ASSERT(st == CF_ERR_NONFINITE && strstr(cf_last_error(), "sentence 0 "), "all -inf: got %s: %s",
              cf_status_str(st), cf_last_error());
  cf_set_verbosity(1);
  if (test_failures == fails) printf("ok   the scorer's error passes through; all -inf is an error\n");
}

static void bad_options_rejected(void) {
  int fails = test_failures, ids[8], len;
  cf_beam_options good = options(6, 2, 6, 1.0), bad[9];
  for (int i = 0; i < 9; i++) bad[i] = good;
  bad[0].beam = 0;
  bad[1].V = 2;
  bad[2].max_len = 0;
  bad[3].eos = BOS;
  bad[4].pad = 6;
  bad[5].bos = -1;
  bad[6].len_penalty = NAN;
  bad[7].beam = -3;
  bad[8].pad = EOS;
  toy m = toy_make(6, 1);
  m.beam = 2;
  cf_set_verbosity(-1);
  for (int i = 0; i < 9; i++) {
    cf_status st = cf_beam_search(&bad[i], 1, toy_scorer, &m, ids, &len, NULL);
    TEST_ASSERT(st == CF_ERR_INVALID_ARG, "bad options %d: got %s", i, cf_status_str(st));
  }
  TEST_ASSERT(cf_beam_search(&good, -1, toy_scorer, &m, ids, &len, NULL) == CF_ERR_INVALID_ARG, "-1 sentences");
  TEST_ASSERT(cf_beam_search(&good, 1, NULL, &m, ids, &len, NULL) == CF_ERR_INVALID_ARG, "no scorer");
  TEST_ASSERT(cf_beam_search(&good, 1, toy_scorer, &m, NULL, &len, NULL) == CF_ERR_INVALID_ARG, "no ids");
  TEST_ASSERT(cf_beam_search(NULL, 1, toy_scorer, &m, ids, &len, NULL) == CF_ERR_INVALID_ARG, "no options");
  cf_set_verbosity(1);
  TEST_ASSERT(m.calls == 0, "the scorer was called %d times for bad options", m.calls);
  TEST_OK(cf_beam_search(&good, 0, toy_scorer, &m, NULL, NULL, NULL));
  TEST_ASSERT(m.calls == 0, "0 sentences called the scorer");
  if (test_failures == fails)
    printf("ok   bad options (beam 0, V 2, max_len 0, ids clashing or out of range) rejected\n");
}

int main(void) {
  wide_beam_is_exact(6, 6);
  wide_beam_is_exact(7, 5);
  greedy_is_argmax();
  beams_agree_with_plain_version();
  sentences_are_independent();
  max_len_ends_it();
  ties_are_deterministic();
  nothing_to_extend_stops();
  nan_fails_cleanly();
  scorer_failures_pass_through();
  bad_options_rejected();
  return test_finish("test_beam");
}
