/* Training data: a byte-level tokenizer (V = 256) over memory-mapped text files, a
 * deterministic train/validation split, and batches drawn by a counter-based generator keyed
 * by (seed, batch index), so a resumed run needs only the step to continue the same order. */
#ifndef CLFORMER_DATA_H
#define CLFORMER_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/config.h"

typedef struct cf_text {
  const uint8_t *bytes;  /* the mapped file */
  size_t n;
  void *map;
  size_t map_len;
} cf_text;

typedef struct cf_data {
  cf_text train_file, valid_file;     /* valid_file unused when split from train */
  const uint8_t *train, *valid;       /* the two splits */
  size_t n_train, n_valid;
  double unigram_entropy;             /* of the training split, nats per byte */
} cf_data;

enum { CF_SPLIT_TRAIN = 0, CF_SPLIT_VALID = 1 };

/* Open data.train (and data.valid, or split off the last valid_fraction): regular files only (a
 * directory, FIFO or device is refused without blocking), not empty. Each split must hold at least
 * seq_len + 1 bytes; CF_ERR_DATA with a clear message otherwise (where the config set the key, which
 * split is short and what to change). */
cf_status cf_data_open(cf_data *d, const cf_config *c);
void cf_data_close(cf_data *d);
/* Whether cf_data_open would accept c's data (opened, then closed): what `clformer check` and the
 * experiments' checks call, so they refuse exactly what training refuses (an encoder-decoder's
 * pairs: cf_translation_check). */
cf_status cf_data_check(const cf_config *c);

/* Batch number `index` of a split: B windows of T+1 consecutive bytes at offsets drawn from
 * (seed, split, index); inputs are bytes 0..T-1 and targets 1..T of each window, (B, T) ints. */
void cf_data_batch(const cf_data *d, int split, uint64_t seed, uint64_t index, int B, int T, int *inputs, int *targets);
/* Rows first .. first+B-1 of that batch (row b's window depends on (seed, split, index, b) only,
 * not on the batch's size): a rank's shard of a batch shared out across ranks. */
void cf_data_batch_rows(const cf_data *d, int split, uint64_t seed, uint64_t index, int first, int B, int T,
                        int *inputs, int *targets);

/* Validation batch `index` (0 .. batches-1) of an evaluation of `batches` batches: row b is window
 * j = index * B + b of batches * B windows of T+1 bytes spaced evenly over the validation split
 * (window j starts at byte floor(j (n_valid - T) / (batches B))). No seed: every seed and run of a
 * config is validated on the same text. */
void cf_data_valid_batch(const cf_data *d, int batches, int index, int B, int T, int *inputs, int *targets);

/* Byte-level tokenizer: text <-> token ids (identity on bytes). */
size_t cf_tokenize(const char *text, int *tokens, size_t max_tokens);

/* ---- Byte-pair encoding (src/data/bpe*.c): a subword vocabulary shared by both languages ----
 * Ids: 0 pad, 1 bos, 2 eos (the special ids), 3 .. 258 the bytes 0 .. 255 (so any text, UTF-8 or
 * not, encodes without an unknown id and decodes back to the same bytes), then one id per merge:
 * merge k joins two earlier ids into id 259 + k. Text is cut into chunks first (runs of letters,
 * digits or other symbols with the space before them, runs of white space) and no merge crosses a
 * chunk, so a word's pieces do not depend on its neighbours. */
enum { CF_BPE_PAD = 0, CF_BPE_BOS = 1, CF_BPE_EOS = 2, CF_BPE_BYTE0 = 3, CF_BPE_FIRST_MERGE = 259 };
enum { CF_BPE_MAX_VOCAB = CF_BPE_FIRST_MERGE + (1 << 20) };  /* a million merges: far past any use */
typedef struct cf_bpe cf_bpe;

typedef struct cf_bpe_learn_stats {
  size_t bytes, chunks, distinct_chunks;  /* of the training text */
  int merges;                             /* learned; fewer than asked when no pair occurs twice */
  long long last_count;                   /* occurrences of the last merge's pair */
} cf_bpe_learn_stats;

