/* Byte-pair encoding: merges equal to hand-worked examples and to a naive learner that recounts
 * every pair after every merge, the chunker's cuts, exact round trips (random bytes, Bible text in
 * both languages), determinism, the merges file both ways, and every refusal of a bad one. */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/data.h"
#include "data/bpe.h"
#include "testutil.h"

static const char *spanish =
    "EN el principio crió Dios los cielos y la tierra.\n"
    "Y la tierra estaba desordenada y vacía, y las tinieblas estaban sobre la haz del abismo, y el Espíritu de Dios "
    "se movía sobre la haz de las aguas.\n"
    "Y dijo Dios: Sea la luz: y fué la luz.\n"
    "Y vió Dios que la luz era buena: y apartó Dios la luz de las tinieblas.\n"
    "Y llamó Dios á la luz Día, y á las tinieblas llamó Noche: y fué la tarde y la mañana un día.\n"
    "Porque de tal manera amó Dios al mundo, que ha dado á su Hijo unigénito, para que todo aquel que en él cree, no "
    "se pierda, mas tenga vida eterna.\n"
    "¿Quién es éste? ¡Oh, Señor!\n";
static const char *english =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God "
    "moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n"
    "And God called the light Day, and the darkness he called Night. And the evening and the morning were the first "
    "day.\n"
    "For God so loved the world, that he gave his only begotten Son, that whosoever believeth in him should not "
    "perish, but have everlasting life.\n";

static cf_bpe *learn1(const char *text, size_t len, int vocab, cf_bpe_learn_stats *s) {
  cf_bpe *b;
  TEST_OK(cf_bpe_learn(&text, &len, 1, vocab, &b, s));
  return b;
}

static int merges_are(const cf_bpe *b, const int (*want)[2], int n) {
  if (cf_bpe_merges(b) != n) return 0;
  for (int k = 0; k < n; k++) {
    int l, r;
    cf_bpe_merge_pair(b, k, &l, &r);
    if (l != want[k][0] || r != want[k][1]) return 0;
  }
  return 1;
}

static int ids_are(const cf_bpe *b, const char *text, const int *want, size_t n) {
  int ids[64];
  return cf_bpe_encode(b, text, strlen(text), ids) == n && !memcmp(ids, want, n * sizeof *ids);
}

#define ID(c) (CF_BPE_BYTE0 + (c))

/* Wikipedia's example, and one where chunks and a space matter, worked by hand. */
static void hand_worked(void) {
  cf_bpe_learn_stats s;
  /* "aaabdaaabac": aa (4) -> Z; then Za and ab tie at 2 and ab has the smaller left id -> Y; ZY (2) -> X;
   * then every pair occurs once: stop */
  cf_bpe *b = learn1("aaabdaaabac", 11, 8000, &s);
  const int want1[][2] = {{ID('a'), ID('a')}, {ID('a'), ID('b')}, {259, 260}};
  TEST_ASSERT(merges_are(b, want1, 3), "aaabdaaabac: %d merges", cf_bpe_merges(b));
  TEST_ASSERT(s.merges == 3 && s.last_count == 2 && s.chunks == 1 && s.bytes == 11, "stats %d %lld %zu", s.merges,
              s.last_count, s.chunks);
  const int ids1[] = {261, ID('d'), 261, ID('a'), ID('c')};
  TEST_ASSERT(ids_are(b, "aaabdaaabac", ids1, 5), "aaabdaaabac encodes as XdXac");
  TEST_ASSERT(cf_bpe_vocab_size(b) == 262, "vocab %d", cf_bpe_vocab_size(b));
  cf_bpe_free(b);
  b = learn1("aaabdaaabac", 11, 261, &s);
  TEST_ASSERT(merges_are(b, want1, 2), "vocab 261 stops after 2 merges");
  cf_bpe_free(b);
  /* "low low lower": chunks "low", " low", " lower". lo and ow tie at 3 -> lo (smaller left id); low (3);
   * " low" (2); then " low"+e and er occur once */
  b = learn1("low low lower", 13, 8000, &s);
  const int want2[][2] = {{ID('l'), ID('o')}, {259, ID('w')}, {ID(' '), 260}};
  TEST_ASSERT(merges_are(b, want2, 3), "low low lower: %d merges", cf_bpe_merges(b));
  const int ids2[] = {260, 261, ID('e'), ID('r')};
  TEST_ASSERT(ids_are(b, "low lower", ids2, 4), "'low lower' encodes as low, ' low', e, r");
  const int ids3[] = {ID('s'), 260, ID('\n'), 261};
  TEST_ASSERT(ids_are(b, "slow\n low", ids3, 4), "'slow\\n low': a word's pieces do not depend on its neighbours");
  size_t len;
  const uint8_t *p = cf_bpe_piece(b, 261, &len);
  TEST_ASSERT(p && len == 4 && !memcmp(p, " low", 4), "piece 261 is ' low'");
  TEST_ASSERT(cf_bpe_piece(b, CF_BPE_EOS, &len) && len == 0, "special ids have no bytes");
  TEST_ASSERT(!cf_bpe_piece(b, 262, &len) && !cf_bpe_piece(b, -1, &len), "ids outside the vocabulary");
  cf_bpe_free(b);
}

