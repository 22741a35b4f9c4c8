/* Translation pairs: two aligned text files, one sentence a line, read and encoded with the BPE.
 * Batching is in pairs_batch.c. */
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "data/pairs.h"

static const size_t pairs_file_max = (size_t)1 << 30;  /* so a line's token count fits an int */

/* The lines of text[0..len): their starts and lengths (without '\n', nor a '\r' before it: a file
 * with CRLF line ends reads as with LF, as `clformer translate` reads its input); a last line
 * without '\n' counts. *n lines; NULL arrays for none. */
static cf_status split_lines(const char *path, const char *text, size_t len, size_t **start, size_t **length,
                             size_t *n) {
  size_t count = 0;
  for (size_t i = 0; i < len; i++) count += text[i] == '\n';
  if (len && text[len - 1] != '\n') count++;
  *n = count;
  *start = malloc((count + 1) * sizeof **start);
  *length = malloc((count + 1) * sizeof **length);
  if (!*start || !*length) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for the %zu lines of %s", count, path);
  size_t at = 0;
  for (size_t k = 0; k < count; k++) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t l = nl ? (size_t)(nl - (text + at)) : len - at;
    (*start)[k] = at;
    (*length)[k] = l && text[at + l - 1] == '\r' ? l - 1 : l;
    at += l + 1;
  }
  return CF_OK;
}

typedef struct {  /* one of the two files, read whole and cut into lines */
  const char *path;
  char *text;
  size_t len, n, *start, *length;
} line_file;

static cf_status read_lines(line_file *f, const char *path) {
  f->path = path;
  CF_TRY(cf_read_regular_file(path, pairs_file_max, "translation text", CF_ERR_DATA, &f->text, &f->len));
  return split_lines(path, f->text, f->len, &f->start, &f->length, &f->n);
}

static void line_file_free(line_file *f) {
  free(f->text);
  free(f->start);
  free(f->length);
}

void cf_pairs_free(cf_pairs *p) {
  if (!p) return;
  free(p->ids);
  free(p->pair);
  free(p);
}

/* Line k of both files encoded onto the end of p->ids, as pair p->n unless too long. */
static void add_pair(cf_pairs *p, const cf_bpe *b, const line_file *src, const line_file *tgt, size_t k, int max_len) {
  pairs_entry *e = &p->pair[p->n];
  e->src = p->n_ids;
  e->n_src = (int)cf_bpe_encode(b, src->text + src->start[k], src->length[k], p->ids + e->src);
  e->tgt = e->src + (size_t)e->n_src;
  e->n_tgt = (int)cf_bpe_encode(b, tgt->text + tgt->start[k], tgt->length[k], p->ids + e->tgt);
  e->line = k + 1;
  if (max_len > 0 && (e->n_src + 1 > max_len || e->n_tgt + 1 > max_len)) {
    p->left_out++;
    return;
  }
  p->n_ids = e->tgt + (size_t)e->n_tgt;
  p->n++;
}

static cf_status encode_pairs(cf_pairs *p, const cf_bpe *b, const line_file *src, const line_file *tgt, int max_len) {
  /* at most one id per byte, so both files' sizes bound the ids */
  p->ids = malloc((src->len + tgt->len + 1) * sizeof *p->ids);
  p->pair = malloc((src->n + 1) * sizeof *p->pair);
  if (!p->ids || !p->pair)
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for the %zu pairs of %s and %s", src->n, src->path, tgt->path);
  for (size_t k = 0; k < src->n; k++) add_pair(p, b, src, tgt, k, max_len);
  return CF_OK;
}

cf_status cf_pairs_open(const cf_bpe *b, const char *src_path, const char *tgt_path, int max_len, cf_pairs **out) {
  *out = NULL;
  line_file src = {0}, tgt = {0};
  cf_pairs *p = calloc(1, sizeof *p);
  cf_status st = p ? read_lines(&src, src_path) : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) st = read_lines(&tgt, tgt_path);
  if (st == CF_OK && src.n != tgt.n)
    st = CF_FAIL(CF_ERR_DATA, "%s has %zu lines but %s has %zu: the two files must be aligned, one sentence a line",
                 src_path, src.n, tgt_path, tgt.n);
  if (st == CF_OK && src.n == 0) st = CF_FAIL(CF_ERR_DATA, "%s and %s are empty: no sentence pairs", src_path, tgt_path);
  if (st == CF_OK) st = encode_pairs(p, b, &src, &tgt, max_len);
  if (st == CF_OK && p->n == 0)
    st = CF_FAIL(CF_ERR_DATA, "every one of the %zu pairs of %s and %s is longer than %d tokens", p->left_out, src_path,
                 tgt_path, max_len);
  line_file_free(&src);
  line_file_free(&tgt);
  if (st != CF_OK) { cf_pairs_free(p); return st; }
  *out = p;
  return CF_OK;
}

size_t cf_pairs_count(const cf_pairs *p) { return p->n; }
size_t cf_pairs_left_out(const cf_pairs *p) { return p->left_out; }
size_t cf_pairs_line(const cf_pairs *p, size_t i) { return p->pair[i].line; }

const int *cf_pairs_source(const cf_pairs *p, size_t i, int *n) {
  *n = p->pair[i].n_src;
  return p->ids + p->pair[i].src;
}

const int *cf_pairs_target(const cf_pairs *p, size_t i, int *n) {
  *n = p->pair[i].n_tgt;
  return p->ids + p->pair[i].tgt;
}