/* Learns merges from texts[0..n_texts) (lens[i] bytes each, any bytes) until the vocabulary has
 * vocab_size ids (CF_BPE_FIRST_MERGE to CF_BPE_MAX_VOCAB) or no pair of ids occurs twice. Each step joins the
 * most frequent adjacent pair (ties: the smallest left id, then right id). stats may be NULL. */
cf_status cf_bpe_learn(const char *const *texts, const size_t *lens, int n_texts, int vocab_size, cf_bpe **out,
                       cf_bpe_learn_stats *stats);
void cf_bpe_free(cf_bpe *b);  /* NULL: no-op */
int cf_bpe_vocab_size(const cf_bpe *b);
int cf_bpe_merges(const cf_bpe *b);
/* Merge k's two ids (0 <= k < cf_bpe_merges(b)). */
void cf_bpe_merge_pair(const cf_bpe *b, int k, int *left, int *right);
/* The bytes id stands for (none for a special id); NULL for an id outside the vocabulary. */
const uint8_t *cf_bpe_piece(const cf_bpe *b, int id, size_t *len);

/* The ids of text[0..len) into ids, which must have room for len ids (at most one per byte);
 * returns how many. Merges apply in the order they were learned, as learning applied them. */
size_t cf_bpe_encode(const cf_bpe *b, const void *text, size_t len, int *ids);
/* The text of ids[0..n) (special ids add nothing), malloc'd and NUL-terminated, *len bytes;
 * CF_ERR_DATA naming the position of an id outside the vocabulary. */
cf_status cf_bpe_decode(const cf_bpe *b, const int *ids, size_t n, char **text, size_t *len);

/* The merges file, written beside a checkpoint (text, one merge a line; README "Subword tokenizer"):
 *   clformer-bpe 1          the format and its version
 *   merges N
 *   LEFT RIGHT              N lines: merge k's ids, in decimal; line k + 3 defines id 259 + k
 *   end HASH                FNV-1a 64 of every byte before this line, 16 lowercase hex digits
 * Saved atomically. A load refuses anything else (another version, a truncated or corrupt file, an
 * id not yet defined, a special id, a repeated merge) with CF_ERR_DATA naming the file and line. */
cf_status cf_bpe_save(const cf_bpe *b, const char *path);
cf_status cf_bpe_load(const char *path, cf_bpe **out);
/* The vocabulary's fingerprint: the HASH its file's end line carries (0 only when out of memory). */
unsigned long long cf_bpe_checksum(const cf_bpe *b);

/* ---- Translation pairs (src/data/pairs*.c): two aligned files, one sentence a line, in batches of
 * similar-length pairs bounded by a token budget (fairseq's max_tokens) ---- */
typedef struct cf_pairs cf_pairs;

/* Reads src_path and tgt_path (regular files; line k of one translates line k of the other; a last
 * line without '\n' counts) and encodes every line with b. Files with different line counts are
 * refused (CF_ERR_DATA naming both counts). A pair whose source or target has more than max_len
 * tokens, eos included, is left out and counted (max_len 0: none is). */
cf_status cf_pairs_open(const cf_bpe *b, const char *src_path, const char *tgt_path, int max_len, cf_pairs **out);
void cf_pairs_free(cf_pairs *p);  /* NULL: no-op */
size_t cf_pairs_count(const cf_pairs *p);     /* pairs kept */
size_t cf_pairs_left_out(const cf_pairs *p);  /* pairs longer than max_len */
/* Pair i's source and target ids (no bos or eos), and the line of the files it came from (from 1). */
const int *cf_pairs_source(const cf_pairs *p, size_t i, int *n);
const int *cf_pairs_target(const cf_pairs *p, size_t i, int *n);
size_t cf_pairs_line(const cf_pairs *p, size_t i);

/* One epoch's batches: batch k holds pairs order[start[k] .. start[k + 1]). */
typedef struct cf_pair_epoch {
  size_t n_batches, n_pairs;
  size_t *order, *start;
  int max_tokens;
} cf_pair_epoch;
/* Epoch `epoch` of the pairs under `seed`: pairs sorted by source length, then target length (eos
 * included; ties in an order drawn from (seed, epoch)), cut greedily into batches whose padded size
 * B x max(S, T) is at most max_tokens, and the batches shuffled by (seed, epoch). Every pair is in
 * exactly one batch. CF_ERR_DATA when the longest pair alone exceeds max_tokens. */
