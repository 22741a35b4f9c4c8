/* A translation config's data (cf_translation): the BPE learned and saved by the first open, read
 * back (not relearned) by the next, which then batches every step the same (exact resume); each
 * epoch holds every training pair once; misaligned or missing files refused by cf_data_check; a
 * merges file larger than data.vocab_size refused; CRLF files read as LF files. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/data.h"
#include "testutil.h"

static char dir[] = "/tmp/clformer-translation-XXXXXX";
enum { N_TRAIN = 120, N_VALID = 9 };

static void write_lines_ending(const char *name, unsigned long long seed, int n, int words, const char *end) {
  static const char *vocab[] = {"el", "la", "tierra", "Dios", "y", "cielos", "luz", "aguas", "the", "earth", "God",
                                "and", "heaven", "light", "waters", "day", "night"};
  char path[300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  test_rng r = test_rng_seed(seed);
  for (int i = 0; i < n; i++) {
    int k = 1 + (int)(test_uniform(&r) * words);
    for (int j = 0; j < k; j++) fprintf(f, j ? " %s" : "%s", vocab[(int)(test_uniform(&r) * 17)]);
    fputs(end, f);
  }
  fclose(f);
}

static void write_lines(const char *name, unsigned long long seed, int n, int words) {
  write_lines_ending(name, seed, n, words, "\n");
}

/* Files with CRLF line ends give the pairs LF files do (ids alike, no '\r' in a sentence). */
static void crlf_reads_as_lf(const cf_bpe *bpe) {
  write_lines_ending("crlf.es", 1, 20, 12, "\r\n");
  write_lines_ending("crlf.en", 2, 20, 12, "\r\n");
  write_lines_ending("lf.es", 1, 20, 12, "\n");
  write_lines_ending("lf.en", 2, 20, 12, "\n");
  char p[4][300];
  const char *names[] = {"crlf.es", "crlf.en", "lf.es", "lf.en"};
  for (int i = 0; i < 4; i++) snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
  cf_pairs *crlf, *lf;
  TEST_OK(cf_pairs_open(bpe, p[0], p[1], 0, &crlf));
  TEST_OK(cf_pairs_open(bpe, p[2], p[3], 0, &lf));
  int same = cf_pairs_count(crlf) == cf_pairs_count(lf);
  for (size_t i = 0; same && i < cf_pairs_count(lf); i++)
    for (int side = 0; side < 2; side++) {
      int na, nb;
      const int *a = side ? cf_pairs_target(crlf, i, &na) : cf_pairs_source(crlf, i, &na);
      const int *b = side ? cf_pairs_target(lf, i, &nb) : cf_pairs_source(lf, i, &nb);
      same &= na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
    }
  TEST_ASSERT(same, "CRLF files read otherwise than LF files");
  cf_pairs_free(crlf);
  cf_pairs_free(lf);
}

static void config(cf_config *c, int vocab) {
  cf_config_defaults(c);
  c->model.arch = CF_ARCH_ENCODER_DECODER;
  c->data.tokenizer = CF_TOKENIZER_BPE;
  c->data.vocab_size = vocab;
  c->data.max_len = 48;
  c->data.max_tokens = 96;
  snprintf(c->data.train, sizeof c->data.train, "%s/train", dir);
  snprintf(c->data.valid, sizeof c->data.valid, "%s/valid", dir);
  snprintf(c->data.source_lang, sizeof c->data.source_lang, "es");
  snprintf(c->data.target_lang, sizeof c->data.target_lang, "en");
  test_validate(c);
}

/* Steps 1 .. steps' batches, their source ids (pair index, then ids) flattened into buf. */
static size_t batches(cf_translation *t, int steps, int *buf, size_t cap) {
  cf_pair_batch b;
  memset(&b, 0, sizeof b);
  size_t n = 0;
  for (int s = 1; s <= steps; s++) {
    TEST_OK(cf_translation_train_batch(t, s, &b, NULL));
    for (int i = 0; i < b.B * b.S && n < cap; i++) buf[n++] = b.src[i];
    for (int i = 0; i < b.B && n < cap; i++) buf[n++] = (int)b.pair[i];
  }
  cf_pair_batch_free(&b);
  return n;
}

