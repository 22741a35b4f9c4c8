/* Translation pairs: lines read and encoded as the BPE encodes them, batches within the token budget
 * holding every pair exactly once an epoch, sorted by length, padded and shifted right, the same for
 * the same (seed, epoch) and different otherwise, and misaligned or unusable files refused. */
#include <string.h>
#include <unistd.h>
#include "clformer/data.h"
#include "testutil.h"

static char dir[] = "/tmp/clformer-pairs-XXXXXX";
enum { N_PAIRS = 600 };

static const char *path_of(const char *name) {
  static char paths[16][300];  /* each call its own: this test makes fewer than 16 files */
  static int next;
  char *p = paths[next++ % 16];
  snprintf(p, 300, "%s/%s", dir, name);
  return p;
}

static const char *write_file(const char *name, const char *text) {
  const char *path = path_of(name);
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
  return path;
}

/* n lines of 0 to 40 words from a small vocabulary; *text holds them all (one a line). */
static char *sentences(unsigned long long seed, int n, int last_newline) {
  static const char *words[] = {"el", "la", "tierra", "Dios", "y", "cielos", "luz", "aguas", "the", "earth", "God",
                                "and", "heaven", "light", "waters", "¿qué?", "día", "noche", ",", "."};
  test_rng rng = test_rng_seed(seed);
  char *t = malloc((size_t)n * 41 * 8 + 1);
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    int k = (int)(test_uniform(&rng) * 41);
    for (int j = 0; j < k; j++) at += (size_t)sprintf(t + at, j ? " %s" : "%s", words[(int)(test_uniform(&rng) * 20)]);
    if (i + 1 < n || last_newline) t[at++] = '\n';
  }
  t[at] = 0;
  return t;
}

/* Line k (from 0) of text, encoded, equals ids[0..n). */
static int line_is(const cf_bpe *b, const char *text, size_t k, const int *ids, int n) {
  for (; k > 0; k--) text = strchr(text, '\n') + 1;
  size_t len = strcspn(text, "\n");
  int *want = malloc((len + 1) * sizeof *want);
  size_t m = cf_bpe_encode(b, text, len, want);
  int same = m == (size_t)n && !memcmp(want, ids, m * sizeof *ids);
  free(want);
  return same;
}

/* Every batch of epoch e: the budget, sorted lengths, padding and shifts; every pair once. */
static void check_epoch(const cf_pairs *p, const cf_pair_epoch *e, int max_tokens, double *mean_spread) {
  char *seen = calloc(cf_pairs_count(p), 1);
  cf_pair_batch b = {0};
  size_t rows = 0, bad_budget = 0, unsorted = 0, bad_rows = 0;
  double spread = 0;
  for (size_t k = 0; k < e->n_batches; k++) {
    TEST_OK(cf_pairs_batch(p, e, k, &b));
    bad_budget += (size_t)b.B * (size_t)(b.S > b.T ? b.S : b.T) > (size_t)max_tokens || b.B < 1;
    for (int r = 0; r < b.B; r++, rows++) {
      int ns, nt;
      const int *s = cf_pairs_source(p, b.pair[r], &ns), *t = cf_pairs_target(p, b.pair[r], &nt);
      seen[b.pair[r]]++;
      if (r) unsorted += b.src_len[r] < b.src_len[r - 1] || (b.src_len[r] == b.src_len[r - 1] && b.tgt_len[r] < b.tgt_len[r - 1]);
      int ok = b.src_len[r] == ns + 1 && b.tgt_len[r] == nt + 1 && !memcmp(b.src + r * b.S, s, ns * sizeof *s) &&
               b.src[r * b.S + ns] == CF_BPE_EOS && b.tgt_in[r * b.T] == CF_BPE_BOS &&
               !memcmp(b.tgt_in + r * b.T + 1, t, nt * sizeof *t) && !memcmp(b.tgt_out + r * b.T, t, nt * sizeof *t) &&
               b.tgt_out[r * b.T + nt] == CF_BPE_EOS;
      for (int x = ns + 1; x < b.S; x++) ok &= b.src[r * b.S + x] == CF_BPE_PAD;
      for (int x = nt + 1; x < b.T; x++) ok &= b.tgt_in[r * b.T + x] == CF_BPE_PAD && b.tgt_out[r * b.T + x] == CF_BPE_PAD;
      bad_rows += !ok;
    }
    spread += b.src_len[b.B - 1] - b.src_len[0];
  }
  size_t once = 0;
  for (size_t i = 0; i < cf_pairs_count(p); i++) once += seen[i] == 1;
  TEST_ASSERT(bad_budget == 0, "%zu of %zu batches over the budget of %d tokens", bad_budget, e->n_batches, max_tokens);
  TEST_ASSERT(rows == cf_pairs_count(p) && once == rows, "%zu rows, %zu of %zu pairs exactly once", rows, once,
              cf_pairs_count(p));
  TEST_ASSERT(unsorted == 0, "%zu rows out of length order in their batch", unsorted);
  TEST_ASSERT(bad_rows == 0, "%zu rows not eos-terminated, bos-shifted and padded as their pair", bad_rows);
  *mean_spread = spread / (double)e->n_batches;
  cf_pair_batch_free(&b);
  free(seen);
}

