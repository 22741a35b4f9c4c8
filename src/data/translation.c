/* A translation config's data: the subword vocabulary (learned once, then read back, so a resumed
 * run and a translation tokenise as training did), the pairs of the training and validation
 * files, and the batch of each optimizer step. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "clformer/data.h"
#include "base/base.h"

cf_status cf_translation_path(const char *prefix, const char *lang, char *path, size_t n) {
  if ((size_t)snprintf(path, n, "%s.%s", prefix, lang) >= n)
    return CF_FAIL(CF_ERR_CONFIG, "%s.%s: the path is too long", prefix, lang);
  return CF_OK;
}

/* Lines of a regular file (a last line without '\n' counts), or -1 with the error reported. */
static long count_lines(const char *key, const char *path) {
  char *text;
  size_t len;
  if (cf_read_regular_file(path, (size_t)1 << 31, key, CF_ERR_DATA, &text, &len) != CF_OK) return -1;
  long n = len && text[len - 1] != '\n';
  for (size_t i = 0; i < len; i++) n += text[i] == '\n';
  free(text);
  return n;
}

cf_status cf_translation_check(const cf_config *c) {
  const char *keys[] = {"data.train", "data.valid", "data.test"};
  const char *prefixes[] = {c->data.train, c->data.valid, c->data.test};
  for (int i = 0; i < 3; i++) {
    if (!prefixes[i][0]) continue;
    char src[1100], tgt[1100];
    CF_TRY(cf_translation_path(prefixes[i], c->data.source_lang, src, sizeof src));
    CF_TRY(cf_translation_path(prefixes[i], c->data.target_lang, tgt, sizeof tgt));
    long ns = count_lines(keys[i], src), nt = ns < 0 ? -1 : count_lines(keys[i], tgt);
    if (ns < 0 || nt < 0) return CF_ERR_DATA;
    if (ns != nt || ns == 0)
      return CF_FAIL(CF_ERR_DATA, "%s: %s has %ld lines and %s %ld: the two sides must be aligned, a sentence a line",
                     keys[i], src, ns, tgt, nt);
  }
  return CF_OK;
}

/* Learn the BPE from both training files (one shared vocabulary) and save it at merges_path. */
static cf_status learn_bpe(cf_translation *t, const cf_config *c, const char *src, const char *tgt,
                           const char *merges_path) {
  char *texts[2] = {NULL, NULL};
  size_t lens[2] = {0, 0};
  const char *paths[2] = {src, tgt};
  cf_status st = CF_OK;
  for (int i = 0; i < 2 && st == CF_OK; i++)
    st = cf_read_regular_file(paths[i], (size_t)1 << 31, "training text", CF_ERR_DATA, &texts[i], &lens[i]);
  cf_bpe_learn_stats stats;
  if (st == CF_OK) st = cf_bpe_learn((const char *const *)texts, lens, 2, c->data.vocab_size, &t->bpe, &stats);
  if (st == CF_OK) {
    cf_log(1, "learned %d BPE merges from %s and %s (%zu bytes) in a vocabulary of %d ids: %s", stats.merges, src, tgt,
           stats.bytes, cf_bpe_vocab_size(t->bpe), merges_path);
    st = cf_bpe_save(t->bpe, merges_path);
  }
  free(texts[0]);
  free(texts[1]);
  t->learned = st == CF_OK;
  return st;
}

static cf_status load_or_learn_bpe(cf_translation *t, const cf_config *c, const char *src, const char *tgt,
                                   const char *merges_path) {
  struct stat sb;
  if (stat(merges_path, &sb) != 0) {
    if (errno != ENOENT) return CF_FAIL(CF_ERR_IO, "%s: %s", merges_path, strerror(errno));
    CF_TRY(learn_bpe(t, c, src, tgt, merges_path));
  } else {
    CF_TRY(cf_bpe_load(merges_path, &t->bpe));
  }
  if (cf_bpe_vocab_size(t->bpe) > c->data.vocab_size)
    return CF_FAIL(CF_ERR_DATA, "%s has %d ids, more than data.vocab_size = %d: learned for another config",
                   merges_path, cf_bpe_vocab_size(t->bpe), c->data.vocab_size);
  return CF_OK;
}

