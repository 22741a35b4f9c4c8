/* cf_translate_lines decodes incrementally (the keys and values of earlier positions kept, moved
 * with their hypotheses as a beam reorders its rows): its translations must be those of the plain
 * search, which runs the decoder over every whole prefix (cf_model_next_logprobs), sentence by
 * sentence. An untrained model is the hard case: its outputs run long and its beams reorder often. */
#include <math.h>
#include <string.h>
#include "clformer/clformer.h"
#include "base/base.h"
#include "model/beam.h"
#include "testutil.h"

static const char *lines[] = {"En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz.",
                              "", "luz", "Y llamó Dios a la luz Día, y a las tinieblas llamó Noche.",
                              "Y fué la tarde y la mañana un día."};
enum { N_LINES = sizeof lines / sizeof *lines, MAX_LEN = 24 };

static int known;  /* the BPE's ids: the model's others are never chosen */

static cf_status whole_prefixes(void *user, const int *prefix, int n, int len, float *logprobs) {
  CF_TRY(cf_model_next_logprobs(user, prefix, n, len, logprobs));
  int V = cf_model_vocab(user);
  for (int i = 0; i < n; i++)
    for (int v = known; v < V; v++) logprobs[(size_t)i * V + v] = -INFINITY;
  return CF_OK;
}

/* Line i translated alone by the plain search: its text. */
static char *plain(cf_model *m, const cf_bpe *bpe, int i, int beam) {
  int src[MAX_LEN], n = (int)cf_bpe_encode(bpe, lines[i], strlen(lines[i]), src);
  if (n > MAX_LEN - 1) n = MAX_LEN - 1;
  src[n++] = CF_BPE_EOS;
  int *rows = malloc((size_t)beam * n * sizeof *rows), *lens = malloc((size_t)beam * sizeof *lens);
  for (int k = 0; k < beam; k++) {
    memcpy(rows + k * n, src, (size_t)n * sizeof *src);
    lens[k] = n;
  }
  TEST_OK(cf_model_encode(m, rows, lens, beam, n));
  int max_out = 2 * n + 10 < MAX_LEN ? 2 * n + 10 : MAX_LEN, ids[MAX_LEN], len;
  cf_beam_options o = {beam, 1.0, max_out, CF_BPE_BOS, CF_BPE_EOS, CF_BPE_PAD, cf_model_vocab(m), NULL};
  TEST_OK(cf_beam_search(&o, 1, whole_prefixes, m, ids, &len, NULL));
  char *text;
  size_t bytes;
  TEST_OK(cf_bpe_decode(bpe, ids, (size_t)len, &text, &bytes));
  TEST_OK(cf_utf8_replace_invalid(&text, bytes));  /* as cf_translate_lines gives text */
  free(rows);
  free(lens);
  return text;
}

int main(void) {
  cf_context *ctx = test_context();
  const char *texts[] = {lines[0], lines[1], lines[4], lines[5]};
  size_t text_lens[4];
  for (int i = 0; i < 4; i++) text_lens[i] = strlen(texts[i]);
  cf_bpe *bpe;
  TEST_OK(cf_bpe_learn(texts, text_lens, 4, 300, &bpe, NULL));
  known = cf_bpe_vocab_size(bpe);  /* fewer than the model's 300: the unused ids must not come out */
  cf_config c;
  test_model_config(&c, 2, 16, 2, 32);
  c.model.arch = CF_ARCH_ENCODER_DECODER;
  c.model.tie_embeddings = 1;
  c.data.tokenizer = CF_TOKENIZER_BPE;
  c.data.vocab_size = 300;
  c.data.max_len = MAX_LEN;
  c.data.max_tokens = 8 * MAX_LEN;
  snprintf(c.data.valid, sizeof c.data.valid, "unused");
  snprintf(c.data.source_lang, sizeof c.data.source_lang, "es");
  snprintf(c.data.target_lang, sizeof c.data.target_lang, "en");
  test_validate(&c);
  int B, T;
  cf_model_shape(&c, &B, &T);
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m));
  TEST_OK(cf_model_init(m, 11));
  for (int beam = 1; beam <= 4; beam += 3) {
    char *out[N_LINES];
    cf_translate_options o = {beam, 1.0};
    TEST_OK(cf_translate_lines(m, bpe, lines, N_LINES, &o, out, NULL, NULL, NULL));
    for (int i = 0; i < N_LINES; i++) {
      char *want = plain(m, bpe, i, beam);
      TEST_ASSERT(!strcmp(out[i], want), "beam %d, line %d: incremental '%s', plain '%s'", beam, i, out[i], want);
      free(want);
      free(out[i]);
    }
  }
  cf_model_free(m);
  cf_bpe_free(bpe);
  cf_context_free(ctx);
  return test_finish("test_translate");
}