static int same_epoch(const cf_pair_epoch *a, const cf_pair_epoch *b) {
  return a->n_batches == b->n_batches && !memcmp(a->order, b->order, a->n_pairs * sizeof *a->order) &&
         !memcmp(a->start, b->start, (a->n_batches + 1) * sizeof *a->start);
}

/* longest: the most tokens a side of a pair has, eos included */
static void epochs(const cf_pairs *p, int longest) {
  cf_pair_epoch e1, e1b, e2, s2;
  double spread;
  int budget = 6 * longest;
  TEST_OK(cf_pairs_epoch(p, 11, 0, budget, &e1));
  check_epoch(p, &e1, budget, &spread);
  /* sorted by length, a batch's sources differ by a few tokens; batches of random pairs would span most of the range */
  printf("%zu batches of at most %d tokens; a batch's source lengths span %.1f tokens on average (1 to %d in all)\n",
         e1.n_batches, budget, spread, longest);
  TEST_ASSERT(spread < longest / 10.0, "batches of similar lengths: a batch's source lengths span %.1f tokens", spread);
  TEST_ASSERT(e1.n_batches > 20, "%zu batches", e1.n_batches);
  TEST_OK(cf_pairs_epoch(p, 11, 0, budget, &e1b));
  TEST_OK(cf_pairs_epoch(p, 11, 1, budget, &e2));
  TEST_OK(cf_pairs_epoch(p, 12, 0, budget, &s2));
  TEST_ASSERT(same_epoch(&e1, &e1b), "the same seed and epoch give the same batches");
  TEST_ASSERT(!same_epoch(&e1, &e2) && !same_epoch(&e1, &s2), "another epoch or seed gives other batches");
  TEST_ASSERT(e1.order[e1.start[0]] != e2.order[e2.start[0]] || e1.order[e1.start[1]] != e2.order[e2.start[1]],
              "the batches come in another order");
  check_epoch(p, &e2, budget, &spread);
  cf_pair_epoch_free(&e2);
  TEST_OK(cf_pairs_epoch(p, 11, 0, longest, &e2));  /* the longest pair alone, just */
  check_epoch(p, &e2, longest, &spread);
  cf_pair_epoch_free(&e1);
  cf_pair_epoch_free(&e1b);
  cf_pair_epoch_free(&e2);
  cf_pair_epoch_free(&s2);
}

