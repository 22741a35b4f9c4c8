/* JSON documents through Jansson: numbers as the reports print them, one layout for every file and
 * stream we write (small containers on one line), and atomic writes. Escaping and number syntax are
 * Jansson's; only the line breaks are chosen here. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/base.h"

/* Reals with at most 15 significant digits: a value rounded by cf_json_num prints as it was
 * rounded (17 would print 0.1 as 0.10000000000000001). */
#define DUMP_FLAGS (JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15))

json_t *cf_json_num(double v, const char *fmt) {
  if (!isfinite(v)) return json_null();
  if (fmt) {  /* the value as the text report shows it, so the JSON carries no spurious digits */
    char buf[64];
    snprintf(buf, sizeof buf, fmt, v);
    v = strtod(buf, NULL);
    /* "%.6g" writes 30 for 30.0: an integer, as printf'd JSON had it */
    if (!strpbrk(buf, ".eE") && fabs(v) < 9e15) return json_integer((json_int_t)v);
  }
  return json_real(v);
}

json_t *cf_json_str(const char *s) {
  json_t *j = json_string(s);
  if (j || !s) return j;
  char *ascii = strdup(s);  /* not UTF-8 (a driver's Latin-1, a path): its other bytes as '?' */
  if (!ascii) return NULL;
  for (char *c = ascii; *c; c++)
    if ((unsigned char)*c >= 0x80) *c = '?';
  j = json_string(ascii);
  free(ascii);
  return j;
}

cf_status cf_json_set(json_t *obj, const char *key, json_t *value) {
  if (value && !json_object_set_new(obj, key, value)) return CF_OK;
  return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the JSON member '%s'", key);
}

static int is_container(const json_t *j) { return json_is_object(j) || json_is_array(j); }

static int scalars_only(json_t *j) {
  const char *key;
  json_t *v;
  size_t i;
  if (json_is_array(j)) {
    json_array_foreach(j, i, v) if (is_container(v)) return 0;
  } else if (json_is_object(j)) {
    json_object_foreach(j, key, v) if (is_container(v)) return 0;
  }
  return 1;
}

/* One line: a scalar, an array of scalars, or an object whose members are scalars or containers of
 * scalars (a table row like {"name": ..., "step_ms": {"median": ...}}). */
static int one_line(json_t *j) {
  if (!json_is_object(j)) return scalars_only(j);
  const char *key;
  json_t *v;
  json_object_foreach(j, key, v) if (!scalars_only(v)) return 0;
  return 1;
}

static int emit(FILE *f, json_t *j, int indent) {
  if (one_line(j)) return json_dumpf(j, f, DUMP_FLAGS);  /* ", " and ": " between items, no breaks */
  int obj = json_is_object(j);
  size_t n = obj ? json_object_size(j) : json_array_size(j);
  void *it = obj ? json_object_iter(j) : NULL;
  fputc(obj ? '{' : '[', f);
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "%s\n%*s", i ? "," : "", indent + 2, "");
    json_t *v = obj ? json_object_iter_value(it) : json_array_get(j, i);
    if (obj) {
      json_t *key = json_string(json_object_iter_key(it));
      int bad = !key || json_dumpf(key, f, DUMP_FLAGS);
      json_decref(key);
      if (bad) return -1;
      fputs(": ", f);
      it = json_object_iter_next(j, it);
    }
    if (emit(f, v, indent + 2)) return -1;
  }
  fprintf(f, "\n%*s%c", indent, "", obj ? '}' : ']');
  return 0;
}

cf_status cf_json_write(json_t *j, FILE *f, const char *what) {
  if (!j) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building %s", what);
  if (emit(f, j, 0) || fputc('\n', f) == EOF || fflush(f)) return CF_FAIL(CF_ERR_IO, "cannot write %s", what);
  return CF_OK;
}

cf_status cf_json_write_file(json_t *j, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&buf, &len);
  if (!mem) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory writing %s", path);
  cf_status st = cf_json_write(j, mem, path);
  if (fclose(mem) && st == CF_OK) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory writing %s", path);
  if (st == CF_OK) st = cf_write_file_atomic(path, buf, len);
  free(buf);
  return st;
}
