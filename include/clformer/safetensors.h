/* The safetensors file format (8-byte little-endian header length, JSON header, raw
 * little-endian data), so PyTorch and other tools read our checkpoints. F32 tensors and
 * string metadata only, which is all clformer writes. */
#ifndef CLFORMER_SAFETENSORS_H
#define CLFORMER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "clformer/status.h"

typedef struct cf_st_tensor {
  const char *name;
  const float *data;
  int ndim;
  int64_t shape[4];
} cf_st_tensor;

/* Write atomically (temporary file, fsync, rename): an existing file at path stays intact
 * until the new one is complete. meta is n_meta (key, value) string pairs. */
cf_status cf_safetensors_write(const char *path, const cf_st_tensor *tensors, int n, const char *const (*meta)[2],
                               int n_meta);

typedef struct cf_st_entry {
  char name[160];
  int ndim;
  int64_t shape[4];
  size_t numel;
  const float *data;   /* into the loaded file (may be unaligned: copy with memcpy) */
} cf_st_entry;

typedef struct cf_st_file {
  char *buf;           /* the whole file */
  size_t len;
  cf_st_entry *entries;
  int n;
  char (*meta)[2][16384];  /* (key, value) pairs; values longer are refused by the writer */
  int n_meta;
} cf_st_file;

/* Read and check a file: header length, JSON syntax, dtypes, shapes against offsets, offsets
 * inside the data. Anything wrong is CF_ERR_CHECKPOINT with the reason. */
cf_status cf_safetensors_read(const char *path, cf_st_file *f);
void cf_safetensors_free(cf_st_file *f);
const cf_st_entry *cf_safetensors_find(const cf_st_file *f, const char *name);
const char *cf_safetensors_meta(const cf_st_file *f, const char *key);  /* NULL if absent */

#endif
