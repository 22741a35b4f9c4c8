/* sacreBLEU's tokenizers (tokenizer_13a.py with tokenizer_re.py, tokenizer_intl.py, none), run with
 * the same regular expressions through PCRE2: its global substitution scans left to right without
 * overlap as Python's re.sub does, and its \p{P}, \p{S}, \p{N} are Unicode's general categories as in
 * the `regex` module sacreBLEU uses for intl. What Python adds around them (str.rstrip, str.split on
 * Unicode whitespace, str.replace) is written out here. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "experiments/bleu.h"

/* tokenizer_re.py, the language-dependent part of 13a (Western languages). */
static const char *const re_13a[][2] = {
    {"([\\{-\\~\\[-\\` -\\&\\(-\\+\\:-\\@\\/])", " $1 "},  /* ASCII symbols but ' , - . */
    {"([^0-9])([\\.,])", "$1 $2 "},                       /* period and comma unless after a digit */
    {"([\\.,])([^0-9])", " $1 $2"},                       /* ... unless before a digit */
    {"([0-9])(-)", "$1 $2 "},                             /* dash after a digit */
};
/* tokenizer_intl.py (mteval-v14's international tokenization). */
static const char *const re_intl[][2] = {
    {"(\\P{N})(\\p{P})", "$1 $2 "},  /* punctuation after a non-digit */
    {"(\\p{P})(\\P{N})", " $1 $2"},  /* punctuation before a non-digit */
    {"(\\p{S})", " $1 "},            /* every symbol */
};

cf_status cf_bleu_tokenizer_init(cf_bleu_tokenizer *t, cf_bleu_tok tok) {
  memset(t, 0, sizeof *t);
  t->tok = tok;
  const char *const(*rules)[2] = tok == CF_BLEU_13A ? re_13a : re_intl;
  int n = tok == CF_BLEU_13A ? 4 : tok == CF_BLEU_INTL ? 3 : 0;
  for (int i = 0; i < n; i++) {
    int err;
    PCRE2_SIZE at;
    t->re[i] = pcre2_compile((PCRE2_SPTR)rules[i][0], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &at, NULL);
    if (!t->re[i]) {
      cf_bleu_tokenizer_free(t);
      return CF_FAIL(CF_ERR_INVALID_ARG, "BLEU tokenizer: PCRE2 refused pattern %d (error %d at %zu)", i, err, (size_t)at);
    }
    t->repl[i] = rules[i][1];
    t->nre = i + 1;
  }
  return CF_OK;
}

void cf_bleu_tokenizer_free(cf_bleu_tokenizer *t) {
  for (int i = 0; i < 4; i++) pcre2_code_free(t->re[i]);
  memset(t->re, 0, sizeof t->re);
  t->nre = 0;
}

/* The code point at s[i] into *cp: its length in bytes, or 0 when s[i..n) does not start a valid
 * UTF-8 sequence (overlong forms, surrogates and values past U+10FFFF included, as Python refuses them). */
static int utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp) {
  unsigned c = s[i];
  int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || i + (size_t)len > n) return 0;
  uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int k = 1; k < len; k++) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i + k] & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

