/* safetensors: round trip of tensors and metadata; every kind of damage is refused clearly. */
#define _GNU_SOURCE /* memmem */
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "clformer/train.h"
#include "testutil.h"

static void write_bytes(const char *path, const char *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

/* A safetensors file by hand: the 8-byte length, header as given, then data_len bytes of zeros. */
static void write_st(const char *path, const char *header, size_t data_len) {
  size_t hlen = strlen(header);
  char *buf = calloc(8 + hlen + data_len, 1);
  for (int i = 0; i < 8; i++) buf[i] = (char)((unsigned long long)hlen >> (8 * i));
  memcpy(buf + 8, header, hlen);
  write_bytes(path, buf, 8 + hlen + data_len);
  free(buf);
}

/* The file must be refused as a checkpoint error whose message names why. */
static void refused(const char *path, const char *header, size_t data_len, const char *why, const char *what) {
  cf_st_file f;
  write_st(path, header, data_len);
  cf_status st = cf_safetensors_read(path, &f);
  TEST_ASSERT(st == CF_ERR_CHECKPOINT && strstr(cf_last_error(), why), "%s: got %s: %s", what, cf_status_str(st),
              cf_last_error());
  if (st == CF_OK) cf_safetensors_free(&f);
}

/* Headers made by hand: duplicate keys, overlapping, reversed or missing data ranges are refused;
 * keys in another order than their data are fine (a JSON object has no order). */
static void check_headers(const char *path) {
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate", "duplicate tensor");
  refused(path, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate", "duplicate metadata key");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap", "overlapping tensors");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, "out of order", "reversed offsets");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "belong to no tensor",
          "a hole before the data");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "belong to no tensor",
          "bytes after the data");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative", "negative shape");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unexpected field",
          "unknown field");
  write_st(path, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12);
  cf_st_file f;
  cf_status st = cf_safetensors_read(path, &f);
  TEST_ASSERT(st == CF_OK && f.n == 2, "keys out of data order: %s", cf_last_error());
  if (st == CF_OK) {
    const cf_st_entry *a = cf_safetensors_find(&f, "a"), *b = cf_safetensors_find(&f, "b");
    TEST_ASSERT(a && b && (const char *)(const void *)b->data - (const char *)(const void *)a->data == 8, "offsets");
    cf_safetensors_free(&f);
  }
}

/* The limits hold both ways: the writer refuses what the reader would, the reader refuses more (and
 * allocates nothing for it first). */
static void check_limits(const char *path) {
  float x[1] = {1};
  cf_st_tensor five = {"t", x, 5, {1, 1, 1, 1}};
  TEST_ASSERT(cf_safetensors_write(path, &five, 1, NULL, 0) == CF_ERR_INVALID_ARG, "writer: 5 dimensions");
  static char long_value[CF_ST_MAX_META_LEN + 1];  /* a value of CF_ST_MAX_META_LEN bytes: one too many */
  memset(long_value, 'v', CF_ST_MAX_META_LEN);
  const char *meta[CF_ST_MAX_META + 2][2];
  char keys[CF_ST_MAX_META + 2][16];  /* "k" and any int: no truncation warning at any -O level */
  for (int i = 0; i < CF_ST_MAX_META + 2; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    meta[i][0] = keys[i];
    meta[i][1] = i ? "x" : long_value;
  }
  TEST_ASSERT(cf_safetensors_write(path, NULL, 0, meta + 1, CF_ST_MAX_META + 1) == CF_ERR_INVALID_ARG, "writer: 65 entries");
  TEST_ASSERT(cf_safetensors_write(path, NULL, 0, meta, 1) == CF_ERR_INVALID_ARG, "writer: a value too long");
  long_value[CF_ST_MAX_META_LEN - 1] = 0;  /* the longest value allowed, and as many entries as allowed */
  cf_st_file f;
  cf_status st = cf_safetensors_write(path, NULL, 0, meta, CF_ST_MAX_META);
  if (st == CF_OK) st = cf_safetensors_read(path, &f);
  TEST_ASSERT(st == CF_OK, "the limits themselves: %s", cf_last_error());
  if (st == CF_OK) {
    const char *v = cf_safetensors_meta(&f, "k0"), *last = cf_safetensors_meta(&f, "k63");
    TEST_ASSERT(f.n_meta == CF_ST_MAX_META && v && strlen(v) == CF_ST_MAX_META_LEN - 1 && last && !strcmp(last, "x") &&
                !cf_safetensors_meta(&f, "k64"), "the limits themselves are written and read back");
    cf_safetensors_free(&f);
  }

  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
          "'a': shape has 5 dimensions", "reader: 5 dimensions");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
          "shape too large", "reader: a shape whose product overflows");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
          "shape too large", "reader: a shape of more than SIZE_MAX bytes");
  refused(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", 8, "past the end",
          "reader: data past the end");
  char header[64 + 70 * 12];
  int at = snprintf(header, sizeof header, "{\"__metadata__\":{");
  for (int i = 0; i < CF_ST_MAX_META + 1; i++)
    at += snprintf(header + at, sizeof header - (size_t)at, "%s\"k%d\":\"x\"", i ? "," : "", i);
  snprintf(header + at, sizeof header - (size_t)at, "}}");
  refused(path, header, 0, "65 metadata entries, more than the 64 allowed", "reader: 65 entries");
}