static void chunker(void) {
  const char *text = "Hola, ¿qué tal?  Bien 123.\t\n x";
  const char *want[] = {"Hola", ",", " ¿", "qué", " tal", "?", " ", " Bien", " 123", ".", "\t\n", " x"};
  size_t n = strlen(text), at = 0, k = 0;
  int ok = 1;
  for (; at < n && k < sizeof want / sizeof *want; k++) {
    size_t len = bpe_chunk_len((const uint8_t *)text + at, n - at);
    if (len != strlen(want[k]) || memcmp(text + at, want[k], len)) {
      fprintf(stderr, "chunk %zu: '%.*s', expected '%s'\n", k, (int)len, text + at, want[k]);
      ok = 0;
      break;
    }
    at += len;
  }
  TEST_ASSERT(ok && at == n && k == sizeof want / sizeof *want, "the chunks of '%s'", text);
  char longword[200];
  memset(longword, 'x', sizeof longword);
  TEST_ASSERT(bpe_chunk_len((const uint8_t *)longword, sizeof longword) == BPE_CHUNK_MAX, "a long word is cut");
  TEST_ASSERT(bpe_chunk_len((const uint8_t *)"\xe9t\xc3", 3) == 1, "a byte that is not UTF-8 is a symbol of its own");
}

/* ---- a naive learner: every pair recounted after every merge ---- */

typedef struct { int sym[BPE_PIECE_MAX]; int n; long long freq; } naive_word;

static int naive_words(const char *text, size_t len, naive_word *w, int cap) {
  int n = 0;
  for (size_t at = 0, c; at < len; at += c) {
    c = bpe_chunk_len((const uint8_t *)text + at, len - at);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
      int same = w[i].n == (int)c;
      for (size_t k = 0; k < c && same; k++) same = w[i].sym[k] == ID((uint8_t)text[at + k]);
      if (same) found = i;
    }
    if (found >= 0) { w[found].freq++; continue; }
    if (n == cap) return -1;
    w[n].n = (int)c;
    w[n].freq = 1;
    for (size_t k = 0; k < c; k++) w[n].sym[k] = ID((uint8_t)text[at + k]);
    n++;
  }
  return n;
}

/* The most frequent pair (ties: smallest left, then right) of the words, or 0 when none occurs twice. */
static int naive_best(const naive_word *w, int n, int vocab, long long *counts, int *left, int *right) {
  memset(counts, 0, (size_t)vocab * vocab * sizeof *counts);
  for (int i = 0; i < n; i++)
    for (int k = 0; k + 1 < w[i].n; k++) counts[(size_t)w[i].sym[k] * vocab + w[i].sym[k + 1]] += w[i].freq;
  long long best = 1;
  for (int l = 0; l < vocab; l++)
    for (int r = 0; r < vocab; r++)
      if (counts[(size_t)l * vocab + r] > best) best = counts[(size_t)l * vocab + r], *left = l, *right = r;
  return best >= 2;
}