/* Python's str.isspace(): what str.split() splits on and str.rstrip() strips. */
static int py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's str.replace(from, to) in place: to is never longer than from here. */
static void replace_all(char *s, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to);
  char *r = s, *w = s;
  while (*r) {
    if (!strncmp(r, from, fl)) {
      memcpy(w, to, tl);
      w += tl, r += fl;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
}

/* *s = re.sub(re, repl, *s), every match from left to right. */
static cf_status substitute(const void *re, const char *repl, char **s) {
  size_t len = strlen(*s);
  PCRE2_SIZE cap = 3 * len + 16;  /* enough for every rule unless a line is all matches */
  for (;;) {
    char *out = malloc(cap);
    if (!out) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory tokenizing %zu bytes", len);
    PCRE2_SIZE outlen = cap;
    int rc = pcre2_substitute(re, (PCRE2_SPTR)*s, len, 0,
                              PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK, NULL,
                              NULL, (PCRE2_SPTR)repl, PCRE2_ZERO_TERMINATED, (PCRE2_UCHAR *)out, &outlen);
    if (rc >= 0) {
      free(*s);
      *s = out;
      return CF_OK;
    }
    free(out);
    if (rc != PCRE2_ERROR_NOMEMORY) return CF_FAIL(CF_ERR_DATA, "BLEU tokenizer: PCRE2 substitution failed (%d)", rc);
    cap = outlen + 1;
  }
}

/* *out = a copy of text without trailing Python whitespace, with room for 13a's two spaces;
 * CF_ERR_DATA when text is not UTF-8. */
static cf_status rstrip_copy(const char *text, char **out) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = strlen(text), end = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int len = utf8_next(s, n, i, &cp);
    if (!len) return CF_FAIL(CF_ERR_DATA, "the text is not valid UTF-8 (byte %zu)", i + 1);
    i += (size_t)len;
    if (!py_space(cp)) end = i;
  }
  if (!(*out = malloc(end + 3))) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory tokenizing %zu bytes", n);
  memcpy(*out, text, end);
  (*out)[end] = 0;
  return CF_OK;
}

/* ' '.join(s.split()) in place (s is valid UTF-8). */
static void split_join(char *s) {
  size_t n = strlen(s), w = 0;
  int gap = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp = 0;
    int len = utf8_next((const unsigned char *)s, n, i, &cp);
    if (len == 0) len = 1;  /* cannot happen: the text was checked */
    if (py_space(cp)) {
      gap = w > 0;
    } else {
      if (gap) s[w++] = ' ', gap = 0;
      memmove(s + w, s + i, (size_t)len);
      w += (size_t)len;
    }
    i += (size_t)len;
  }
  s[w] = 0;
}

/* Tokenizer13a.__call__ before its regular expressions. */
static void prepare_13a(char *s) {
  static const char *const rep[][2] = {{"<skipped>", ""}, {"-\n", ""}, {"\n", " "}, {"&quot;", "\""},
                                       {"&amp;", "&"},   {"&lt;", "<"}, {"&gt;", ">"}};
  for (size_t i = 0; i < sizeof rep / sizeof *rep; i++) replace_all(s, rep[i][0], rep[i][1]);
  size_t n = strlen(s);
  memmove(s + 1, s, n);
  s[0] = s[n + 1] = ' ';
  s[n + 2] = 0;
}

/* TokenizerV14International.__call__ before its regular expressions (sacreBLEU >= 2.1). */
static void prepare_intl(char *s) {
  static const char *const rep[][2] = {{"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&apos;", "'"}};
  if (!strchr(s, '&')) return;
  for (size_t i = 0; i < sizeof rep / sizeof *rep; i++) replace_all(s, rep[i][0], rep[i][1]);
}

cf_status cf_bleu_tokenizer_run(const cf_bleu_tokenizer *t, const char *text, char **out) {
  char *s;
  *out = NULL;
  CF_TRY(rstrip_copy(text, &s));
  if (t->tok == CF_BLEU_13A) prepare_13a(s);
  if (t->tok == CF_BLEU_INTL) prepare_intl(s);
  for (int i = 0; i < t->nre; i++) {
    cf_status st = substitute(t->re[i], t->repl[i], &s);
    if (st != CF_OK) { free(s); return st; }
  }
  split_join(s);
  *out = s;
  return CF_OK;
}

cf_status cf_bleu_tokenize(cf_bleu_tok tok, const char *text, char **out) {
  cf_bleu_tokenizer t;
  CF_TRY(cf_bleu_tokenizer_init(&t, tok));
  cf_status st = cf_bleu_tokenizer_run(&t, text, out);
  cf_bleu_tokenizer_free(&t);
  return st;
}
