/* The tuning file of `clformer tune`, both ways: written by tune.c, read by gemm.c.
 *
 * One text file per device and driver in the cache directory (cf_gemm_tune_path):
 *   # comment lines                      what wrote it, when, for which device; then a legend of the
 *                                        two line kinds below (written here, skipped when read)
 *   clblast KERNEL NAME=VALUE ...        CLBlast parameters, applied with CLBlastOverrideParameters
 *                                        (tune writes Xgemm, XgemmDirect, the helper kernels Padtranspose,
 *                                        Transpose, Pad, Copy, and GemmRoutine XGEMM_MIN_INDIRECT_SIZE=S:
 *                                        CLBlast's direct kernel for M*N*K < S^3; a line CLBlast refuses
 *                                        is reported and skipped by gemm.c)
 *   choice OP M N K BATCH IMPL OWN CLB   the faster implementation for one shape (OP "NT" etc.,
 *                                        IMPL own|clblast, the measured GFLOP/s of both)
 * Blank lines are ignored; any other line, or one of these not in its form, is reported with its
 * file and line number and skipped (a hand-edited file still applies the rest). The file is read
 * on a context's first GEMM (unless cf_gemm_tune_hold defers it); CLFORMER_TUNE=off ignores it. A
 * shape without a choice keeps the default of cf_gemm_resolve. */
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"
#include "gemm/tuning_file.h"

/* The legend under the header comment: part of the format, so written here and not kept when read
 * (a file read and written again stays the same). */
static const char *const legend[] = {
    "clblast KERNEL NAME=VALUE...: CLBlastOverrideParameters",
    "choice OP M N K BATCH IMPL OWN_GFLOPS CLBLAST_GFLOPS",
};

/* ---------- the contents ---------- */

void cf_tuning_file_free(cf_tuning_file *tf) {
  free(tf->comment);
  free(tf->clblast);
  free(tf->choices);
  memset(tf, 0, sizeof *tf);
}

/* Room for one more of n items of `size` bytes in *items (capacity *cap). */
static cf_status grow(void **items, int *cap, int n, size_t size) {
  if (n < *cap) return CF_OK;
  int want = *cap ? 2 * *cap : 8;
  void *p = realloc(*items, (size_t)want * size);
  if (!p) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory reading or building the GEMM tuning file");
  *items = p;
  *cap = want;
  return CF_OK;
}

cf_status cf_tuning_file_add_clblast(cf_tuning_file *tf, const cf_tuning_clblast *line) {
  CF_TRY(grow((void **)&tf->clblast, &tf->clblast_cap, tf->nclblast, sizeof *tf->clblast));
  tf->clblast[tf->nclblast++] = *line;
  return CF_OK;
}

cf_status cf_tuning_file_add_choice(cf_tuning_file *tf, const cf_tuning_choice *choice) {
  CF_TRY(grow((void **)&tf->choices, &tf->choices_cap, tf->nchoices, sizeof *tf->choices));
  tf->choices[tf->nchoices++] = *choice;
  return CF_OK;
}

/* Append text (n bytes) as one more comment line. */
static cf_status comment_append(cf_tuning_file *tf, const char *text, size_t n) {
  size_t old = tf->comment ? strlen(tf->comment) : 0;
  char *c = realloc(tf->comment, old + (old > 0) + n + 1);
  if (!c) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory reading the GEMM tuning file");
  if (old) c[old++] = '\n';
  memcpy(c + old, text, n);
  c[old + n] = 0;
  tf->comment = c;
  return CF_OK;
}

cf_status cf_tuning_file_set_comment(cf_tuning_file *tf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *c = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!c) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the GEMM tuning file");
  va_start(ap, fmt);
  vsnprintf(c, (size_t)n + 1, fmt, ap);
  va_end(ap);
  free(tf->comment);
  tf->comment = c;
  return CF_OK;
}

int cf_tuning_clblast_add(cf_tuning_clblast *line, const char *name, size_t value) {
  if (line->nparams >= CF_TUNING_MAX_PARAMS || !*name || strlen(name) >= CF_TUNING_NAME) return 0;
  cf_tuning_param *p = &line->params[line->nparams++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->value = value;
  return 1;
}

int cf_tuning_clblast_format(const cf_tuning_clblast *line, char *buf, size_t n) {
  size_t len = (size_t)snprintf(buf, n, "%s", line->kernel);
  for (int i = 0; i < line->nparams; i++)
    len += (size_t)snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, " %s=%zu", line->params[i].name,
                            line->params[i].value);
  return (int)len;
}

/* ---------- reading ---------- */

#define MAX_WORDS (2 + CF_TUNING_MAX_PARAMS + 1)  /* one more than a `clblast` line may have: too long */

/* Split line (modified) at blanks into at most MAX_WORDS words; their count. */
static int split_words(char *line, char **words) {
  int n = 0;
  char *save = NULL;
  for (char *w = strtok_r(line, " \t\r\n", &save); w && n < MAX_WORDS; w = strtok_r(NULL, " \t\r\n", &save))
    words[n++] = w;
  return n;
}

static int parse_size(const char *s, size_t *out) {
  long v;
  if (!cf_parse_long(s, 0, LONG_MAX, &v) || !(*s >= '0' && *s <= '9')) return 0;  /* digits, no sign */
  *out = (size_t)v;
  return 1;
}

