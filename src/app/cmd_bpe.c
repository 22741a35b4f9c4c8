/* `clformer bpe learn|encode|decode`: the byte-pair-encoding subword vocabulary of the translation
 * models, learned from training text, applied to text line by line, and undone. The tokenizer
 * itself is in src/data/bpe*.c (clformer/data.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "app/cli.h"
#include "base/base.h"
#include "clformer/base.h"
#include "clformer/data.h"

static const char *usage =
    "usage: clformer bpe learn [--vocab N] --out FILE [--force] TEXT...\n"
    "       clformer bpe encode --merges FILE < TEXT\n"
    "       clformer bpe decode --merges FILE < IDS\n"
    "\n"
    "Byte-pair encoding: the subword vocabulary the translation models share between languages.\n"
    "  learn           learn merges from the TEXT files (give both languages' training text for one shared\n"
    "                  vocabulary) and write them to the --out file\n"
    "  encode          each line of standard input as token ids, space-separated, a line each\n"
    "  decode          each line of token ids back to its text (the inverse of encode)\n"
    "  --vocab N       ids in the vocabulary (default 8000): 3 special (0 pad, 1 bos, 2 eos), 256 bytes,\n"
    "                  then N - 259 merges (fewer when no pair of tokens occurs twice)\n"
    "  --out FILE      where learn writes the merges (refused when FILE exists, unless --force)\n"
    "  --force         let learn replace an existing --out file\n"
    "  --merges FILE   the merges file learn wrote\n"
    "Exit codes: 0 done, 1 a failure to write, 2 bad input (usage, a file, a token id).\n";

typedef struct {
  const char *action, *out, *merges, *texts[256];
  int n_texts, vocab, force;
} bpe_args;

/* argv into a: 0, -1 after --help, or 2 after saying what is wrong. */
static int parse_args(int argc, char **argv, bpe_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n;
    if (cf_arg_is(s, "--help", "-h")) { fputs(usage, stdout); return -1; }
    else if (cf_arg_is(s, "--vocab", NULL) && v) {
      if (!cf_parse_long(argv[++i], CF_BPE_FIRST_MERGE, CF_BPE_MAX_VOCAB, &n)) {
        fprintf(stderr, "clformer bpe: --vocab '%s' is not valid: an integer from %d (no merges) to %d\n", v,
                CF_BPE_FIRST_MERGE, CF_BPE_MAX_VOCAB);
        return 2;
      }
      a->vocab = (int)n;
    } else if (cf_arg_is(s, "--out", "-o") && v) a->out = argv[++i];
    else if (cf_arg_is(s, "--merges", "-m") && v) a->merges = argv[++i];
    else if (cf_arg_is(s, "--force", NULL)) a->force = 1;
    else if (s[0] != '-' && !a->action) a->action = s;
    else if (s[0] != '-' && a->n_texts < 256) a->texts[a->n_texts++] = s;
    else return cf_cli_unexpected("bpe", argc, argv, i, usage);
  }
  if (!a->action) { fprintf(stderr, "clformer bpe: an action is required: learn, encode or decode\n\n%s", usage); return 2; }
  int learning = !strcmp(a->action, "learn");
  if (!learning && strcmp(a->action, "encode") && strcmp(a->action, "decode")) {
    fprintf(stderr, "clformer bpe: unknown action '%s': learn, encode or decode\n\n%s", a->action, usage);
    return 2;
  }
  const char *missing = learning ? (!a->out ? "--out FILE" : !a->n_texts ? "a TEXT file to learn from" : NULL)
                                 : (!a->merges ? "--merges FILE" : NULL);
  if (missing) { fprintf(stderr, "clformer bpe %s: %s is required\n\n%s", a->action, missing, usage); return 2; }
  if (!learning && a->n_texts) {
    fprintf(stderr, "clformer bpe %s: unexpected argument '%s' (it reads standard input)\n\n%s", a->action, a->texts[0],
            usage);
    return 2;
  }
  return 0;
}

