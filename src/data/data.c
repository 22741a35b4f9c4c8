/* Byte-level data: mmap'd text, split, unigram entropy, and counter-based batch sampling. */
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

static cf_status text_open(cf_text *t, const char *path, const char *key) {
  memset(t, 0, sizeof *t);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return CF_FAIL(CF_ERR_DATA, "%s: cannot open '%s': %s", key, path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return CF_FAIL(CF_ERR_DATA, "%s: '%s' is not a regular file", key, path);
  }
  if (sb.st_size == 0) {
    close(fd);
    return CF_FAIL(CF_ERR_DATA, "%s: '%s' is empty", key, path);
  }
  void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return CF_FAIL(CF_ERR_DATA, "%s: cannot map '%s': %s", key, path, strerror(errno));
  t->map = map;
  t->map_len = (size_t)sb.st_size;
  t->bytes = map;
  t->n = (size_t)sb.st_size;
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

cf_status cf_data_open(cf_data *d, const cf_config *c) {
  memset(d, 0, sizeof *d);
  size_t need = (size_t)c->data.seq_len + 1;
  CF_TRY(text_open(&d->train_file, c->data.train, "data.train"));
  if (c->data.valid[0]) {
    cf_status st = text_open(&d->valid_file, c->data.valid, "data.valid");
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
    cf_status st = CF_FAIL(CF_ERR_DATA,
                           "data: the %s split has %zu bytes, fewer than data.seq_len + 1 = %zu (file '%s'%s)",
                           d->n_train < need ? "training" : "validation", d->n_train < need ? d->n_train : d->n_valid,
                           need, d->n_train < need || !c->data.valid[0] ? c->data.train : c->data.valid,
                           c->data.valid[0] ? "" : "; raise data.valid_fraction or use a larger file");
    cf_data_close(d);
    return st;
  }
  d->unigram_entropy = entropy(d->train, d->n_train);
  return CF_OK;
}

void cf_data_close(cf_data *d) {
  text_close(&d->train_file);
  text_close(&d->valid_file);
  memset(d, 0, sizeof *d);
}

void cf_data_batch(const cf_data *d, int split, uint64_t seed, uint64_t index, int B, int T, int *inputs, int *targets) {
  const uint8_t *bytes = split == CF_SPLIT_VALID ? d->valid : d->train;
  size_t n = split == CF_SPLIT_VALID ? d->n_valid : d->n_train;
  uint64_t windows = n - (size_t)T;  /* start offsets 0 .. n-T-1 */
  for (int b = 0; b < B; b++) {
    /* key: (seed low, seed high ^ split), counter: (index low, index high, row, 0xda7a) */
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)b, 0xda7au};
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

size_t cf_tokenize(const char *text, int *tokens, size_t max_tokens) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p && n < max_tokens; p++) tokens[n++] = *p;
  return n;
}
