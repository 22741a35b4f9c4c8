/* Corpus BLEU against sacreBLEU's published numbers (its README's example and test/test_bleu.py), a
 * hand-computed case, and the tokenizers' rules one by one. No device needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

/* sacreBLEU's README example: three hypotheses, two reference sets. */
static const char *hyps[] = {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."};
static const char *refs[][2] = {{"The dog bit the man.", "The dog had bit the man."},
                                {"It was not unexpected.", "No one was surprised."},
                                {"The man bit him first.", "The man had bitten the dog."}};

static cf_bleu *corpus(cf_bleu_tok tok, const char *const *h, int n) {
  cf_bleu *b;
  TEST_OK(cf_bleu_create(tok, &b));
  for (int i = 0; i < n; i++) TEST_OK(cf_bleu_add(b, h[i], refs[i], 2));
  return b;
}

static void check_readme(void) {
  /* test/test_bleu.py's test_corpus_bleu_cases, checked there to 1e-8 */
  const struct { cf_bleu_tok tok; cf_bleu_smooth smooth; double want; } cases[] = {
      {CF_BLEU_13A, CF_BLEU_SMOOTH_EXP, 48.530827}, {CF_BLEU_NONE, CF_BLEU_SMOOTH_EXP, 49.1919566},
      {CF_BLEU_INTL, CF_BLEU_SMOOTH_EXP, 43.91623493}, {CF_BLEU_13A, CF_BLEU_SMOOTH_NONE, 48.530827}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    cf_bleu *b = corpus(cases[c].tok, hyps, 3);
    cf_bleu_score s = cf_bleu_result(b, cases[c].smooth);
    TEST_ASSERT(fabs(s.bleu - cases[c].want) < 1e-8, "tok %s: BLEU %.10f, sacreBLEU %.8f", cf_bleu_tok_name(cases[c].tok),
                s.bleu, cases[c].want);
    cf_bleu_free(b);
  }
  /* the README's printed line and signature, and the statistics behind them */
  cf_bleu *b = corpus(CF_BLEU_13A, hyps, 3);
  cf_bleu_score s = cf_bleu_result(b, CF_BLEU_SMOOTH_EXP);
  char line[256], sig[128];
  cf_bleu_format(&s, line, sizeof line);
  cf_bleu_signature(b, CF_BLEU_SMOOTH_EXP, sig, sizeof sig);
  TEST_ASSERT(!strcmp(line, "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"),
              "line: %s", line);
  TEST_ASSERT(!strcmp(sig, "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp"), "signature: %s", sig);
  const long long counts[4] = {14, 7, 5, 3}, totals[4] = {17, 14, 11, 8};
  for (int n = 0; n < 4; n++)
    TEST_ASSERT(s.counts[n] == counts[n] && s.totals[n] == totals[n], "%d-grams: %lld/%lld, want %lld/%lld", n + 1,
                s.counts[n], s.totals[n], counts[n], totals[n]);
  cf_bleu_free(b);
}

/* Empty hypotheses are scored, not dropped: 0 matches, BLEU 0, and the reference length is each
 * sentence's shortest reference (closest to 0 tokens): 6 + 5 + 6 = 17 with 13a. */
static void check_empty(void) {
  const char *empty[] = {"", "", ""};
  cf_bleu *b = corpus(CF_BLEU_13A, empty, 3);
  cf_bleu_score s = cf_bleu_result(b, CF_BLEU_SMOOTH_EXP);
  TEST_ASSERT(s.bleu == 0.0 && s.hyp_len == 0 && s.ref_len == 17 && s.bp == 0.0 && s.totals[0] == 0,
              "empty: BLEU %g hyp_len %lld ref_len %lld bp %g", s.bleu, s.hyp_len, s.ref_len, s.bp);
  cf_bleu_free(b);
}

static cf_bleu_score one(cf_bleu_tok tok, cf_bleu_smooth smooth, const char *hyp, const char *ref) {
  cf_bleu *b;
  TEST_OK(cf_bleu_create(tok, &b));
  TEST_OK(cf_bleu_add(b, hyp, &ref, 1));
  cf_bleu_score s = cf_bleu_result(b, smooth);
  cf_bleu_free(b);
  return s;
}

static void check_by_hand(void) {
  /* test_bleu.py's statistics case. Hypothesis: am I am a character sequence (6 tokens); reference:
   * I am a symbol string sequence a a (8). Unigrams am (2, clipped to 1), I, a, sequence: 4 of 6;
   * bigrams "I am", "am a": 2 of 5; trigram "I am a": 1 of 4; 4-grams 0 of 3, which 'exp' smoothing
   * turns into 1/(2*3). BP = exp(1 - 8/6). */
  cf_bleu_score s = one(CF_BLEU_13A, CF_BLEU_SMOOTH_EXP, "am I am a character sequence", "I am a symbol string sequence a a");
  const long long counts[4] = {4, 2, 1, 0}, totals[4] = {6, 5, 4, 3};
  for (int n = 0; n < 4; n++)
    TEST_ASSERT(s.counts[n] == counts[n] && s.totals[n] == totals[n], "hand %d-grams: %lld/%lld", n + 1, s.counts[n], s.totals[n]);
  double want = 100 * exp(1 - 8.0 / 6) * pow(4.0 / 6 * 2.0 / 5 * 1.0 / 4 * 1.0 / 6, 0.25);
  TEST_ASSERT(fabs(s.bleu - want) < 1e-9 && fabs(s.precisions[3] - 100.0 / 6) < 1e-12, "hand: BLEU %.10f, want %.10f", s.bleu, want);
  s = one(CF_BLEU_13A, CF_BLEU_SMOOTH_NONE, "am I am a character sequence", "I am a symbol string sequence a a");
  TEST_ASSERT(s.bleu == 0.0 && s.precisions[3] == 0.0, "no smoothing: a zero precision gives 0, got %g", s.bleu);

  /* A hypothesis longer than its reference: no brevity penalty, ratio 7/6; precisions 6/7, 5/6,
   * 4/5, 3/4, whose product is 3/7. */
  s = one(CF_BLEU_NONE, CF_BLEU_SMOOTH_EXP, "the cat sat on the mat today", "the cat sat on the mat");
  TEST_ASSERT(s.bp == 1.0 && fabs(s.ratio - 7.0 / 6) < 1e-15 && s.hyp_len == 7 && s.ref_len == 6, "longer: bp %g ratio %g", s.bp, s.ratio);
  TEST_ASSERT(fabs(s.bleu - 100 * pow(3.0 / 7, 0.25)) < 1e-9, "longer: BLEU %.10f, want %.10f", s.bleu, 100 * pow(3.0 / 7, 0.25));
  /* identical sentences score 100; nothing in common scores 0 even with smoothing (sacreBLEU #141) */
  s = one(CF_BLEU_13A, CF_BLEU_SMOOTH_EXP, "this is a test", "this is a test");
  TEST_ASSERT(fabs(s.bleu - 100) < 1e-12, "identical: %g", s.bleu);
  s = one(CF_BLEU_13A, CF_BLEU_SMOOTH_EXP, "this is a test", "ref1");
  TEST_ASSERT(s.bleu == 0.0, "no match: %g", s.bleu);
}

static void expect_tokens(cf_bleu_tok tok, const char *in, const char *want) {
  char *got = NULL;
  TEST_OK(cf_bleu_tokenize(tok, in, &got));
  TEST_ASSERT(!strcmp(got, want), "%s tokenizes '%s' as '%s', want '%s'", cf_bleu_tok_name(tok), in, got, want);
  free(got);
}

static void check_tokenizers(void) {
  /* 13a: HTML entities, a hyphen at a line break joins, other breaks are spaces, <skipped> goes */
  expect_tokens(CF_BLEU_13A, "He said &quot;hi&quot;.", "He said \" hi \" .");
  expect_tokens(CF_BLEU_13A, "data-\nbase is\nhere <skipped>ok", "database is here ok");
  expect_tokens(CF_BLEU_13A, "&amp;quot; &lt;b&gt;", "& quot ; < b >");  /* replaced once, in order */
  /* periods and commas split unless between digits; a dash after a digit splits, between letters not */
  expect_tokens(CF_BLEU_13A, "3.14, 1,000 a.b c,d 5-3 x-y", "3.14 , 1,000 a . b c , d 5 - 3 x-y");
  expect_tokens(CF_BLEU_13A, "end with year 1990.", "end with year 1990 .");
  expect_tokens(CF_BLEU_13A, "  spaced\tout \u00a0 ", "spaced out");  /* Python's whitespace: NBSP too */
  /* intl: Unicode punctuation and symbols; '5-3' stays (digits both sides), and mteval-v14 leaves a
   * year's final period on it; &apos; is recovered too */
  expect_tokens(CF_BLEU_INTL, "3.14, 1,000 a.b 5-3 x-y", "3.14 , 1,000 a . b 5-3 x - y");
  expect_tokens(CF_BLEU_INTL, "end with year 1990.", "end with year 1990.");
  expect_tokens(CF_BLEU_INTL, "it&apos;s &lt;b&gt;", "it ' s < b >");
  /* UTF-8: 13a splits only ASCII symbols; intl splits ¿ « » … (P) and € (S), not the letters */
  expect_tokens(CF_BLEU_13A, "¿Qué tal? «Bien» — dijo él… 2,5 €", "¿Qué tal ? «Bien» — dijo él… 2,5 €");
  expect_tokens(CF_BLEU_INTL, "¿Qué tal? «Bien» — dijo él… 2,5 €", "¿ Qué tal ? « Bien » — dijo él … 2,5 €");
  expect_tokens(CF_BLEU_INTL, "日本語、テスト。", "日本語 、 テスト 。");
  expect_tokens(CF_BLEU_NONE, " a\u3000b  c ", "a b c");  /* ideographic space is whitespace */
  /* not UTF-8: a stray continuation byte, a surrogate, an overlong '/' are refused, not scored */
  const char *bad[] = {"ok \x80", "\xed\xa0\x80", "\xc0\xaf", "cut \xe2\x82"};
  cf_set_verbosity(-1);
  for (int i = 0; i < 4; i++) {
    char *got = NULL;
    cf_status st = cf_bleu_tokenize(CF_BLEU_INTL, bad[i], &got);
    TEST_ASSERT(st == CF_ERR_DATA && !got, "bad UTF-8 %d: status %d", i, st);
    cf_bleu *b;
    TEST_OK(cf_bleu_create(CF_BLEU_13A, &b));
    TEST_ASSERT(cf_bleu_add(b, "fine", &bad[i], 1) == CF_ERR_DATA, "bad UTF-8 reference %d accepted", i);
    cf_bleu_free(b);
  }
  cf_set_verbosity(1);
}

int main(void) {
  check_readme();
  check_empty();
  check_by_hand();
  check_tokenizers();
  return test_finish("test_bleu");
}