int main(void) {
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp");
  write_lines("train.es", 1, N_TRAIN, 12);
  write_lines("train.en", 2, N_TRAIN, 12);
  write_lines("valid.es", 3, N_VALID, 8);
  write_lines("valid.en", 4, N_VALID, 8);
  cf_config c;
  config(&c, 300);
  TEST_OK(cf_data_check(&c));
  char merges[400];
  snprintf(merges, sizeof merges, "%s/bpe.merges", dir);

  /* the first open learns and saves; the second reads it back and batches every step alike */
  cf_translation a, b;
  TEST_OK(cf_translation_open(&a, &c, merges));
  struct stat sb;
  TEST_ASSERT(a.learned && stat(merges, &sb) == 0, "the first open learned and saved %s", merges);
  TEST_ASSERT(cf_pairs_count(a.train) == N_TRAIN && cf_translation_valid_count(&a) > 0, "%zu training pairs",
              cf_pairs_count(a.train));
  int n = (int)cf_translation_epoch_batches(&a);
  TEST_ASSERT(n > 1, "%d batches an epoch", n);
  TEST_OK(cf_translation_open(&b, &c, merges));
  TEST_ASSERT(!b.learned && cf_bpe_vocab_size(b.bpe) == cf_bpe_vocab_size(a.bpe), "the second open read the merges");
  enum { CAP = 1 << 16 };
  int *x = malloc(CAP * sizeof *x), *y = malloc(CAP * sizeof *y);
  size_t nx = batches(&a, 2 * n + 1, x, CAP);
  /* a step names its batch alone: b, having gone to the next epoch first, batches steps 1 .. as a */
  cf_pair_batch pb;
  memset(&pb, 0, sizeof pb);
  TEST_OK(cf_translation_train_batch(&b, n + 2, &pb, NULL));
  size_t ny = batches(&b, 2 * n + 1, y, CAP);
  TEST_ASSERT(nx == ny && !memcmp(x, y, nx * sizeof *x), "a reopened run batches the steps differently");

  /* each epoch holds every pair once */
  int *seen = calloc(N_TRAIN, sizeof *seen), epoch = -1;
  for (int e = 0; e < 2; e++) {
    memset(seen, 0, N_TRAIN * sizeof *seen);
    for (int s = 1 + e * n; s <= (e + 1) * n; s++) {
      TEST_OK(cf_translation_train_batch(&a, s, &pb, &epoch));
      TEST_ASSERT(epoch == e, "step %d is in epoch %d, not %d", s, epoch, e);
      for (int i = 0; i < pb.B; i++) seen[pb.pair[i]]++;
      TEST_ASSERT(pb.B * (pb.S > pb.T ? pb.S : pb.T) <= c.data.max_tokens, "batch over the token budget");
    }
    int once = 1;
    for (int i = 0; i < N_TRAIN; i++) once &= seen[i] == 1;
    TEST_ASSERT(once, "epoch %d does not hold every pair exactly once", e);
  }
  cf_pair_batch_free(&pb);
  crlf_reads_as_lf(a.bpe);
  cf_translation_close(&a);
  cf_translation_close(&b);

  /* merges with more ids than data.vocab_size (another config's) are refused */
  cf_config big;
  config(&big, 400);
  char merges2[400];
  snprintf(merges2, sizeof merges2, "%s/bpe400.merges", dir);
  TEST_OK(cf_translation_open(&a, &big, merges2));
  int learned = cf_bpe_vocab_size(a.bpe);
  cf_translation_close(&a);
  if (learned > 300) TEST_ASSERT(cf_translation_open(&a, &c, merges2) == CF_ERR_DATA, "a %d-id merges file", learned);
  else printf("note: only %d ids learned; the larger-vocabulary refusal is not exercised\n", learned);

  /* misaligned and missing files */
  write_lines("valid.en", 5, N_VALID + 1, 8);
  TEST_ASSERT(cf_data_check(&c) == CF_ERR_DATA, "valid.es and valid.en of different line counts");
  snprintf(c.data.valid, sizeof c.data.valid, "%s/nothing", dir);
  TEST_ASSERT(cf_data_check(&c) == CF_ERR_DATA, "missing validation files");
  free(x);
  free(y);
  free(seen);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  TEST_ASSERT(system(cmd) == 0, "cleanup");
  return test_finish("test_translation");
}