/* 100,000 metadata entries (2.5 MB) once took 32 KiB each (3.2 GB, 880 MB of it touched); they are
 * refused with a few MB more than the parse itself needs. A header larger than CF_ST_MAX_HEADER is
 * refused before it is parsed. */
static void check_huge(const char *path) {
  size_t n = 100000, cap = 32 * n;
  char *h = malloc(cap);
  size_t at = (size_t)snprintf(h, cap, "{\"__metadata__\":{");
  for (size_t i = 0; i < n; i++) at += (size_t)snprintf(h + at, cap - at, "%s\"pad%06zu\":\"x\"", i ? "," : "", i);
  snprintf(h + at, cap - at, "}}");
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  refused(path, h, 0, "100000 metadata entries, more than the 64 allowed", "100,000 metadata entries");
  getrusage(RUSAGE_SELF, &after);
  TEST_ASSERT(after.ru_maxrss - before.ru_maxrss < 64 * 1024, "100,000 metadata entries: peak memory grew by %ld MiB",
              (after.ru_maxrss - before.ru_maxrss) / 1024);
  free(h);
  size_t big = (size_t)CF_ST_MAX_HEADER + 8;
  h = malloc(big + 1);
  memset(h, ' ', big);
  memcpy(h, "{}", 2);
  h[big] = 0;
  refused(path, h, 0, "more than the 16777216 a checkpoint may have", "a header over the limit");
  free(h);
}

/* The header's bytes: compact JSON, keys in the order written, padded with spaces to 8 bytes. */
static void check_layout(const char *path) {
  float x[2] = {1, 2};
  cf_st_tensor t[] = {{"w", x, 1, {2}}, {"q\"\\\n", x, 2, {1, 1}}};
  const char *meta[][2] = {{"format", "f"}, {"config", "a: 1\n"}};
  TEST_OK(cf_safetensors_write(path, t, 2, meta, 2));
  char buf[512];
  FILE *fp = fopen(path, "rb");
  size_t len = fp ? fread(buf, 1, sizeof buf, fp) : 0;
  if (fp) fclose(fp);
  const char *want = "{\"__metadata__\":{\"format\":\"f\",\"config\":\"a: 1\\n\"},"
                     "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"q\\\"\\\\\\n\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}";
  size_t wl = strlen(want), hl = (wl + 8 + 7) / 8 * 8 - 8;
  TEST_ASSERT(len == 8 + hl + 12 && (unsigned char)buf[0] == hl && !memcmp(buf + 8, want, wl), "header bytes: %.*s",
              (int)(len > 8 ? len - 8 : 0), buf + 8);
  for (size_t i = wl; i < hl && i + 8 < len; i++) TEST_ASSERT(buf[8 + i] == ' ', "padding at %zu", i);
}