/* `clblast KERNEL NAME=VALUE ...` (words[0] is "clblast"): NULL when it is one, else what is wrong. */
static const char *parse_clblast(char **words, int n, cf_tuning_clblast *line) {
  static const char *form = "a `clblast` line is: clblast KERNEL NAME=VALUE ... (1 to 32 unsigned integer values)";
  memset(line, 0, sizeof *line);
  if (n < 3 || n > 2 + CF_TUNING_MAX_PARAMS || strchr(words[1], '=') || strlen(words[1]) >= CF_TUNING_NAME)
    return form;
  snprintf(line->kernel, sizeof line->kernel, "%s", words[1]);
  for (int i = 2; i < n; i++) {
    char *eq = strchr(words[i], '=');
    size_t v;
    if (!eq) return form;
    *eq = 0;
    if (!parse_size(eq + 1, &v) || !cf_tuning_clblast_add(line, words[i], v)) return form;
  }
  return NULL;
}

/* `choice OP M N K BATCH IMPL OWN CLB` (words[0] is "choice"): NULL when it is one, else what is wrong. */
static const char *parse_choice(char **words, int n, cf_tuning_choice *c) {
  static const char *form = "a `choice` line is: choice OP M N K BATCH own|clblast OWN_GFLOPS CLBLAST_GFLOPS "
                            "(OP two of N and T)";
  memset(c, 0, sizeof *c);
  if (n != 9) return form;
  const char *op = words[1], *impl = words[6];
  if (strlen(op) != 2 || !strchr("NT", op[0]) || !strchr("NT", op[1])) return form;
  c->ta = op[0] == 'T';
  c->tb = op[1] == 'T';
  if (!parse_size(words[2], &c->M) || !parse_size(words[3], &c->N) || !parse_size(words[4], &c->K) ||
      !parse_size(words[5], &c->batch))
    return form;
  if (!strcmp(impl, "own")) c->impl = CF_GEMM_OWN;
  else if (!strcmp(impl, "clblast")) c->impl = CF_GEMM_CLBLAST;
  else return form;
  if (!cf_parse_double(words[7], 0, 1e12, &c->own_gflops) || !cf_parse_double(words[8], 0, 1e12, &c->clblast_gflops))
    return form;
  return NULL;
}

/* A comment line (after its '#'): kept unless it is the legend. */
static cf_status read_comment(cf_tuning_file *tf, const char *text) {
  if (*text == ' ') text++;
  size_t n = strcspn(text, "\r\n");
  for (size_t i = 0; i < sizeof legend / sizeof *legend; i++)
    if (strlen(legend[i]) == n && !strncmp(text, legend[i], n)) return CF_OK;
  return comment_append(tf, text, n);
}

/* One line of the file into tf. *why: what is wrong with it (then skipped), else NULL. */
static cf_status read_line(cf_tuning_file *tf, char *line, const char **why) {
  *why = NULL;
  if (line[0] == '#') return read_comment(tf, line + 1);
  char *words[MAX_WORDS];
  int n = split_words(line, words);
  if (n == 0) return CF_OK;
  if (!strcmp(words[0], "clblast")) {
    cf_tuning_clblast l;
    if ((*why = parse_clblast(words, n, &l))) return CF_OK;
    return cf_tuning_file_add_clblast(tf, &l);
  }
  if (!strcmp(words[0], "choice")) {
    cf_tuning_choice c;
    if ((*why = parse_choice(words, n, &c))) return CF_OK;
    return cf_tuning_file_add_choice(tf, &c);
  }
  *why = "not a comment, `clblast` or `choice` line";
  return CF_OK;
}

int cf_tuning_file_read(const char *path, cf_tuning_file *tf, int report) {
  cf_tuning_file_free(tf);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char *line = NULL;
  size_t cap = 0;
  cf_status st = CF_OK;
  for (int lineno = 1; st == CF_OK && getline(&line, &cap, f) >= 0; lineno++) {
    const char *why;
    st = read_line(tf, line, &why);
    if (why && report) cf_log(1, "note: %s:%d: skipped: %s", path, lineno, why);
  }
  free(line);
  fclose(f);
  return 1;
}

/* ---------- writing ---------- */

static void write_text(const cf_tuning_file *tf, FILE *out) {
  for (const char *c = tf->comment; c && *c;) {
    size_t n = strcspn(c, "\n");
    fprintf(out, "# %.*s\n", (int)n, c);
    c += n + (c[n] == '\n');
  }
  for (size_t i = 0; i < sizeof legend / sizeof *legend; i++) fprintf(out, "# %s\n", legend[i]);
  for (int i = 0; i < tf->nclblast; i++) {
    char text[CF_TUNING_LINE];
    cf_tuning_clblast_format(&tf->clblast[i], text, sizeof text);
    fprintf(out, "clblast %s\n", text);
  }
  for (int i = 0; i < tf->nchoices; i++) {
    const cf_tuning_choice *c = &tf->choices[i];
    fprintf(out, "choice %c%c %zu %zu %zu %zu %s %.2f %.2f\n", c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->M, c->N, c->K,
            c->batch, c->impl == CF_GEMM_OWN ? "own" : "clblast", c->own_gflops, c->clblast_gflops);
  }
}

cf_status cf_tuning_file_write(const cf_tuning_file *tf, const char *path) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (!out) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory writing the GEMM tuning file");
  write_text(tf, out);
  int bad = ferror(out);
  if (fclose(out) || bad) {
    free(text);
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory writing the GEMM tuning file");
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  cf_status st = slash ? cf_mkdirs_private(dir) : CF_OK;
  if (st == CF_OK) st = cf_write_file_atomic(path, text, len);
  free(text);
  return st;
}
