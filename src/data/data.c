/* Byte-level data: mmap'd text, split, unigram entropy, counter-based training batches and fixed,
 * evenly spaced validation windows. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/data.h"
#include "clformer/base.h"
#include "runtime/runtime.h"

/* A data file, memory-mapped; `key` names it in messages, with where the config set it. */
static cf_status text_open(cf_text *t, const cf_config *c, const char *path, const char *key) {
  memset(t, 0, sizeof *t);
  char w[1200];
  const char *why = NULL;
  size_t size;
  int fd = cf_open_regular(path, &size, &why);  /* a FIFO or a device is refused, never waited on */
  if (fd < 0) return CF_FAIL(CF_ERR_DATA, "%s: cannot open '%s': %s", cf_config_key_where(c, key, w, sizeof w), path, why);
  if (size == 0) {
    close(fd);
    return CF_FAIL(CF_ERR_DATA, "%s: '%s' is empty", cf_config_key_where(c, key, w, sizeof w), path);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return CF_FAIL(CF_ERR_DATA, "%s: cannot map '%s': %s", cf_config_key_where(c, key, w, sizeof w), path, strerror(errno));
  t->map = map;
  t->map_len = size;
  t->bytes = map;
  t->n = size;
  return CF_OK;
}

static void text_close(cf_text *t) {
  if (t->map) munmap(t->map, t->map_len);
  memset(t, 0, sizeof *t);
}

static double entropy(const uint8_t *b, size_t n) {
  double count[256] = {0}, h = 0;
  for (size_t i = 0; i < n; i++) count[b[i]]++;
  for (int v = 0; v < 256; v++)
    if (count[v] > 0) h -= count[v] / (double)n * log(count[v] / (double)n);
  return h;
}

/* The smallest data.valid_fraction (to 0.001, at most 0.5) that leaves both splits of an n-byte
 * file at least `need` bytes, as cf_data_open splits; 0 when none does. */
static double fitting_fraction(size_t n, size_t need) {
  for (double f = ceil((double)need * 1000 / (double)n) / 1000; f <= 0.5; f += 0.001) {
    size_t nv = (size_t)((double)n * f);
    if (nv >= need) return n - nv >= need ? f : 0;
  }
  return 0;
}

/* Which split is too short, and what to change. */
static cf_status split_too_short(const cf_data *d, const cf_config *c, size_t need) {
  char w[1200];
  int train_short = d->n_train < need;
  if (c->data.valid[0])
    return CF_FAIL(CF_ERR_DATA, "%s: '%s' has %zu bytes, fewer than data.seq_len + 1 = %zu: use a larger file or lower "
                   "data.seq_len", cf_config_key_where(c, train_short ? "data.train" : "data.valid", w, sizeof w),
                   train_short ? c->data.train : c->data.valid, train_short ? d->n_train : d->n_valid, need);
  size_t n = d->train_file.n;
  double f = fitting_fraction(n, need);
  char fix[128];
  if (f > 0) snprintf(fix, sizeof fix, "%s data.valid_fraction to %g", f > c->data.valid_fraction ? "raise" : "lower", f);
  else snprintf(fix, sizeof fix, "use a larger file, lower data.seq_len, or name a data.valid file");
  if (train_short)
    return CF_FAIL(CF_ERR_DATA, "%s: the training split of '%s' (its %zu bytes less the last data.valid_fraction = %g "
                   "held out for validation) has %zu bytes, fewer than data.seq_len + 1 = %zu: %s",
                   cf_config_key_where(c, "data.train", w, sizeof w), c->data.train, n, c->data.valid_fraction,
                   d->n_train, need, fix);
  return CF_FAIL(CF_ERR_DATA, "%s: the validation split (the last data.valid_fraction = %g of '%s') has %zu bytes, "
                 "fewer than data.seq_len + 1 = %zu: %s", cf_config_key_where(c, "data.valid_fraction", w, sizeof w),
                 c->data.valid_fraction, c->data.train, d->n_valid, need, fix);
}

cf_status cf_data_open(cf_data *d, const cf_config *c) {
  memset(d, 0, sizeof *d);
  size_t need = (size_t)c->data.seq_len + 1;
  CF_TRY(text_open(&d->train_file, c, c->data.train, "data.train"));
  if (c->data.valid[0]) {
    cf_status st = text_open(&d->valid_file, c, c->data.valid, "data.valid");
    if (st != CF_OK) { cf_data_close(d); return st; }
    d->train = d->train_file.bytes;
    d->n_train = d->train_file.n;
    d->valid = d->valid_file.bytes;
    d->n_valid = d->valid_file.n;
  } else {
    size_t nv = (size_t)((double)d->train_file.n * c->data.valid_fraction);
    d->train = d->train_file.bytes;
    d->n_train = d->train_file.n - nv;
    d->valid = d->train_file.bytes + d->n_train;
    d->n_valid = nv;
  }
  if (d->n_train < need || d->n_valid < need) {
    cf_status st = split_too_short(d, c, need);
    cf_data_close(d);
    return st;
  }
  d->unigram_entropy = entropy(d->train, d->n_train);
  return CF_OK;
}

cf_status cf_data_check(const cf_config *c) {
  if (c->model.arch == CF_ARCH_ENCODER_DECODER) return cf_translation_check(c);
  cf_data d;
  CF_TRY(cf_data_open(&d, c));
  cf_data_close(&d);
  return CF_OK;
}

void cf_data_close(cf_data *d) {
  text_close(&d->train_file);
  text_close(&d->valid_file);
  memset(d, 0, sizeof *d);
}

void cf_data_batch(const cf_data *d, int split, uint64_t seed, uint64_t index, int B, int T, int *inputs, int *targets) {
  cf_data_batch_rows(d, split, seed, index, 0, B, T, inputs, targets);
}

void cf_data_batch_rows(const cf_data *d, int split, uint64_t seed, uint64_t index, int first, int B, int T,
                        int *inputs, int *targets) {
  const uint8_t *bytes = split == CF_SPLIT_VALID ? d->valid : d->train;
  size_t n = split == CF_SPLIT_VALID ? d->n_valid : d->n_train;
  uint64_t windows = n - (size_t)T;  /* start offsets 0 .. n-T-1 */
  for (int b = 0; b < B; b++) {
    /* key: (seed low, seed high ^ split), counter: (index low, index high, row, 0xda7a) */
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)(first + b), 0xda7au};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (uint32_t)split * 0x9e3779b9u};
    uint32_t w[4];
    cf_philox4x32_10(ctr, key, w);
    uint64_t r = ((uint64_t)w[0] << 32) | w[1];
    size_t off = (size_t)(r % windows);
    for (int t = 0; t < T; t++) {
      inputs[(size_t)b * T + t] = bytes[off + t];
      targets[(size_t)b * T + t] = bytes[off + t + 1];
    }
  }
}

void cf_data_valid_batch(const cf_data *d, int batches, int index, int B, int T, int *inputs, int *targets) {
  uint64_t windows = (uint64_t)batches * (uint64_t)B, span = d->n_valid - (size_t)T;  /* starts 0 .. n-T-1 */
  for (int b = 0; b < B; b++) {
    uint64_t j = (uint64_t)index * (uint64_t)B + (uint64_t)b;
    /* floor(j span / windows) < span, as j < windows; in doubles where j span would overflow 64 bits */
    size_t off = span <= UINT64_MAX / windows ? (size_t)(j * span / windows)
                                              : (size_t)fmin((double)j * (double)span / (double)windows, (double)(span - 1));
    for (int t = 0; t < T; t++) {
      inputs[(size_t)b * T + t] = d->valid[off + t];
      targets[(size_t)b * T + t] = d->valid[off + t + 1];
    }
  }
}

size_t cf_tokenize(const char *text, int *tokens, size_t max_tokens) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p && n < max_tokens; p++) tokens[n++] = *p;
  return n;
}