static void against_naive(const char *text, size_t len, int vocab, const char *what) {
  static naive_word w[4000];
  int n = naive_words(text, len, w, 4000), merges = 0, l, r;
  long long *counts = malloc((size_t)vocab * vocab * sizeof *counts);
  for (; n > 0 && CF_BPE_FIRST_MERGE + merges < vocab && naive_best(w, n, vocab, counts, &l, &r); merges++)
    for (int i = 0; i < n; i++) {
      int out = 0;
      for (int k = 0; k < w[i].n;)
        if (k + 1 < w[i].n && w[i].sym[k] == l && w[i].sym[k + 1] == r) w[i].sym[out++] = CF_BPE_FIRST_MERGE + merges, k += 2;
        else w[i].sym[out++] = w[i].sym[k++];
      w[i].n = out;
    }
  free(counts);
  /* replay: the incremental learner must find the same merges, and encoding each word the same pieces */
  cf_bpe *b = learn1(text, len, vocab, NULL);
  TEST_ASSERT(n > 0 && cf_bpe_merges(b) == merges, "%s: %d merges, the naive learner %d", what, cf_bpe_merges(b), merges);
  int ids[BPE_PIECE_MAX], same_words = 1;
  for (int i = 0; i < n && same_words; i++) {
    uint8_t bytes[BPE_PIECE_MAX];
    size_t blen = 0;
    char *dec;
    TEST_OK(cf_bpe_decode(b, w[i].sym, (size_t)w[i].n, &dec, &blen));
    memcpy(bytes, dec, blen);
    free(dec);
    size_t m = cf_bpe_encode(b, bytes, blen, ids);
    same_words = m == (size_t)w[i].n && !memcmp(ids, w[i].sym, m * sizeof *ids);
  }
  TEST_ASSERT(same_words, "%s: encoding a training word gives the pieces learning left it in", what);
  cf_bpe_free(b);
}

/* Words of a few letters (repeats, overlaps such as "aaaa", many ties) and some symbols. */
static char *syllable_text(unsigned long long seed, size_t words, size_t *len) {
  static const char *parts[] = {"a", "aa", "ab", "ba", "la", "lo", "s", "es", "en", "el", "ó", "ñ", "qu", "e", ",", "."};
  test_rng rng = test_rng_seed(seed);
  char *t = malloc(words * 16 + 1);
  size_t n = 0;
  for (size_t i = 0; i < words; i++) {
    int k = 1 + (int)(test_uniform(&rng) * 3);
    if (i) t[n++] = test_uniform(&rng) < 0.1 ? '\n' : ' ';
    for (int j = 0; j < k; j++) {
      const char *p = parts[(int)(test_uniform(&rng) * 16)];
      memcpy(t + n, p, strlen(p));
      n += strlen(p);
    }
  }
  t[n] = 0;
  *len = n;
  return t;
}

static void round_trip(const cf_bpe *b, const void *text, size_t len, const char *what) {
  int *ids = malloc((len + 1) * sizeof *ids);
  size_t n = cf_bpe_encode(b, text, len, ids);
  char *back;
  size_t back_len;
  TEST_OK(cf_bpe_decode(b, ids, n, &back, &back_len));
  TEST_ASSERT(back_len == len && !memcmp(back, text, len), "%s: the round trip changed the text (%zu -> %zu bytes)",
              what, len, back_len);
  free(back);
  free(ids);
}

