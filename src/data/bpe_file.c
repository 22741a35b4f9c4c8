/* The BPE merges file, both ways (its layout is documented at cf_bpe_save in clformer/data.h):
 * written whole and atomically, read strictly, every refusal naming the file and the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "data/bpe.h"

#define BPE_MAGIC "clformer-bpe"
enum { BPE_VERSION = 1 };
static const size_t bpe_file_max = (size_t)BPE_MAX_MERGES * 24;  /* "LEFT RIGHT\n" at its longest, and more */

/* The file's text up to its end line (malloc'd, *n bytes of *cap, room left for the end line),
 * NULL when out of memory: what the checksum covers. */
static char *file_body(const cf_bpe *b, size_t *n, size_t *cap_out) {
  size_t cap = *cap_out = 64 + (size_t)cf_bpe_merges(b) * 24;
  char *text = malloc(cap);
  if (!text) return NULL;
  *n = (size_t)snprintf(text, cap, "%s %d\nmerges %d\n", BPE_MAGIC, BPE_VERSION, cf_bpe_merges(b));
  for (int k = 0; k < cf_bpe_merges(b); k++) {
    int left, right;
    cf_bpe_merge_pair(b, k, &left, &right);
    *n += (size_t)snprintf(text + *n, cap - *n, "%d %d\n", left, right);
  }
  return text;
}

unsigned long long cf_bpe_checksum(const cf_bpe *b) {
  size_t n, cap;
  char *text = file_body(b, &n, &cap);
  unsigned long long h = text ? cf_hash64(CF_HASH_SEED, text, n) : 0;
  free(text);
  return h;
}

cf_status cf_bpe_save(const cf_bpe *b, const char *path) {
  size_t n, cap;
  char *text = file_body(b, &n, &cap);
  if (!text) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory writing %s", path);
  n += (size_t)snprintf(text + n, cap - n, "end %016llx\n", cf_hash64(CF_HASH_SEED, text, n));
  cf_status st = cf_write_file_atomic(path, text, n);
  free(text);
  return st;
}

/* ---- loading ---- */

typedef struct {
  const char *path, *text;
  size_t len, at;      /* at: where the next line starts */
  int line;            /* the number of the line last read */
  const char *s;       /* that line, without its '\n' */
  size_t n;
} line_reader;

/* The next line into r->s, r->n: 1; 0 at the end of the file; -1 (reported) for a last line
 * without its '\n', which is how a truncated file usually ends. */
static int next_line(line_reader *r) {
  if (r->at >= r->len) return 0;
  const char *nl = memchr(r->text + r->at, '\n', r->len - r->at);
  r->line++;
  if (!nl) {
    CF_FAIL(CF_ERR_DATA, "%s:%d: the file ends in the middle of this line: truncated?", r->path, r->line);
    return -1;
  }
  r->s = r->text + r->at;
  r->n = (size_t)(nl - r->s);
  r->at += r->n + 1;
  return 1;
}

/* A decimal number without sign or leading zeros, at most max, at s[*i..n): 1 and *v, else 0. */
static int read_number(const char *s, size_t n, size_t *i, long max, long *v) {
  size_t start = *i;
  long x = 0;
  for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; ++*i) {
    x = x * 10 + (s[*i] - '0');
    if (x > max) return 0;
  }
  if (*i == start || (s[start] == '0' && *i - start > 1)) return 0;
  *v = x;
  return 1;
}

/* The line (at most 40 bytes of it, anything but printable ASCII as '?'), for messages. */
static const char *shown(const line_reader *r, char *buf, size_t cap) {
  size_t k = 0;
  for (; k < r->n && k + 4 < cap && k < 40; k++) buf[k] = r->s[k] >= ' ' && r->s[k] < 127 ? r->s[k] : '?';
  if (k < r->n) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
  buf[k] = 0;
  return buf;
}

static cf_status read_header(line_reader *r, long *n_merges) {
  char buf[64];
  size_t magic = strlen(BPE_MAGIC), i = magic + 1;
  long version;
  int got = next_line(r);
  if (got < 0) return CF_ERR_DATA;
  if (!got || r->n <= magic || memcmp(r->s, BPE_MAGIC " ", magic + 1))
    return CF_FAIL(CF_ERR_DATA, "%s:1: not a clformer BPE merges file (it starts '%s'; expected '%s %d')", r->path,
                   got ? shown(r, buf, sizeof buf) : "", BPE_MAGIC, BPE_VERSION);
  if (!read_number(r->s, r->n, &i, 1000000, &version) || i != r->n)
    return CF_FAIL(CF_ERR_DATA, "%s:1: '%s': the version after '%s' is not a number", r->path, shown(r, buf, sizeof buf),
                   BPE_MAGIC);
  if (version != BPE_VERSION)
    return CF_FAIL(CF_ERR_DATA, "%s:1: version %ld of the merges format; this clformer reads version %d", r->path,
                   version, BPE_VERSION);
  i = strlen("merges ");
  if ((got = next_line(r)) < 0) return CF_ERR_DATA;
  if (!got || r->n < i || memcmp(r->s, "merges ", i) || !read_number(r->s, r->n, &i, BPE_MAX_MERGES, n_merges) ||
      i != r->n)
    return CF_FAIL(CF_ERR_DATA, "%s:2: expected 'merges N' (N at most %d), found '%s'", r->path, BPE_MAX_MERGES,
                   got ? shown(r, buf, sizeof buf) : "the end of the file");
  return CF_OK;
}