static void refusals(const cf_bpe *b, const char *src, const char *tgt, int longest) {
  cf_set_verbosity(-1);
  cf_pairs *p = (cf_pairs *)1;
  const char *es = write_file("short.es", "uno\ndos\ntres\n"), *en = write_file("short.en", "one\ntwo\n");
  TEST_ASSERT(cf_pairs_open(b, es, en, 0, &p) == CF_ERR_DATA && !p && strstr(cf_last_error(), "short.es has 3 lines") &&
              strstr(cf_last_error(), "short.en has 2"), "misaligned files: %s", cf_last_error());
  en = write_file("short.en", "one\ntwo\nthree");  /* a last line without '\n' counts */
  TEST_OK(cf_pairs_open(b, es, en, 0, &p));
  TEST_ASSERT(cf_pairs_count(p) == 3, "3 pairs, not %zu", cf_pairs_count(p));
  cf_pairs_free(p);
  TEST_ASSERT(cf_pairs_open(b, write_file("e.es", ""), write_file("e.en", ""), 0, &p) == CF_ERR_DATA &&
              strstr(cf_last_error(), "empty"), "empty files: %s", cf_last_error());
  TEST_ASSERT(cf_pairs_open(b, "/nonexistent/x.es", tgt, 0, &p) == CF_ERR_DATA &&
              strstr(cf_last_error(), "/nonexistent/x.es"), "a missing file: %s", cf_last_error());
  TEST_ASSERT(cf_pairs_open(b, src, dir, 0, &p) == CF_ERR_DATA && strstr(cf_last_error(), dir), "a directory: %s",
              cf_last_error());
  TEST_OK(cf_pairs_open(b, src, tgt, 0, &p));
  cf_pair_epoch e;
  TEST_ASSERT(cf_pairs_epoch(p, 1, 0, longest - 1, &e) == CF_ERR_DATA && strstr(cf_last_error(), "cannot hold line") && !e.order,
              "a budget smaller than the longest pair: %s", cf_last_error());
  cf_pairs_free(p);
  TEST_ASSERT(cf_pairs_open(b, src, tgt, 1, &p) == CF_ERR_DATA && strstr(cf_last_error(), "longer than 1 tokens"),
              "max_len leaving out every pair: %s", cf_last_error());
  cf_set_verbosity(1);
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  char *es = sentences(1, N_PAIRS, 1), *en = sentences(2, N_PAIRS, 0);
  const char *src = write_file("train.es", es), *tgt = write_file("train.en", en);
  const char *texts[] = {es, en};
  size_t lens[] = {strlen(es), strlen(en)};
  cf_bpe *b;
  TEST_OK(cf_bpe_learn(texts, lens, 2, 300, &b, NULL));
  cf_pairs *p;
  TEST_OK(cf_pairs_open(b, src, tgt, 0, &p));
  TEST_ASSERT(cf_pairs_count(p) == N_PAIRS && cf_pairs_left_out(p) == 0, "%zu pairs", cf_pairs_count(p));
  int n, lines_ok = 1, longest = 0;
  for (size_t i = 0; i < cf_pairs_count(p); i++) {
    const int *s = cf_pairs_source(p, i, &n);
    lines_ok &= cf_pairs_line(p, i) == i + 1 && line_is(b, es, i, s, n);
    longest = n + 1 > longest ? n + 1 : longest;
    const int *t = cf_pairs_target(p, i, &n);
    lines_ok &= line_is(b, en, i, t, n);
    longest = n + 1 > longest ? n + 1 : longest;
  }
  TEST_ASSERT(lines_ok, "every pair holds its lines, encoded");
  epochs(p, longest);
  cf_pairs_free(p);
  int max_len = longest / 2;
  TEST_OK(cf_pairs_open(b, src, tgt, max_len, &p));  /* longer pairs left out, the rest kept in order */
  size_t kept = cf_pairs_count(p);
  TEST_ASSERT(kept + cf_pairs_left_out(p) == N_PAIRS && kept > 100 && cf_pairs_left_out(p) > 100,
              "max_len %d: %zu kept", max_len, kept);
  for (size_t i = 0; i < kept; i++) {
    int ns, nt;
    cf_pairs_source(p, i, &ns);
    cf_pairs_target(p, i, &nt);
    TEST_ASSERT(ns + 1 <= max_len && nt + 1 <= max_len && (i == 0 || cf_pairs_line(p, i) > cf_pairs_line(p, i - 1)), "pair %zu", i);
  }
  cf_pairs_free(p);
  refusals(b, src, tgt, longest);
  cf_bpe_free(b);
  free(es);
  free(en);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "note: could not remove %s\n", dir);
  return test_finish("test_pairs");
}
