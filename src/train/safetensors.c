/* safetensors reader and writer. The header is JSON, parsed and written by Jansson; what is checked
 * here is the format on top of it: F32 tensors with shapes that match their data_offsets, string
 * metadata, and a data section that the tensors cover exactly once (no overlaps, no holes: the
 * format forbids them so that a file cannot hide a second meaning). Nothing is allocated from a
 * length the file states before it is checked: the header against the file's size and
 * CF_ST_MAX_HEADER, shapes against the data (products checked for overflow), the metadata
 * against CF_ST_MAX_META entries of CF_ST_MAX_META_LEN bytes; tensors are stored as they pass. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/train.h"
#include "runtime/runtime.h"

/* ---------- writing ---------- */

static size_t tensor_numel(const cf_st_tensor *t) {
  size_t numel = 1;
  for (int d = 0; d < t->ndim && d < CF_ST_MAX_DIMS; d++) numel *= (size_t)t->shape[d];
  return numel;
}

/* {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}; NULL when out of memory. */
static json_t *tensor_json(const cf_st_tensor *t, size_t begin, size_t end) {
  json_t *shape = json_array();
  for (int d = 0; shape && d < t->ndim && d < CF_ST_MAX_DIMS; d++)
    if (json_array_append_new(shape, json_integer(t->shape[d]))) {
      json_decref(shape);
      shape = NULL;
    }
  if (!shape) return NULL;
  return json_pack("{s:s, s:o, s:[I,I]}", "dtype", "F32", "shape", shape, "data_offsets", (json_int_t)begin,
                   (json_int_t)end);
}

/* The header object, keys in the order written: __metadata__ (when there is any), then the tensors
 * in the order given, whose data follow one another from offset 0. */
static cf_status header_json(const cf_st_tensor *t, int n, const char *const (*meta)[2], int n_meta, json_t **out,
                             size_t *data_len) {
  json_t *h = json_object(), *m = json_object();
  *out = NULL;
  *data_len = 0;
  cf_status st = h && m ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (n_meta > CF_ST_MAX_META)
    st = CF_FAIL(CF_ERR_INVALID_ARG, "%d metadata entries, more than the %d a safetensors file may hold", n_meta,
                 CF_ST_MAX_META);
  for (int i = 0; st == CF_OK && i < n_meta; i++) {
    if (strlen(meta[i][1]) >= CF_ST_MAX_META_LEN || strlen(meta[i][0]) >= CF_ST_MAX_META_LEN)
      st = CF_FAIL(CF_ERR_INVALID_ARG, "checkpoint metadata '%.60s' is too long", meta[i][0]);
    else if (json_object_set_new(m, meta[i][0], json_string(meta[i][1])))
      st = CF_FAIL(CF_ERR_INVALID_ARG, "checkpoint metadata '%s' is not UTF-8 text (or out of memory)", meta[i][0]);
  }
  if (st == CF_OK && n_meta) st = cf_json_set(h, "__metadata__", json_incref(m));
  for (int i = 0; st == CF_OK && i < n; i++) {
    size_t bytes = 4 * tensor_numel(&t[i]);
    if (t[i].ndim < 0 || t[i].ndim > CF_ST_MAX_DIMS)
      st = CF_FAIL(CF_ERR_INVALID_ARG, "tensor '%s' has %d dimensions; 0 to %d are supported", t[i].name, t[i].ndim,
                   CF_ST_MAX_DIMS);
    else if (!strcmp(t[i].name, "__metadata__") || json_object_get(h, t[i].name))
      st = CF_FAIL(CF_ERR_INVALID_ARG, "tensor name '%s' is used twice (or is __metadata__)", t[i].name);
    else st = cf_json_set(h, t[i].name, tensor_json(&t[i], *data_len, *data_len + bytes));
    *data_len += bytes;
  }
  json_decref(m);
  if (st == CF_OK) *out = h;
  else json_decref(h);
  return st;
}

