/* The base layer, internal: error reporting and checking macros, logging, the clock, hashing,
 * file I/O with atomic replace, and small helpers the reports share. Knows nothing of devices. */
#ifndef CLFORMER_BASE_BASE_H
#define CLFORMER_BASE_BASE_H

#include <stdio.h>
#include <CL/cl.h>
#include "clformer/base.h"

/* Record an error: "<call> failed at file:line: NAME (code)" plus optional detail (a build
 * log), kept for cf_last_error() and printed to stderr. Returns status. */
cf_status cf_report(cf_status status, const char *call, const char *file, int line,
                    const char *detail_fmt, ...);
#define CF_FAIL(status, ...) cf_report((status), NULL, __FILE__, __LINE__, __VA_ARGS__)

/* Evaluate an OpenCL or CLBlast call once; on failure report it and return its status. */
#define CF_CHECK(call)                                                              \
  do {                                                                              \
    cf_status cf_chk_ = (cf_status)(call);                                          \
    if (cf_chk_ != CL_SUCCESS) return cf_report(cf_chk_, #call, __FILE__, __LINE__, NULL); \
  } while (0)

/* Same, but store the status in `st` and jump to `label` (for cleanup ladders). */
#define CF_CHECK_GOTO(call, st, label)                                              \
  do {                                                                              \
    cf_status cf_chk_ = (cf_status)(call);                                          \
    if (cf_chk_ != CL_SUCCESS) {                                                    \
      (st) = cf_report(cf_chk_, #call, __FILE__, __LINE__, NULL);                   \
      goto label;                                                                   \
    }                                                                               \
  } while (0)

/* Propagate a cf_status from a clformer function (already reported). */
#define CF_TRY(expr)                      \
  do {                                    \
    cf_status cf_try_ = (expr);           \
    if (cf_try_ != CF_OK) return cf_try_; \
  } while (0)

/* A failing release is logged, never fatal. */
#define CF_RELEASE(fn, obj)                                                          \
  do {                                                                               \
    if (obj) {                                                                       \
      cl_int cf_rel_ = fn(obj);                                                      \
      if (cf_rel_ != CL_SUCCESS) cf_log(1, "warning: " #fn " failed: %s", cf_status_str(cf_rel_)); \
    }                                                                                \
  } while (0)

/* Messages at or below the current verbosity go to stderr, prefixed "clformer: ". */
void cf_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic wall clock in seconds. */
double cf_now(void);

/* 64-bit FNV-1a, chainable: h = cf_hash64(h, data, n), starting from CF_HASH_SEED. */
#define CF_HASH_SEED 0xcbf29ce484222325ULL
unsigned long long cf_hash64(unsigned long long h, const void *data, size_t n);

/* Read a whole file; *text is malloc'd and NUL-terminated. */
cf_status cf_read_file(const char *path, char **text, size_t *len);
/* Open path read-only if, and only if, it is a regular file: stat first, then open with O_NONBLOCK
 * (so a FIFO put in its place never blocks) and fstat again. Returns the descriptor (blocking again)
 * with the file's size in *size, or -1 with *why saying why not ("it is a directory, not a regular
 * file", "it is a FIFO (named pipe), ...", strerror's text); reports nothing. */
int cf_open_regular(const char *path, size_t *size, const char **why);
/* cf_read_file for the user's input: a regular file of at most max_bytes (NUL-terminated, *len
 * bytes). Anything else is reported as `status` with the reason: "cannot open PATH: it is a
 * directory, not a regular file", "PATH: too large for a WHAT (N bytes; at most M)". */
cf_status cf_read_regular_file(const char *path, size_t max_bytes, const char *what, cf_status status, char **text,
                               size_t *len);
/* Write a file atomically: a temporary beside it, fsync, rename. */
cf_status cf_write_file_atomic(const char *path, const void *data, size_t len);
/* The median of v[0..n) (sorting v in place; NaN when n == 0): the benchmarks' statistic. */
double cf_median(double *v, int n);
/* JSON through Jansson (json.c; callers include <jansson.h>). v as a number, rounded as fmt prints
 * it ("%.3f", "%.6g"; NULL: as is; an integer where fmt writes one), or null when not finite; NULL
 * only when out of memory. */
struct json_t;
struct json_t *cf_json_num(double v, const char *fmt);
/* Text from outside (driver strings, paths) as a JSON string: bytes that are not UTF-8 become '?'. */
struct json_t *cf_json_str(const char *s);
/* obj[key] = value, taking the reference. value NULL (a failed json_*() call) or a failed set is
 * CF_ERR_NO_MEMORY, reported once here, so documents are built without a check per call. */
cf_status cf_json_set(struct json_t *obj, const char *key, struct json_t *value);
/* The document j (NULL: building it ran out of memory, reported naming what), one layout
 * everywhere: containers of containers spread over indented lines, the rest on one line each. */
cf_status cf_json_write(struct json_t *j, FILE *f, const char *what);
/* The same into path, atomically (cf_write_file_atomic). */
cf_status cf_json_write_file(struct json_t *j, const char *path);
/* Whole-string numbers: 1 on success, 0 for junk, overflow, NaN/Inf or out of [lo, hi]. */
int cf_parse_long(const char *s, long lo, long hi, long *out);
int cf_parse_double(const char *s, double lo, double hi, double *out);
/* mkdir -p; the _private form creates the last directory for its owner alone (0700: caches). */
cf_status cf_mkdirs_private(const char *path);
cf_status cf_mkdirs(const char *path);

/* The n bytes of *text (malloc'd) with every byte that does not form UTF-8 replaced by U+FFFD,
 * each maximal invalid run of a character's bytes as one, as Python's
 * bytes.decode('utf-8', errors='replace') does, and NUL too (text ends at NUL for its readers);
 * *text is replaced by a new, NUL-terminated allocation. */
cf_status cf_utf8_replace_invalid(char **text, size_t n);

#endif
