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
 * experiments' checks call, so they refuse exactly what training refuses. */
cf_status cf_data_check(const cf_config *c);

/* Batch number `index` of a split: B windows of T+1 consecutive bytes at offsets drawn from
 * (seed, split, index); inputs are bytes 0..T-1 and targets 1..T of each window, (B, T) ints. */
void cf_data_batch(const cf_data *d, int split, uint64_t seed, uint64_t index, int B, int T, int *inputs, int *targets);
/* Rows first .. first+B-1 of that batch (row b's window depends on (seed, split, index, b) only,
 * not on the batch's size): a rank's shard of a batch shared out across ranks. */
void cf_data_batch_rows(const cf_data *d, int split, uint64_t seed, uint64_t index, int first, int B, int T,
                        int *inputs, int *targets);

/* Byte-level tokenizer: text <-> token ids (identity on bytes). */
size_t cf_tokenize(const char *text, int *tokens, size_t max_tokens);

#endif