static void round_trips(void) {
  const char *texts[] = {spanish, english};
  size_t lens[] = {strlen(spanish), strlen(english)};
  cf_bpe *b;
  cf_bpe_learn_stats s;
  TEST_OK(cf_bpe_learn(texts, lens, 2, 600, &b, &s));
  TEST_ASSERT(s.merges > 100, "the Bible verses give %d merges", s.merges);
  round_trip(b, spanish, lens[0], "Spanish verses");
  round_trip(b, english, lens[1], "English verses");
  int *ids = malloc(lens[1] * sizeof *ids);
  size_t n = cf_bpe_encode(b, english, lens[1], ids);
  TEST_ASSERT(n * 2 < lens[1], "merges learned on the text compress it: %zu bytes, %zu tokens", lens[1], n);
  free(ids);
  test_rng rng = test_rng_seed(7);
  char buf[600];
  for (int i = 0; i < 300; i++) {  /* any bytes: NUL, invalid UTF-8, control characters */
    size_t len = (size_t)(test_uniform(&rng) * sizeof buf);
    for (size_t k = 0; k < len; k++) buf[k] = (char)(int)(test_uniform(&rng) * 256);
    if (i % 2)  /* and Bible text with random bytes put in */
      for (size_t k = 0; k < len; k++) buf[k] = test_uniform(&rng) < 0.05 ? buf[k] : spanish[k % lens[0]];
    round_trip(b, buf, len, i % 2 ? "Spanish text with random bytes" : "random bytes");
  }
  round_trip(b, "", 0, "the empty text");
  cf_bpe_free(b);
  for (size_t k = 0; k < sizeof buf; k++) buf[k] = (char)(int)(test_uniform(&rng) * 256);
  b = learn1(buf, sizeof buf, 2000, NULL);  /* learned on random bytes */
  round_trip(b, buf, sizeof buf, "random bytes, merges learned on them");
  round_trip(b, english, lens[1], "English, merges learned on random bytes");
  cf_bpe_free(b);
}

static void corpus_round_trip(void) {  /* the corpus tools/setup.sh writes, when it is there */
  char path[1200], *text = NULL;
  snprintf(path, sizeof path, "%s/build/data/kjv.txt", CLFORMER_SOURCE_DIR);
  FILE *f = fopen(path, "rb");
  if (!f) { printf("note: %s missing, the KJV round trip left out\n", path); return; }
  size_t cap = 1 << 20, len;
  text = malloc(cap);
  len = fread(text, 1, cap, f);
  fclose(f);
  double t0 = test_now();
  cf_bpe_learn_stats s;
  cf_bpe *b = learn1(text, len, 4000, &s);
  double learn_s = test_now() - t0;
  TEST_ASSERT(len == cap && s.merges == 4000 - CF_BPE_FIRST_MERGE, "%zu bytes of the KJV: %d merges", len, s.merges);
  round_trip(b, text, len, "the first MiB of the KJV");
  printf("KJV, %zu bytes: %d merges learned in %.2f s; the round trip is exact\n", len, s.merges, learn_s);
  cf_bpe_free(b);
  free(text);
}

static void determinism(void) {
  size_t len;
  char *text = syllable_text(3, 3000, &len);
  cf_bpe *a = learn1(text, len, 700, NULL), *b = learn1(text, len, 700, NULL);
  /* the same text given as two pieces, cut at a line's end */
  char *cut = strchr(text + len / 2, '\n');
  const char *pieces[] = {text, cut};
  size_t lens[] = {(size_t)(cut - text), len - (size_t)(cut - text)};
  cf_bpe *c;
  TEST_OK(cf_bpe_learn(pieces, lens, 2, 700, &c, NULL));
  int same = cf_bpe_merges(a) == cf_bpe_merges(b) && cf_bpe_merges(a) == cf_bpe_merges(c) && cf_bpe_merges(a) > 300;
  for (int k = 0; k < cf_bpe_merges(a) && same; k++) {
    int l1, r1, l2, r2, l3, r3;
    cf_bpe_merge_pair(a, k, &l1, &r1);
    cf_bpe_merge_pair(b, k, &l2, &r2);
    cf_bpe_merge_pair(c, k, &l3, &r3);
    same = l1 == l2 && r1 == r2 && l1 == l3 && r1 == r3;
  }
  TEST_ASSERT(same, "learning twice, or from the text in two files, gives the same %d merges", cf_bpe_merges(a));
  cf_bpe_free(a);
  cf_bpe_free(b);
  cf_bpe_free(c);
  free(text);
}