cf_status cf_safetensors_write(const char *path, const cf_st_tensor *t, int n, const char *const (*meta)[2], int n_meta) {
  json_t *h;
  size_t data_len;
  CF_TRY(header_json(t, n, meta, n_meta, &h, &data_len));
  /* compact, keys in insertion order: the bytes clformer's checkpoints have always had */
  char *hdr = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(h);
  if (!hdr) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  size_t json_len = strlen(hdr), hlen = (8 + json_len + 7) / 8 * 8 - 8;  /* space-padded: data start 8-byte aligned */
  size_t total = 8 + hlen + data_len;
  unsigned char *file = malloc(total);
  if (!file) { free(hdr); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for a %zu-byte checkpoint", total); }
  for (int b = 0; b < 8; b++) file[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
  memcpy(file + 8, hdr, json_len);
  memset(file + 8 + json_len, ' ', hlen - json_len);
  free(hdr);
  size_t off = 8 + hlen;
  for (int i = 0; i < n; i++) {
    size_t bytes = 4 * tensor_numel(&t[i]);
    memcpy(file + off, t[i].data, bytes);  /* little-endian hosts only (x86, ARM) */
    off += bytes;
  }
  cf_status st = cf_write_file_atomic(path, file, total);
  free(file);
  return st;
}

/* ---------- reading ---------- */

/* An array of at most cap non-negative integers (`unit` names them in the message); 0 with the
 * reason in why. */
static int read_ints(json_t *a, const char *what, const char *unit, int64_t *out, int cap, int *n, char *why,
                     size_t wn) {
  size_t i;
  json_t *v;
  if (!json_is_array(a)) { snprintf(why, wn, "%s is not an array", what); return 0; }
  if (json_array_size(a) > (size_t)cap) {
    snprintf(why, wn, "%s has %zu %s, more than the %d supported", what, json_array_size(a), unit, cap);
    return 0;
  }
  json_array_foreach(a, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      snprintf(why, wn, "%s holds something other than a non-negative integer", what);
      return 0;
    }
    out[i] = json_integer_value(v);
  }
  *n = (int)json_array_size(a);
  return 1;
}

/* One tensor entry: its dtype, shape and [begin, end) in the data section. */
static int read_tensor(json_t *t, cf_st_entry *e, size_t data_len, size_t *begin, char *why, size_t wn) {
  const char *key;
  json_t *v;
  int64_t offs[2];
  int noffs = 0;
  e->ndim = -1;
  if (!json_is_object(t)) { snprintf(why, wn, "entry is not an object"); return 0; }
  json_object_foreach(t, key, v) if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) {
    snprintf(why, wn, "unexpected field '%.40s' in a tensor entry", key);
    return 0;
  }
  const char *dtype = json_string_value(json_object_get(t, "dtype"));
  if (!dtype || strcmp(dtype, "F32")) { snprintf(why, wn, "only F32 tensors are supported"); return 0; }
  json_t *shape = json_object_get(t, "shape"), *offsets = json_object_get(t, "data_offsets");
  if (!shape || !offsets) { snprintf(why, wn, "tensor entry lacks shape or data_offsets"); return 0; }
  if (!read_ints(shape, "shape", "dimensions", e->shape, CF_ST_MAX_DIMS, &e->ndim, why, wn) ||
      !read_ints(offsets, "data_offsets", "entries", offs, 2, &noffs, why, wn))
    return 0;
  if (noffs != 2) { snprintf(why, wn, "data_offsets is not a [begin, end] pair"); return 0; }
  e->numel = 1;
  for (int d = 0; d < e->ndim; d++)
    if (__builtin_mul_overflow(e->numel, (size_t)e->shape[d], &e->numel) || e->numel > SIZE_MAX / 4) {
      snprintf(why, wn, "shape too large");
      return 0;
    }
  if (offs[1] < offs[0]) {
    snprintf(why, wn, "data_offsets [%lld, %lld] out of order", (long long)offs[0], (long long)offs[1]);
    return 0;
  }
  if ((uint64_t)offs[1] > data_len) { snprintf(why, wn, "tensor data past the end of the file (truncated?)"); return 0; }
  if ((size_t)(offs[1] - offs[0]) != 4 * e->numel) { snprintf(why, wn, "shape does not match data_offsets"); return 0; }
  *begin = (size_t)offs[0];
  return 1;
}

