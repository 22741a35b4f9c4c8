/* safetensors reader and writer. The reader holds a small JSON parser for the header: objects,
 * strings, integer arrays; enough for the format, strict about everything else. */
#include <ctype.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/train.h"
#include "runtime/runtime.h"

/* ---------- writing ---------- */

static void json_escape(char **p, const char *s) {
  *(*p)++ = '"';
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { *(*p)++ = '\\'; *(*p)++ = (char)c; }
    else if (c == '\n') { *(*p)++ = '\\'; *(*p)++ = 'n'; }
    else if (c < 0x20) *p += sprintf(*p, "\\u%04x", c);
    else *(*p)++ = (char)c;
  }
  *(*p)++ = '"';
}

cf_status cf_safetensors_write(const char *path, const cf_st_tensor *t, int n, const char *const (*meta)[2], int n_meta) {
  size_t cap = 256, data_len = 0;
  for (int i = 0; i < n_meta; i++)
    if (strlen(meta[i][1]) >= 16000 || strlen(meta[i][0]) >= 16000)
      return CF_FAIL(CF_ERR_INVALID_ARG, "checkpoint metadata '%s' is too long", meta[i][0]);
  for (int i = 0; i < n; i++) cap += 2 * strlen(t[i].name) + 160;
  for (int i = 0; i < n_meta; i++) cap += 6 * (strlen(meta[i][0]) + strlen(meta[i][1])) + 16;
  char *hdr = malloc(cap), *p = hdr;
  if (!hdr) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  *p++ = '{';
  if (n_meta) {
    p += sprintf(p, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
      if (i) *p++ = ',';
      json_escape(&p, meta[i][0]);
      *p++ = ':';
      json_escape(&p, meta[i][1]);
    }
    *p++ = '}';
  }
  for (int i = 0; i < n; i++) {
    size_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
    if (n_meta || i) *p++ = ',';
    json_escape(&p, t[i].name);
    p += sprintf(p, ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t[i].ndim; d++) p += sprintf(p, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    p += sprintf(p, "],\"data_offsets\":[%zu,%zu]}", data_len, data_len + 4 * numel);
    data_len += 4 * numel;
  }
  *p++ = '}';
  size_t hlen = (size_t)(p - hdr);
  while ((8 + hlen) % 8) { *p++ = ' '; hlen++; }  /* pad so the data starts 8-byte aligned */
  size_t total = 8 + hlen + data_len;
  unsigned char *file = malloc(total);
  if (!file) { free(hdr); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for a %zu-byte checkpoint", total); }
  for (int b = 0; b < 8; b++) file[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
  memcpy(file + 8, hdr, hlen);
  free(hdr);
  size_t off = 8 + hlen;
  for (int i = 0; i < n; i++) {
    size_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= (size_t)t[i].shape[d];
    memcpy(file + off, t[i].data, 4 * numel);  /* little-endian hosts only (x86, ARM) */
    off += 4 * numel;
  }
  cf_status st = cf_write_file_atomic(path, file, total);
  free(file);
  return st;
}

/* ---------- reading ---------- */

typedef struct parser {
  const char *p, *end;
  const char *err;
} parser;

static void ws(parser *ps) { while (ps->p < ps->end && isspace((unsigned char)*ps->p)) ps->p++; }
static int eat(parser *ps, char c) {
  ws(ps);
  if (ps->p < ps->end && *ps->p == c) { ps->p++; return 1; }
  return 0;
}

static int parse_string(parser *ps, char *out, size_t cap) {
  ws(ps);
  if (ps->p >= ps->end || *ps->p != '"') { ps->err = "expected a string"; return 0; }
  ps->p++;
  size_t n = 0;
  while (ps->p < ps->end && *ps->p != '"') {
    char c = *ps->p++;
    if (c == '\\') {
      if (ps->p >= ps->end) break;
      c = *ps->p++;
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
      else if (c == 'u') {
        unsigned v = 0;
        for (int i = 0; i < 4 && ps->p < ps->end; i++) v = v * 16 + (unsigned)(isdigit((unsigned char)*ps->p) ? *ps->p - '0' : (tolower((unsigned char)*ps->p) - 'a' + 10)), ps->p++;
        c = v < 0x80 ? (char)v : '?';
      }
    }
    if (n + 1 >= cap) { ps->err = "string too long"; return 0; }
    out[n++] = c;
  }
  if (ps->p >= ps->end) { ps->err = "unterminated string"; return 0; }
  ps->p++;
  out[n] = 0;
  return 1;
}

static int parse_ints(parser *ps, int64_t *out, int cap, int *n) {
  *n = 0;
  if (!eat(ps, '[')) { ps->err = "expected '['"; return 0; }
  if (eat(ps, ']')) return 1;
  do {
    ws(ps);
    /* digits only, and never past the header's end */
    long long v = 0;
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
      if (v > (LLONG_MAX - 9) / 10) { ps->err = "integer too large"; return 0; }
      v = v * 10 + (*ps->p++ - '0');
    }
    if (ps->p == start) { ps->err = "expected a non-negative integer"; return 0; }
    if (*n >= cap) { ps->err = "too many dimensions"; return 0; }
    out[(*n)++] = v;
  } while (eat(ps, ','));
  if (!eat(ps, ']')) { ps->err = "expected ']'"; return 0; }
  return 1;
}

static int parse_tensor(parser *ps, cf_st_entry *e, size_t data_len, size_t *begin) {
  char key[64], dtype[16] = "";
  int64_t offs[2];
  int noffs = -1;
  e->ndim = -1;
  if (!eat(ps, '{')) { ps->err = "expected '{'"; return 0; }
  do {
    if (!parse_string(ps, key, sizeof key) || !eat(ps, ':')) { if (!ps->err) ps->err = "expected ':'"; return 0; }
    if (!strcmp(key, "dtype")) { if (!parse_string(ps, dtype, sizeof dtype)) return 0; }
    else if (!strcmp(key, "shape")) { if (!parse_ints(ps, e->shape, 4, &e->ndim)) return 0; }
    else if (!strcmp(key, "data_offsets")) { if (!parse_ints(ps, offs, 2, &noffs)) return 0; }
    else { ps->err = "unexpected field in a tensor entry"; return 0; }
  } while (eat(ps, ','));
  if (!eat(ps, '}')) { ps->err = "expected '}'"; return 0; }
  if (strcmp(dtype, "F32")) { ps->err = "only F32 tensors are supported"; return 0; }
  if (e->ndim < 0 || noffs != 2) { ps->err = "tensor entry lacks shape or data_offsets"; return 0; }
  e->numel = 1;
  for (int d = 0; d < e->ndim; d++)
    if (__builtin_mul_overflow(e->numel, (size_t)e->shape[d], &e->numel) || e->numel > SIZE_MAX / 4) {
      ps->err = "shape too large";
      return 0;
    }
  if (offs[1] < offs[0] || (size_t)offs[1] > data_len) { ps->err = "tensor data past the end of the file (truncated?)"; return 0; }
  if ((size_t)(offs[1] - offs[0]) != 4 * e->numel) { ps->err = "shape does not match data_offsets"; return 0; }
  *begin = (size_t)offs[0];
  return 1;
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
  const char *data = f->buf + 8 + hlen;
  size_t data_len = f->len - 8 - (size_t)hlen;
  parser ps = {f->buf + 8, f->buf + 8 + hlen, NULL};
  int cap = 64;
  f->entries = malloc((size_t)cap * sizeof *f->entries);
  if (!f->entries) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto fail; }
  size_t total = 0;
  if (!eat(&ps, '{')) ps.err = "expected '{'";
  else if (!eat(&ps, '}')) do {
    char name[160];
    if (!parse_string(&ps, name, sizeof name) || !eat(&ps, ':')) { if (!ps.err) ps.err = "expected ':'"; break; }
    if (!strcmp(name, "__metadata__")) {
      if (!eat(&ps, '{')) { ps.err = "expected '{' after __metadata__"; break; }
      if (eat(&ps, '}')) continue;
      do {
        char (*g)[2][16384] = realloc(f->meta, (size_t)(f->n_meta + 1) * sizeof *f->meta);
        if (!g) { ps.err = "out of memory"; break; }
        f->meta = g;
        if (!parse_string(&ps, f->meta[f->n_meta][0], sizeof f->meta[0][0]) || !eat(&ps, ':') ||
            !parse_string(&ps, f->meta[f->n_meta][1], sizeof f->meta[0][1])) { if (!ps.err) ps.err = "bad metadata"; break; }
        f->n_meta++;
      } while (eat(&ps, ','));
      if (ps.err) break;
      if (!eat(&ps, '}')) { ps.err = "expected '}' closing __metadata__"; break; }
      continue;
    }
    if (f->n == cap) {
      cap *= 2;
      cf_st_entry *g = realloc(f->entries, (size_t)cap * sizeof *g);
      if (!g) { ps.err = "out of memory"; break; }
      f->entries = g;
    }
    cf_st_entry *e = &f->entries[f->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    size_t begin;
    if (!parse_tensor(&ps, e, data_len, &begin)) break;
    e->data = (const float *)(const void *)(data + begin);
    total += 4 * e->numel;
    f->n++;
  } while (eat(&ps, ','));
  if (!ps.err && !eat(&ps, '}')) ps.err = "expected '}' at the end of the header";
  if (ps.err) {
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: corrupt header: %s (at byte %ld)", path, ps.err, (long)(ps.p - f->buf));
    goto fail;
  }
  if (total > data_len) { st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: truncated data", path); goto fail; }
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
    if (!strcmp(f->meta[i][0], key)) return f->meta[i][1];
  return NULL;
}