/* The pairs of split PREFIX (both languages' files). */
static cf_status open_split(const cf_translation *t, const cf_config *c, const char *prefix, cf_pairs **out) {
  char src[1100], tgt[1100];
  CF_TRY(cf_translation_path(prefix, c->data.source_lang, src, sizeof src));
  CF_TRY(cf_translation_path(prefix, c->data.target_lang, tgt, sizeof tgt));
  CF_TRY(cf_pairs_open(t->bpe, src, tgt, c->data.max_len, out));
  if (cf_pairs_count(*out) == 0)
    return CF_FAIL(CF_ERR_DATA, "%s and %s hold no pair of at most data.max_len = %d tokens", src, tgt, c->data.max_len);
  return CF_OK;
}

cf_status cf_translation_open(cf_translation *t, const cf_config *c, const char *merges_path) {
  memset(t, 0, sizeof *t);
  t->epoch_index = UINT64_MAX;
  t->max_tokens = c->data.max_tokens;
  t->seed = c->seed;
  char src[1100], tgt[1100];
  cf_status st = cf_translation_path(c->data.train, c->data.source_lang, src, sizeof src);
  if (st == CF_OK) st = cf_translation_path(c->data.train, c->data.target_lang, tgt, sizeof tgt);
  if (st == CF_OK) st = load_or_learn_bpe(t, c, src, tgt, merges_path);
  if (st == CF_OK) st = open_split(t, c, c->data.train, &t->train);
  if (st == CF_OK && c->data.valid[0]) st = open_split(t, c, c->data.valid, &t->valid);
  if (st == CF_OK && t->valid) st = cf_pairs_epoch(t->valid, 0, 0, t->max_tokens, &t->valid_batches);
  /* epoch 0 in hand: every epoch has its number of batches (cf_translation_epoch_batches) */
  if (st == CF_OK) st = cf_pairs_epoch(t->train, t->seed, 0, t->max_tokens, &t->epoch);
  if (st == CF_OK) t->epoch_index = 0;
  for (size_t i = 0; st == CF_OK && i < cf_pairs_count(t->train); i++) {
    int n;
    cf_pairs_target(t->train, i, &n);
    t->train_tokens += (size_t)n + 1;
  }
  if (st != CF_OK) cf_translation_close(t);
  return st;
}

void cf_translation_close(cf_translation *t) {
  cf_pair_epoch_free(&t->epoch);
  cf_pair_epoch_free(&t->valid_batches);
  cf_pairs_free(t->train);
  cf_pairs_free(t->valid);
  cf_bpe_free(t->bpe);
  memset(t, 0, sizeof *t);
}

size_t cf_translation_epoch_batches(const cf_translation *t) { return t->epoch.n_batches; }

cf_status cf_translation_train_batch(cf_translation *t, int step, cf_pair_batch *b, int *epoch) {
  if (step < 1) return CF_FAIL(CF_ERR_INVALID_ARG, "step %d: steps count from 1", step);
  if (t->epoch_index == UINT64_MAX) return CF_FAIL(CF_ERR_INVALID_ARG, "the training epoch was lost to an error");
  size_t n = t->epoch.n_batches;
  uint64_t e = (uint64_t)(step - 1) / n;
  if (e != t->epoch_index) {
    cf_pair_epoch_free(&t->epoch);
    t->epoch_index = UINT64_MAX;
    CF_TRY(cf_pairs_epoch(t->train, t->seed, e, t->max_tokens, &t->epoch));
    t->epoch_index = e;
    if (t->epoch.n_batches != n)  /* the cuts follow the sorted lengths, which no epoch changes */
      return CF_FAIL(CF_ERR_DATA, "epoch %llu has %zu batches, epoch 0 %zu", (unsigned long long)e, t->epoch.n_batches, n);
  }
  if (epoch) *epoch = (int)e;
  return cf_pairs_batch(t->train, &t->epoch, (size_t)(step - 1) % t->epoch.n_batches, b);
}

size_t cf_translation_valid_count(const cf_translation *t) { return t->valid ? t->valid_batches.n_batches : 0; }

cf_status cf_translation_valid_batch(cf_translation *t, size_t k, cf_pair_batch *b) {
  if (k >= cf_translation_valid_count(t)) return CF_FAIL(CF_ERR_INVALID_ARG, "validation batch %zu of %zu", k,
                                                         cf_translation_valid_count(t));
  return cf_pairs_batch(t->valid, &t->valid_batches, k, b);
}
