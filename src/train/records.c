/* metrics.csv and run.json (formats in records.h): written and parsed here only. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/base.h"
#include "train/records.h"

/* The header; an encoder-decoder's run adds ",bleu" (an optional column: files without it read). */
static const char metrics_header[] = "step,lr,train_loss,valid_loss,grad_norm,tokens_per_s,wall_s";
enum { COL_STEP, COL_LR, COL_TRAIN, COL_VALID, COL_GNORM, COL_TPS, COL_WALL, COL_BLEU, NCOLS };
static const char *const col_names[NCOLS] = {"step", "lr", "train_loss", "valid_loss", "grad_norm", "tokens_per_s",
                                             "wall_s", "bleu"};

static void put_header(FILE *f, int bleu) { fprintf(f, "%s%s\n", metrics_header, bleu ? ",bleu" : ""); }

/* Rewrite path keeping its header and the rows of steps <= after_step, atomically (a temporary
 * named as every atomic write's, which a later run removes if this one is killed mid-write). */
static int keep_rows_through(const char *path, int after_step, int bleu) {
  char *text, *buf = NULL;
  size_t len = 0;
  if (cf_read_file(path, &text, NULL) != CF_OK) return -1;
  FILE *out = open_memstream(&buf, &len);
  if (!out) { free(text); errno = ENOMEM; return -1; }
  put_header(out, bleu);
  char *save, *line = strtok_r(text, "\n", &save);
  for (line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
    if (atoi(line) <= after_step) fprintf(out, "%s\n", line);
  free(text);
  int bad = fclose(out) != 0 || cf_write_file_atomic(path, buf, len) != CF_OK;
  free(buf);
  if (bad && !errno) errno = EIO;
  return bad ? -1 : 0;
}

FILE *cf_metrics_open(const char *dir, int after_step, int bleu) {
  char path[2100];
  snprintf(path, sizeof path, "%s/metrics.csv", dir);
  struct stat sb;
  if (after_step > 0 && stat(path, &sb) == 0) return keep_rows_through(path, after_step, bleu) ? NULL : fopen(path, "a");
  FILE *f = fopen(path, "w");
  if (f) {
    put_header(f, bleu);
    fflush(f);  /* a run killed before its first row leaves a file that is recognisably ours */
  }
  return f;
}

static void put_field(FILE *f, double v, const char *fmt) {
  if (!isnan(v)) fprintf(f, fmt, v);
}

void cf_metrics_append(FILE *f, const cf_metrics_row *r, int bleu) {
  fprintf(f, "%d,%.6g,%.6g,", r->step, r->lr, r->train_loss);
  put_field(f, r->valid_loss, "%.6g");
  fprintf(f, ",%.6g,", r->grad_norm);
  put_field(f, r->tokens_per_s, "%.1f");
  fprintf(f, ",%.3f", r->wall_s);
  if (bleu) {
    fputc(',', f);
    put_field(f, r->bleu, "%.4f");
  }
  fputc('\n', f);
  fflush(f);
}

/* Which column holds each field, from the header line; -1 when one is missing. */
static int map_columns(char *header, int col[NCOLS]) {
  for (int c = 0; c < NCOLS; c++) col[c] = -1;
  int i = 0;
  for (char *save, *name = strtok_r(header, ",\r", &save); name; name = strtok_r(NULL, ",\r", &save), i++)
    for (int c = 0; c < NCOLS; c++)
      if (!strcmp(name, col_names[c])) col[c] = i;
  for (int c = 0; c < NCOLS; c++)
    if (col[c] < 0 && c != COL_BLEU) return -1;
  return 0;
}

static double field(char **f, int nf, int i) {
  if (i >= nf || !*f[i]) return NAN;
  char *end;
  double v = strtod(f[i], &end);
  return end == f[i] ? NAN : v;
}

/* One data line into row; 0 when it is too short to be one. */
static int parse_row(char *line, const int col[NCOLS], cf_metrics_row *row) {
  char *f[16];
  int nf = 0;
  for (char *c = line; nf < 16;) {
    f[nf++] = c;
    if (!(c = strchr(c, ','))) break;
    *c++ = 0;
  }
  double step = field(f, nf, col[COL_STEP]);
  if (isnan(step)) return 0;
  *row = (cf_metrics_row){(int)step, field(f, nf, col[COL_LR]), field(f, nf, col[COL_TRAIN]),
                          field(f, nf, col[COL_VALID]), field(f, nf, col[COL_GNORM]), field(f, nf, col[COL_TPS]),
                          field(f, nf, col[COL_WALL]), col[COL_BLEU] >= 0 ? field(f, nf, col[COL_BLEU]) : NAN};
  return 1;
}

cf_status cf_metrics_read(const char *dir, cf_metrics_row **rows, int *n) {
  char path[2100], *text;
  snprintf(path, sizeof path, "%s/metrics.csv", dir);
  *rows = NULL;
  *n = 0;
  CF_TRY(cf_read_file(path, &text, NULL));
  int cap = 1, col[NCOLS];
  for (char *c = text; *c; c++) cap += *c == '\n';
  char *save, *line = strtok_r(text, "\n", &save);
  cf_status st = CF_OK;
  if (!line || map_columns(line, col)) st = CF_FAIL(CF_ERR_IO, "%s: not a clformer metrics file (its header)", path);
  else if (!(*rows = malloc((size_t)cap * sizeof **rows))) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (line = strtok_r(NULL, "\n", &save); st == CF_OK && line; line = strtok_r(NULL, "\n", &save))
    *n += parse_row(line, col, &(*rows)[*n]);
  free(text);
  return st;
}

cf_status cf_run_record_write(const char *dir, const cf_run_record *r) {
  char path[2100];
  snprintf(path, sizeof path, "%s/run.json", dir);
  json_t *o = json_object();
  cf_status st = o ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) st = cf_json_set(o, "status", json_string(r->status));
  if (st == CF_OK) st = cf_json_set(o, "steps_done", json_integer(r->steps_done));
  if (st == CF_OK) st = cf_json_set(o, "steps", json_integer(r->steps));
  if (st == CF_OK) st = cf_json_set(o, "diverged_step", json_integer(r->diverged_step));
  if (st == CF_OK) st = cf_json_set(o, "best_valid", cf_json_num(isfinite(r->best_valid) ? r->best_valid : -1, "%.6g"));
  if (st == CF_OK) st = cf_json_set(o, "best_step", json_integer(r->best_step));
  if (st == CF_OK) st = cf_json_set(o, "wall_s", cf_json_num(r->wall_s, "%.3f"));
  if (st == CF_OK) st = cf_json_set(o, "tokens_per_s", cf_json_num(r->tokens_per_s, "%.1f"));
  if (st == CF_OK) st = cf_json_set(o, "ranks", json_integer(r->ranks > 0 ? r->ranks : 1));
  if (st == CF_OK) st = cf_json_write_file(o, path);
  json_decref(o);
  return st;
}

cf_status cf_run_record_read(const char *dir, cf_run_record *r) {
  char path[2100];
  snprintf(path, sizeof path, "%s/run.json", dir);
  memset(r, 0, sizeof *r);
  r->best_valid = NAN;
  struct stat sb;
  if (stat(path, &sb) != 0) return CF_ERR_NOT_FOUND;
  json_error_t err;
  json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  const char *status = NULL;
  double best = -1;
  r->ranks = 1;  /* a record written before runs had ranks */
  int ok = o && !json_unpack(o, "{s:s, s:i, s:i, s:i, s:F, s:i, s:F, s:F, s?i}", "status", &status, "steps_done",
                             &r->steps_done, "steps", &r->steps, "diverged_step", &r->diverged_step, "best_valid",
                             &best, "best_step", &r->best_step, "wall_s", &r->wall_s, "tokens_per_s", &r->tokens_per_s,
                             "ranks", &r->ranks);
  if (ok) snprintf(r->status, sizeof r->status, "%s", status);
  if (ok && best >= 0) r->best_valid = best;
  json_decref(o);
  if (!ok) return CF_FAIL(CF_ERR_IO, "%s: not a clformer run record (%s)", path, o ? "fields missing" : err.text);
  return CF_OK;
}