/* __metadata__: an object of at most CF_ST_MAX_META strings, each key and value shorter than
 * CF_ST_MAX_META_LEN, all checked before one allocation holds them. */
static int read_meta(json_t *m, cf_st_file *f, char *why, size_t wn) {
  const char *key;
  json_t *v;
  if (!json_is_object(m)) { snprintf(why, wn, "__metadata__ is not an object"); return 0; }
  size_t n = json_object_size(m), bytes = 0;
  if (n > CF_ST_MAX_META) {
    snprintf(why, wn, "__metadata__ holds %zu metadata entries, more than the %d allowed", n, CF_ST_MAX_META);
    return 0;
  }
  json_object_foreach(m, key, v) {
    const char *s = json_string_value(v);
    if (!s) { snprintf(why, wn, "bad metadata: '%.40s' is not a string", key); return 0; }
    if (strlen(key) >= CF_ST_MAX_META_LEN || strlen(s) >= CF_ST_MAX_META_LEN) {
      snprintf(why, wn, "bad metadata: '%.40s' is too long (keys and values have fewer than %d bytes)", key,
               CF_ST_MAX_META_LEN);
      return 0;
    }
    bytes += strlen(key) + strlen(s) + 2;
  }
  f->meta = malloc((n + 1) * sizeof *f->meta + bytes);
  if (!f->meta) { snprintf(why, wn, "out of memory"); return 0; }
  char *text = (char *)(f->meta + n + 1);
  json_object_foreach(m, key, v) {
    size_t kl = strlen(key) + 1, vl = strlen(json_string_value(v)) + 1;
    f->meta[f->n_meta].key = memcpy(text, key, kl);
    f->meta[f->n_meta].value = memcpy(text + kl, json_string_value(v), vl);
    text += kl + vl;
    f->n_meta++;
  }
  return 1;
}

/* Where a tensor's data lie in the data section, to check that the tensors cover it exactly once. */
typedef struct span {
  size_t begin, end;
  int entry;  /* its index in cf_st_file.entries */
} span;

