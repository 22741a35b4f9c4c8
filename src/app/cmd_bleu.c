/* `clformer bleu REF... < HYP`: corpus BLEU of the hypotheses on standard input against one or more
 * reference files, one sentence a line, as sacreBLEU's command line scores them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "app/cli.h"
#include "clformer/base.h"
#include "clformer/experiments.h"

static const char *usage =
    "usage: clformer bleu REF [REF...] [--tokenize 13a|none|intl] [--smooth exp|none] [--score-only] < HYP\n"
    "\n"
    "Corpus BLEU of the hypotheses on standard input (one sentence a line) against the reference files\n"
    "(each one sentence a line, aligned with the hypotheses), computed as sacreBLEU 2.x does by default:\n"
    "13a tokenization, 1- to 4-grams, the brevity penalty, 'exp' smoothing, case kept. Prints\n"
    "  BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ...)\n"
    "  --tokenize T      13a (default; mteval-v13a), none (split at whitespace) or intl (mteval-v14's\n"
    "                    international tokenization: Unicode punctuation and symbols)\n"
    "  --smooth S        exp (default) or none (a zero n-gram precision gives BLEU 0)\n"
    "  --score-only      print the score alone, with 6 decimals (-b)\n";

typedef struct { char **line; size_t n, cap; } lines;

static void lines_free(lines *l) {
  for (size_t i = 0; i < l->n; i++) free(l->line[i]);
  free(l->line);
}

/* Every line of f (without its '\n'; a last line without one counts) into l: 0, or 2 after saying why. */
static int read_lines(FILE *f, const char *name, lines *l) {
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&buf, &cap, f)) >= 0) {
    if (len > 0 && buf[len - 1] == '\n') buf[--len] = 0;
    if ((size_t)len != strlen(buf)) {
      fprintf(stderr, "clformer bleu: %s, line %zu: contains a NUL byte; expected UTF-8 text\n", name, l->n + 1);
      free(buf);
      return 2;
    }
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 1024;
      char **grown = realloc(l->line, l->cap * sizeof *grown);
      if (!grown) { fprintf(stderr, "clformer bleu: out of memory reading %s\n", name); free(buf); return 2; }
      l->line = grown;
    }
    if (!(l->line[l->n] = strdup(buf))) { fprintf(stderr, "clformer bleu: out of memory reading %s\n", name); free(buf); return 2; }
    l->n++;
  }
  int err = ferror(f) ? errno : 0;
  free(buf);
  if (err) { fprintf(stderr, "clformer bleu: cannot read %s: %s\n", name, strerror(err)); return 2; }
  return 0;
}

typedef struct {
  const char *refs[64];
  int nrefs, score_only;
  cf_bleu_tok tok;
  cf_bleu_smooth smooth;
} bleu_args;

/* argv into a: 0, -1 after --help, or 2 after saying what is wrong. */
static int parse_args(int argc, char **argv, bleu_args *a) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cf_arg_is(s, "--help", "-h")) { fputs(usage, stdout); return -1; }
    else if (cf_arg_is(s, "--tokenize", "-tok") && v) {
      if (!cf_bleu_tok_parse(argv[++i], &a->tok)) {
        fprintf(stderr, "clformer bleu: --tokenize '%s' is not a tokenizer: 13a, none or intl\n", v);
        return 2;
      }
    } else if (cf_arg_is(s, "--smooth", "-s") && v) {
      i++;
      if (!strcmp(v, "exp") || !strcmp(v, "none")) a->smooth = !strcmp(v, "exp") ? CF_BLEU_SMOOTH_EXP : CF_BLEU_SMOOTH_NONE;
      else { fprintf(stderr, "clformer bleu: --smooth '%s' is not a smoothing: exp or none\n", v); return 2; }
    } else if (cf_arg_is(s, "--score-only", "-b")) a->score_only = 1;
    else if (s[0] != '-' && a->nrefs < 64) a->refs[a->nrefs++] = s;
    else return cf_cli_unexpected("bleu", argc, argv, i, usage);
  }
  if (!a->nrefs) { fprintf(stderr, "clformer bleu: a reference file is required\n\n%s", usage); return 2; }
  return 0;
}

/* The references' lines into refs[0..nrefs), each as many as the hypotheses: 0 or 2. */
static int read_refs(const bleu_args *a, const lines *hyp, lines *refs) {
  for (int r = 0; r < a->nrefs; r++) {
    FILE *f = fopen(a->refs[r], "r");
    if (!f) { fprintf(stderr, "clformer bleu: cannot open %s: %s\n", a->refs[r], strerror(errno)); return 2; }
    int rc = read_lines(f, a->refs[r], &refs[r]);
    fclose(f);
    if (rc) return rc;
    if (refs[r].n != hyp->n) {
      fprintf(stderr, "clformer bleu: %s has %zu lines but the hypotheses (standard input) have %zu: "
              "one sentence a line, aligned\n", a->refs[r], refs[r].n, hyp->n);
      return 2;
    }
  }
  if (!hyp->n) { fprintf(stderr, "clformer bleu: no sentences to score (standard input is empty)\n"); return 2; }
  return 0;
}

/* Line i did not add: name the text that is not UTF-8. */
static int bad_line(const bleu_args *a, const lines *hyp, const lines *refs, size_t i) {
  const char *name = "standard input", *text = hyp->line[i];
  char *tokens = NULL;
  cf_set_verbosity(-1);
  for (int r = -1; r < a->nrefs; r++) {
    if (r >= 0) name = a->refs[r], text = refs[r].line[i];
    if (cf_bleu_tokenize(CF_BLEU_NONE, text, &tokens) != CF_OK) break;
    free(tokens);
  }
  fprintf(stderr, "clformer bleu: %s, line %zu: %s\n", name, i + 1, cf_last_error());
  return 2;
}

static int score(const bleu_args *a, const lines *hyp, const lines *refs) {
  cf_bleu *b;
  if (cf_bleu_create(a->tok, &b) != CF_OK) return 1;
  const char *row[64];
  int verbosity = cf_verbosity(), rc = 0;
  for (size_t i = 0; i < hyp->n && !rc; i++) {
    for (int r = 0; r < a->nrefs; r++) row[r] = refs[r].line[i];
    cf_set_verbosity(-1);  /* said below, naming the file */
    cf_status st = cf_bleu_add(b, hyp->line[i], row, a->nrefs);
    cf_set_verbosity(verbosity);
    if (st != CF_OK) rc = st == CF_ERR_DATA ? bad_line(a, hyp, refs, i) : 1;
  }
  if (!rc) {
    cf_bleu_score s = cf_bleu_result(b, a->smooth);
    char line[256], sig[128];
    cf_bleu_format(&s, line, sizeof line);
    cf_bleu_signature(b, a->smooth, sig, sizeof sig);
    if (a->score_only) printf("%.6f\n", s.bleu);
    else printf("BLEU|%s%s\n", sig, line + strlen("BLEU"));
  }
  cf_set_verbosity(verbosity);
  cf_bleu_free(b);
  return rc;
}

int cmd_bleu(int argc, char **argv) {
  bleu_args a = {.tok = CF_BLEU_13A, .smooth = CF_BLEU_SMOOTH_EXP};
  int rc = parse_args(argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  lines hyp = {0}, refs[64] = {{0}};
  rc = read_lines(stdin, "standard input", &hyp);
  if (!rc) rc = read_refs(&a, &hyp, refs);
  if (!rc) rc = score(&a, &hyp, refs);
  lines_free(&hyp);
  for (int r = 0; r < a.nrefs; r++) lines_free(&refs[r]);
  return rc;
}