int main(void) {
  char path[] = "/tmp/clformer-st-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  float a[6] = {1, -2, 3.5f, 4, 5, 6e-9f}, b[1] = {42};
  float *big = malloc(1000 * sizeof *big);
  for (int i = 0; i < 1000; i++) big[i] = (float)i * 0.5f;
  cf_st_tensor t[] = {{"layers.0.w", a, 2, {2, 3}}, {"scalar\"quoted", b, 1, {1}}, {"big", big, 1, {1000}}};
  const char *meta[][2] = {{"format", "clformer-1"}, {"config", "model:\n  norm: \"pre\"\n"}};
  TEST_OK(cf_safetensors_write(path, t, 3, meta, 2));

  cf_st_file f;
  TEST_OK(cf_safetensors_read(path, &f));
  TEST_ASSERT(f.n == 3, "3 tensors, got %d", f.n);
  const cf_st_entry *e = cf_safetensors_find(&f, "layers.0.w");
  TEST_ASSERT(e && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3 && e->numel == 6, "shape of layers.0.w");
  if (e) { float x[6]; memcpy(x, e->data, sizeof x); TEST_ASSERT(!memcmp(x, a, sizeof a), "data of layers.0.w"); }
  e = cf_safetensors_find(&f, "scalar\"quoted");
  TEST_ASSERT(e && e->numel == 1 && !memcmp(e->data, b, 4), "escaped name");
  e = cf_safetensors_find(&f, "big");
  TEST_ASSERT(e && e->numel == 1000 && !memcmp(e->data, big, 4000), "big");
  TEST_ASSERT(cf_safetensors_find(&f, "nope") == NULL, "absent tensor");
  const char *cfg = cf_safetensors_meta(&f, "config");
  TEST_ASSERT(cfg && !strcmp(cfg, meta[1][1]), "metadata round trip: %s", cfg ? cfg : "(null)");
  TEST_ASSERT(!strcmp(cf_safetensors_meta(&f, "format"), "clformer-1"), "format");
  /* the data section starts 8-byte aligned, as the format recommends */
  uint64_t hlen;
  memcpy(&hlen, f.buf, 8);
  TEST_ASSERT((8 + hlen) % 8 == 0, "alignment");
  size_t len = f.len;
  char *good = malloc(len);
  memcpy(good, f.buf, len);
  cf_safetensors_free(&f);

  /* damage: each must fail with CF_ERR_CHECKPOINT (or CF_ERR_IO for a missing file), never crash */
  cf_set_verbosity(-1);
  char *bad = malloc(len + 16);
  struct { const char *what; size_t n; void (*edit)(char *, size_t); } cases[] = {
      {"truncated data", len - 10, NULL},
      {"truncated header", 20, NULL},
      {"shorter than 8 bytes", 5, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_bytes(path, good, cases[i].n);
    cf_status st = cf_safetensors_read(path, &f);
    TEST_ASSERT(st == CF_ERR_CHECKPOINT, "%s: got %s", cases[i].what, cf_status_str(st));
  }
  memcpy(bad, good, len);
  bad[0] = (char)0xff; bad[5] = 0x7f;  /* absurd header length */
  write_bytes(path, bad, len);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_CHECKPOINT, "absurd header length");
  memcpy(bad, good, len);
  char *dt = memmem(bad, len, "F32", 3);
  memcpy(dt, "F16", 3);
  write_bytes(path, bad, len);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_CHECKPOINT && strstr(cf_last_error(), "F32"), "wrong dtype: %s", cf_last_error());
  memcpy(bad, good, len);
  char *sh = memmem(bad, len, "[2,3]", 5);
  memcpy(sh, "[2,4]", 5);
  write_bytes(path, bad, len);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_CHECKPOINT && strstr(cf_last_error(), "shape"), "shape mismatch: %s", cf_last_error());
  memcpy(bad, good, len);
  char *br = memchr(bad + 8, '{', len - 8);
  *br = '[';
  write_bytes(path, bad, len);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_CHECKPOINT, "bad JSON");
  write_bytes(path, "", 0);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_CHECKPOINT, "empty file");
  check_headers(path);
  check_limits(path);
  check_huge(path);
  cf_set_verbosity(1);
  check_layout(path);
  cf_set_verbosity(-1);
  unlink(path);
  TEST_ASSERT(cf_safetensors_read(path, &f) == CF_ERR_IO, "missing file");
  cf_set_verbosity(1);
  free(bad); free(good); free(big);
  return test_finish("test_safetensors");
}