/* Why merge k's line (left, right) cannot be added, for its message. */
static cf_status merge_refused(const line_reader *r, bpe_merge_check why, int k, long left, long right) {
  switch (why) {
    case BPE_MERGE_UNDEFINED_ID:
      return CF_FAIL(CF_ERR_DATA, "%s:%d: merge %d joins an id not yet defined (%ld %ld; ids up to %d are)", r->path,
                     r->line, k + 1, left, right, CF_BPE_FIRST_MERGE + k - 1);
    case BPE_MERGE_SPECIAL_ID:
      return CF_FAIL(CF_ERR_DATA, "%s:%d: merge %d joins a special id (%ld %ld; ids 0-2 are pad, bos and eos)", r->path,
                     r->line, k + 1, left, right);
    case BPE_MERGE_REPEATED:
      return CF_FAIL(CF_ERR_DATA, "%s:%d: merge %d repeats an earlier merge (%ld %ld)", r->path, r->line, k + 1, left,
                     right);
    case BPE_MERGE_TOO_LONG:
      return CF_FAIL(CF_ERR_DATA, "%s:%d: merge %d (%ld %ld) makes a piece longer than %d bytes, which no text can hold",
                     r->path, r->line, k + 1, left, right, BPE_PIECE_MAX);
    default: return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory reading %s", r->path);
  }
}

static cf_status read_merges(line_reader *r, long n_merges, cf_bpe *b) {
  char buf[64];
  for (int k = 0; k < n_merges; k++) {
    int got = next_line(r);
    if (got < 0) return CF_ERR_DATA;
    if (!got)
      return CF_FAIL(CF_ERR_DATA, "%s: ends after line %d with %d of the %ld merges its line 2 announces: truncated?",
                     r->path, r->line, k, n_merges);
    size_t i = 0;
    long left, right;
    long max = CF_BPE_FIRST_MERGE + BPE_MAX_MERGES;
    if (!read_number(r->s, r->n, &i, max, &left) || i == r->n || r->s[i++] != ' ' ||
        !read_number(r->s, r->n, &i, max, &right) || i != r->n)
      return CF_FAIL(CF_ERR_DATA, "%s:%d: expected merge %d as two ids 'LEFT RIGHT', found '%s'", r->path, r->line,
                     k + 1, shown(r, buf, sizeof buf));
    bpe_merge_check why = bpe_add_merge(b, (int)left, (int)right);
    if (why != BPE_MERGE_OK) return merge_refused(r, why, k, left, right);
  }
  return CF_OK;
}

/* The last line: the checksum of everything before it, and nothing after it. */
static cf_status read_end(line_reader *r, long n_merges) {
  char buf[64], want[32];
  size_t before = r->at;
  int got = next_line(r);
  if (got < 0) return CF_ERR_DATA;
  snprintf(want, sizeof want, "end %016llx", cf_hash64(CF_HASH_SEED, r->text, before));
  if (!got)
    return CF_FAIL(CF_ERR_DATA, "%s: ends after its %ld merges without the 'end' line: truncated?", r->path, n_merges);
  if (r->n < 4 || memcmp(r->s, "end ", 4))
    return CF_FAIL(CF_ERR_DATA, "%s:%d: expected 'end CHECKSUM' after the %ld merges line 2 announces, found '%s'",
                   r->path, r->line, n_merges, shown(r, buf, sizeof buf));
  if (r->n != strlen(want) || memcmp(r->s, want, r->n))
    return CF_FAIL(CF_ERR_DATA, "%s:%d: the checksum '%s' does not match the file's content ('%s'): the file is corrupt",
                   r->path, r->line, shown(r, buf, sizeof buf), want);
  if (r->at < r->len)
    return CF_FAIL(CF_ERR_DATA, "%s:%d: text after the 'end' line", r->path, r->line + 1);
  return CF_OK;
}

cf_status cf_bpe_load(const char *path, cf_bpe **out) {
  *out = NULL;
  char *text;
  size_t len;
  CF_TRY(cf_read_regular_file(path, bpe_file_max, "BPE merges file", CF_ERR_DATA, &text, &len));
  line_reader r = {.path = path, .text = text, .len = len};
  long n_merges = 0;
  cf_bpe *b = bpe_new();
  cf_status st = b ? read_header(&r, &n_merges) : CF_ERR_NO_MEMORY;
  if (st == CF_OK) st = read_merges(&r, n_merges, b);
  if (st == CF_OK) st = read_end(&r, n_merges);
  free(text);
  if (st != CF_OK) { cf_bpe_free(b); return st; }
  *out = b;
  return CF_OK;
}