cf_status cf_pairs_epoch(const cf_pairs *p, uint64_t seed, uint64_t epoch, int max_tokens, cf_pair_epoch *e);
void cf_pair_epoch_free(cf_pair_epoch *e);

typedef struct cf_pair_batch {
  int B, S, T;    /* pairs; source and target lengths, padded to the batch's longest */
  int *src;       /* (B, S) the source's ids, eos, then pad */
  int *src_len;   /* (B) source tokens, eos included: the keys the padding mask lets through */
  int *tgt_in;    /* (B, T) bos, the target's ids, then pad: the decoder's input */
  int *tgt_out;   /* (B, T) the target's ids, eos, then pad: what the decoder predicts (pad: no loss) */
  int *tgt_len;   /* (B) target tokens, eos included */
  size_t *pair;   /* (B) which pairs, for cf_pairs_line */
  size_t cap;     /* of the arrays, in tokens */
} cf_pair_batch;
/* Batch k of epoch e into b: start from a zeroed b; its arrays are reused and grown as needed. */
cf_status cf_pairs_batch(const cf_pairs *p, const cf_pair_epoch *e, size_t k, cf_pair_batch *b);
void cf_pair_batch_free(cf_pair_batch *b);

/* ---- Translation data (model.arch encoder_decoder, src/data/translation.c): the subword
 * vocabulary and the training and validation pairs of a config, batched for each step ---- */
typedef struct cf_translation {
  cf_bpe *bpe;
  cf_pairs *train, *valid;      /* valid: NULL when data.valid is empty */
  int max_tokens;
  uint64_t seed;
  cf_pair_epoch epoch;          /* the training epoch in hand ... */
  uint64_t epoch_index;         /* ... and its number (UINT64_MAX: lost to an error) */
  cf_pair_epoch valid_batches;  /* the validation pairs in one fixed order (epoch 0 of seed 0) */
  size_t train_tokens;          /* the training pairs' target tokens, eos included */
  int learned;                  /* the BPE was learned (and saved) by this open, not loaded */
} cf_translation;

/* The files PREFIX.SOURCE_LANG and PREFIX.TARGET_LANG of data.train (and of data.valid when set),
 * a sentence a line, through the BPE of merges_path: loaded when that file exists (a resumed run,
 * a translation), else learned from both training files to data.vocab_size and saved there. Pairs
 * longer than data.max_len are left out (counted in cf_pairs_left_out). A learned vocabulary
 * smaller than data.vocab_size is fine (the model's extra ids go unused); one larger is refused. */
cf_status cf_translation_open(cf_translation *t, const cf_config *c, const char *merges_path);
void cf_translation_close(cf_translation *t);  /* a zeroed one too */
/* What cf_data_check does for an encoder-decoder: each split's two files (train, valid, and test
 * when set) are regular files of as many lines; CF_ERR_DATA naming the key and file else. */
cf_status cf_translation_check(const cf_config *c);
/* The training batch of optimizer step `step` (from 1): batch (step - 1) mod n of epoch
 * (step - 1) / n, n the batches of an epoch, so a step names its batch alone (exact resume).
 * *epoch (may be NULL): its epoch, from 0. */
cf_status cf_translation_train_batch(cf_translation *t, int step, cf_pair_batch *b, int *epoch);
size_t cf_translation_epoch_batches(const cf_translation *t);  /* training batches an epoch */
size_t cf_translation_valid_count(const cf_translation *t);    /* validation batches (0: none) */
cf_status cf_translation_valid_batch(cf_translation *t, size_t k, cf_pair_batch *b);
/* The files of a split: PREFIX.LANG into path (n bytes); CF_ERR_CONFIG when it does not fit. */
cf_status cf_translation_path(const char *prefix, const char *lang, char *path, size_t n);

#endif