static char dir[] = "/tmp/clformer-bpe-XXXXXX";

static const char *write_file(const char *name, const char *content, size_t len) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  fwrite(content, 1, len, f);
  fclose(f);
  return path;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *t = malloc(1 << 20);
  *len = f ? fread(t, 1, 1 << 20, f) : 0;
  if (f) fclose(f);
  t[*len] = 0;
  return t;
}

static void save_load(void) {
  size_t len, saved_len, again_len;
  char *text = syllable_text(5, 2000, &len), path[300], again[300];
  cf_bpe *a = learn1(text, len, 500, NULL), *b;
  snprintf(path, sizeof path, "%s/merges.bpe", dir);
  snprintf(again, sizeof again, "%s/again.bpe", dir);
  TEST_OK(cf_bpe_save(a, path));
  TEST_OK(cf_bpe_load(path, &b));
  TEST_OK(cf_bpe_save(b, again));
  char *s1 = read_all(path, &saved_len), *s2 = read_all(again, &again_len);
  TEST_ASSERT(saved_len == again_len && !memcmp(s1, s2, saved_len), "save, load, save: the same bytes");
  TEST_ASSERT(!strncmp(s1, "clformer-bpe 1\nmerges 241\n", 26), "the header: '%.30s'", s1);
  int *ia = malloc(len * sizeof *ia), *ib = malloc(len * sizeof *ib);
  size_t na = cf_bpe_encode(a, text, len, ia), nb = cf_bpe_encode(b, text, len, ib);
  TEST_ASSERT(cf_bpe_vocab_size(a) == cf_bpe_vocab_size(b) && na == nb && !memcmp(ia, ib, na * sizeof *ia),
              "the loaded merges encode as the learned ones");
  free(ia);
  free(ib);
  free(s1);
  free(s2);
  cf_bpe_free(a);
  cf_bpe_free(b);
  free(text);
}

/* Loading `content` is refused, naming the file and `where` (":LINE:" or ""), with `why` in the message. */
static void refused(const char *content, size_t len, const char *where, const char *why) {
  const char *path = write_file("bad.bpe", content, len);
  cf_bpe *b = (cf_bpe *)1;
  char want[400];
  snprintf(want, sizeof want, "%s%s", path, where);
  cf_status st = cf_bpe_load(path, &b);
  const char *msg = cf_last_error();
  TEST_ASSERT(st == CF_ERR_DATA && !b && strstr(msg, want) && strstr(msg, why), "'%.40s...': %s (wanted '%s' ... '%s')",
              content, msg, want, why);
}
#define REFUSED(text, where, why) refused(text, sizeof text - 1, where, why)

