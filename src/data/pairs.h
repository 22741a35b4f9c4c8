/* Translation pairs, internal: what pairs.c (reading and encoding) and pairs_batch.c (epochs and
 * batches) share. */
#ifndef CLFORMER_DATA_PAIRS_H
#define CLFORMER_DATA_PAIRS_H

#include <stddef.h>
#include "clformer/data.h"

typedef struct {
  size_t src, tgt;    /* where the pair's ids start in cf_pairs.ids */
  int n_src, n_tgt;   /* ids, without bos or eos */
  size_t line;        /* in the files, from 1 */
} pairs_entry;

struct cf_pairs {
  int *ids;           /* every kept pair's source then target ids */
  size_t n_ids;
  pairs_entry *pair;  /* (n) */
  size_t n, left_out;
};

#endif