static int by_begin(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by where they begin, each tensor starts where the previous one ended and the last ends at
 * the end of the file (the order of the header's keys is free, as in any JSON object). */
static int check_coverage(const cf_st_file *f, span *s, size_t data_len, char *why, size_t wn) {
  if (f->n) qsort(s, (size_t)f->n, sizeof *s, by_begin);
  size_t at = 0;
  for (int k = 0; k < f->n; k++) {
    const char *name = f->entries[s[k].entry].name;
    if (s[k].begin < at) {
      snprintf(why, wn, "the data of '%.60s' and '%.60s' overlap", f->entries[s[k - 1].entry].name, name);
      return 0;
    }
    if (s[k].begin > at) {
      snprintf(why, wn, "%zu bytes before the data of '%.60s' belong to no tensor", s[k].begin - at, name);
      return 0;
    }
    at = s[k].end;
  }
  if (at != data_len) { snprintf(why, wn, "%zu bytes after the last tensor belong to no tensor", data_len - at); return 0; }
  return 1;
}

/* Room in f->entries and *s for one more tensor, grown as tensors are read (never sized from the
 * header's key count, which a file could make huge at a few bytes a key); 0 when out of memory. */
static int reserve(cf_st_file *f, span **s, int *cap) {
  if (f->n < *cap) return 1;
  int grown = *cap ? 2 * *cap : 16;
  cf_st_entry *e = realloc(f->entries, (size_t)grown * sizeof *e);
  if (e) f->entries = e;
  span *t = e ? realloc(*s, (size_t)grown * sizeof *t) : NULL;
  if (t) *s = t;
  if (!t) return 0;
  *cap = grown;
  return 1;
}

/* One tensor of the header into f->entries and its span into s[f->n]. 0 with the reason in why. */
static int add_tensor(const char *key, json_t *v, cf_st_file *f, span *s, const char *data, size_t data_len,
                      char *why, size_t wn) {
  cf_st_entry *e = &f->entries[f->n];
  size_t begin;
  char reason[160];
  if (strlen(key) >= sizeof e->name) {
    snprintf(why, wn, "tensor name '%.60s...' is longer than %zu bytes", key, sizeof e->name - 1);
    return 0;
  }
  if (!read_tensor(v, e, data_len, &begin, reason, sizeof reason)) {
    snprintf(why, wn, "tensor '%.60s': %s", key, reason);
    return 0;
  }
  strcpy(e->name, key);
  e->data = (const float *)(const void *)(data + begin);
  s[f->n] = (span){begin, begin + 4 * e->numel, f->n};
  f->n++;
  return 1;
}

/* Every key of the header: __metadata__, or a tensor. 0 with the reason in why. */
static int read_header(json_t *h, cf_st_file *f, const char *data, size_t data_len, char *why, size_t wn) {
  if (!json_is_object(h)) { snprintf(why, wn, "the header is not a JSON object"); return 0; }
  span *s = NULL;
  int ok = 1, cap = 0;
  const char *key;
  json_t *v;
  json_object_foreach(h, key, v) {
    if (!strcmp(key, "__metadata__")) ok = read_meta(v, f, why, wn);
    else if (!reserve(f, &s, &cap)) { snprintf(why, wn, "out of memory"); ok = 0; }
    else ok = add_tensor(key, v, f, s, data, data_len, why, wn);
    if (!ok) break;
  }
  ok = ok && check_coverage(f, s, data_len, why, wn);
  free(s);
  return ok;
}

cf_status cf_safetensors_read(const char *path, cf_st_file *f) {
  memset(f, 0, sizeof *f);
  CF_TRY(cf_read_file(path, &f->buf, &f->len));
  cf_status st = CF_OK;
  if (f->len < 8) { st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: truncated (%zu bytes)", path, f->len); goto fail; }
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; b--) hlen = (hlen << 8) | (unsigned char)f->buf[b];
  if (hlen > f->len - 8 || hlen < 2) {
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: not a safetensors file, or truncated (header of %llu bytes in a %zu-byte file)",
                 path, (unsigned long long)hlen, f->len);
    goto fail;
  }
  if (hlen > CF_ST_MAX_HEADER) {
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: a header of %llu bytes, more than the %d a checkpoint may have", path,
                 (unsigned long long)hlen, CF_ST_MAX_HEADER);
    goto fail;
  }
  json_error_t jerr;
  json_t *h = json_loadb(f->buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!h) {
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: corrupt header: %s (at byte %d)", path, jerr.text, 8 + jerr.position);
    goto fail;
  }
  char why[256];
  int ok = read_header(h, f, f->buf + 8 + hlen, f->len - 8 - (size_t)hlen, why, sizeof why);
  json_decref(h);
  if (!ok) { st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: corrupt header: %s", path, why); goto fail; }
  return CF_OK;
fail:
  cf_safetensors_free(f);
  return st;
}

void cf_safetensors_free(cf_st_file *f) {
  free(f->buf);
  free(f->entries);
  free(f->meta);
  memset(f, 0, sizeof *f);
}

const cf_st_entry *cf_safetensors_find(const cf_st_file *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->entries[i].name, name)) return &f->entries[i];
  return NULL;
}

const char *cf_safetensors_meta(const cf_st_file *f, const char *key) {
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
  return NULL;
}