static void corrupt_files(void) {
  cf_set_verbosity(-1);
  REFUSED("", ":1:", "not a clformer BPE merges file");
  REFUSED("#version 1\n", ":1:", "not a clformer BPE merges file");
  REFUSED("clformer-bpe 2\nmerges 0\n", ":1:", "version 2 of the merges format; this clformer reads version 1");
  REFUSED("clformer-bpe one\n", ":1:", "not a number");
  REFUSED("clformer-bpe 1\nmerge 3\n", ":2:", "expected 'merges N'");
  REFUSED("clformer-bpe 1\nmerges 3\n100 100\n", "", "ends after line 3 with 1 of the 3 merges");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n100 1", ":4:", "ends in the middle of this line");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n300 100\n", ":4:", "merge 2 joins an id not yet defined");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n259 2\n", ":4:", "joins a special id");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n100 100\n", ":4:", "merge 2 repeats an earlier merge");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n100 x\n", ":4:", "expected merge 2 as two ids");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n100  101\n", ":4:", "expected merge 2 as two ids");
  REFUSED("clformer-bpe 1\nmerges 2\n100 100\n-1 101\n", ":4:", "expected merge 2 as two ids");
  REFUSED("clformer-bpe 1\nmerges 1\n100 0100\n", ":3:", "expected merge 1 as two ids");
  REFUSED("clformer-bpe 1\nmerges 7\n100 100\n259 259\n260 260\n261 261\n262 262\n263 263\n264 264\n", ":9:",
          "makes a piece longer than 67 bytes");
  REFUSED("clformer-bpe 1\nmerges 1\n100 100\n", "", "without the 'end' line");
  REFUSED("clformer-bpe 1\nmerges 1\n100 100\n100 101\n", ":4:", "expected 'end CHECKSUM' after the 1 merges");
  /* a saved file with one id changed to another valid one: only the checksum can tell */
  size_t len;
  cf_bpe *b = learn1("aaabdaaabac", 11, 8000, NULL);
  char path[300];
  snprintf(path, sizeof path, "%s/good.bpe", dir);
  TEST_OK(cf_bpe_save(b, path));
  cf_bpe_free(b);
  char *good = read_all(path, &len), *edit = strstr(good, "100 101\n");
  TEST_ASSERT(edit && strstr(good, "\nend "), "the saved file: %s", good);
  edit[6] = '2';
  refused(good, len, ":6:", "does not match the file's content");
  edit[6] = '1';
  refused(good, len - 1, ":6:", "ends in the middle of this line");
  char *longer = malloc(len + 8);
  memcpy(longer, good, len);
  memcpy(longer + len, "100 2\n", 6);
  refused(longer, len + 6, ":7:", "text after the 'end' line");
  TEST_ASSERT(cf_bpe_load(write_file("ok.bpe", good, len), &b) == CF_OK && cf_bpe_merges(b) == 3, "the unedited file");
  cf_bpe_free(b);
  free(longer);
  free(good);
  TEST_ASSERT(cf_bpe_load(dir, &b) == CF_ERR_DATA && strstr(cf_last_error(), dir), "a directory: %s", cf_last_error());
  TEST_ASSERT(cf_bpe_load("/nonexistent/m.bpe", &b) == CF_ERR_DATA && strstr(cf_last_error(), "/nonexistent/m.bpe"),
              "a missing file: %s", cf_last_error());
  cf_set_verbosity(1);
}

static void bad_calls(void) {
  cf_set_verbosity(-1);
  cf_bpe *b;
  const char *t = "abc";
  size_t n = 3;
  TEST_ASSERT(cf_bpe_learn(&t, &n, 1, 258, &b, NULL) == CF_ERR_INVALID_ARG && strstr(cf_last_error(), "259"),
              "a vocabulary smaller than the bytes: %s", cf_last_error());
  b = learn1("", 0, 8000, NULL);
  TEST_ASSERT(cf_bpe_merges(b) == 0, "no text, no merges");
  int ids[] = {CF_BPE_BOS, ID('h'), ID('i'), CF_BPE_EOS, CF_BPE_PAD};
  char *text;
  size_t len;
  TEST_ASSERT(cf_bpe_decode(b, ids, 5, &text, &len) == CF_OK && len == 2 && !strcmp(text, "hi"), "special ids add nothing");
  free(text);
  ids[2] = 259;
  TEST_ASSERT(cf_bpe_decode(b, ids, 5, &text, &len) == CF_ERR_DATA && strstr(cf_last_error(), "token 3: id 259") && !text,
              "an id outside the vocabulary: %s", cf_last_error());
  cf_bpe_free(b);
  cf_bpe_free(NULL);
  cf_set_verbosity(1);
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  hand_worked();
  chunker();
  size_t len;
  char *text = syllable_text(1, 4000, &len);
  against_naive(text, len, CF_BPE_FIRST_MERGE + 400, "syllables");
  free(text);
  against_naive(spanish, strlen(spanish), CF_BPE_FIRST_MERGE + 300, "Spanish verses");
  round_trips();
  corpus_round_trip();
  determinism();
  save_load();
  corrupt_files();
  bad_calls();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "note: could not remove %s\n", dir);
  return test_finish("test_bpe");
}