static int learn(const bpe_args *a) {
  struct stat sb;
  if (!a->force && stat(a->out, &sb) == 0) {
    fprintf(stderr, "clformer bpe learn: %s exists: remove it, choose another --out, or add --force\n", a->out);
    return 2;
  }
  char *texts[256] = {0};
  size_t lens[256] = {0};
  cf_status st = CF_OK;
  for (int i = 0; i < a->n_texts && st == CF_OK; i++)
    st = cf_read_regular_file(a->texts[i], (size_t)1 << 31, "training text", CF_ERR_DATA, &texts[i], &lens[i]);
  double t0 = cf_now();
  cf_bpe *b = NULL;
  cf_bpe_learn_stats s;
  if (st == CF_OK) st = cf_bpe_learn((const char *const *)texts, lens, a->n_texts, a->vocab, &b, &s);
  double seconds = cf_now() - t0;
  if (st == CF_OK) st = cf_bpe_save(b, a->out);
  if (st == CF_OK) {
    printf("learned %d merges in %.2f s from %d file%s (%zu bytes, %zu chunks, %zu distinct); the last joins a pair "
           "seen %lld times\n", s.merges, seconds, a->n_texts, a->n_texts > 1 ? "s" : "", s.bytes, s.chunks,
           s.distinct_chunks, s.last_count);
    if (cf_bpe_vocab_size(b) < a->vocab)
      printf("no pair of tokens occurs twice after that: the vocabulary has %d ids, not the %d asked\n",
             cf_bpe_vocab_size(b), a->vocab);
    printf("vocabulary %d ids (3 special, 256 bytes, %d merges): %s\n", cf_bpe_vocab_size(b), s.merges, a->out);
  }
  cf_bpe_free(b);
  for (int i = 0; i < a->n_texts; i++) free(texts[i]);
  return cf_exit_code(st);
}

/* Each line of stdin (its '\n' left out) as ids on a line of stdout. */
static int encode(const cf_bpe *b) {
  char *line = NULL;
  size_t cap = 0, ids_cap = 0;
  int *ids = NULL, rc = 0;
  ssize_t len;
  while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
    if (len > 0 && line[len - 1] == '\n') len--;
    if ((size_t)len > ids_cap) {
      free(ids);
      ids_cap = (size_t)len * 2;
      if (!(ids = malloc(ids_cap * sizeof *ids))) { fprintf(stderr, "clformer bpe encode: out of memory\n"); rc = 1; }
    }
    size_t n = rc ? 0 : cf_bpe_encode(b, line, (size_t)len, ids);
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (!rc) putchar('\n');
  }
  if (!rc && ferror(stdin)) { fprintf(stderr, "clformer bpe encode: cannot read standard input: %s\n", strerror(errno)); rc = 2; }
  free(line);
  free(ids);
  return rc;
}

/* The ids of one line (space-separated decimals) into *ids: their count, or -1 after saying why not. */
static long parse_ids(const char *line, size_t line_no, int **ids, size_t *cap) {
  long n = 0;
  for (const char *p = line; *p;) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > 2147483647L || (*end && *end != ' ' && *end != '\t' && *end != '\r')) {
      fprintf(stderr, "clformer bpe decode: standard input, line %zu: '%.*s' is not a token id\n", line_no,
              (int)strcspn(p, " \t\r"), p);
      return -1;
    }
    if ((size_t)n == *cap) {
      int *grown = realloc(*ids, (*cap = *cap ? *cap * 2 : 256) * sizeof *grown);
      if (!grown) { fprintf(stderr, "clformer bpe decode: out of memory\n"); return -1; }
      *ids = grown;
    }
    (*ids)[n++] = (int)v;
    p = end;
  }
  return n;
}

/* Each line of ids on stdin as its text on a line of stdout. */
static int decode(const cf_bpe *b, const char *merges) {
  char *line = NULL;
  size_t cap = 0, ids_cap = 0, line_no = 0;
  int *ids = NULL, rc = 0;
  ssize_t len;
  while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
    line_no++;
    if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
    long n = parse_ids(line, line_no, &ids, &ids_cap);
    char *text = NULL;
    size_t text_len;
    int verbosity = cf_verbosity();
    cf_set_verbosity(-1);  /* said here, with the line */
    cf_status st = n < 0 ? CF_ERR_DATA : cf_bpe_decode(b, ids, (size_t)n, &text, &text_len);
    cf_set_verbosity(verbosity);
    if (n >= 0 && st != CF_OK)
      fprintf(stderr, "clformer bpe decode: standard input, line %zu, %s of %s\n", line_no, cf_last_error(), merges);
    if (st != CF_OK) rc = cf_exit_code(st);
    else fwrite(text, 1, text_len, stdout), putchar('\n');
    free(text);
  }
  free(line);
  free(ids);
  return rc;
}

int cmd_bpe(int argc, char **argv) {
  bpe_args a = {.vocab = 8000};
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  if (!strcmp(a.action, "learn")) return learn(&a);
  cf_bpe *b;
  cf_status st = cf_bpe_load(a.merges, &b);
  if (st != CF_OK) return cf_exit_code(st);
  rc = !strcmp(a.action, "encode") ? encode(b) : decode(b, a.merges);
  cf_bpe_free(b);
  if (!rc && (fflush(stdout) || ferror(stdout))) {
    fprintf(stderr, "clformer bpe %s: cannot write standard output: %s\n", a.action, strerror(errno));
    rc = 1;
  }
  return rc;
}
