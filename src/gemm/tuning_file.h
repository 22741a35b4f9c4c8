/* Inside the GEMM layer: the per-device tuning file of `clformer tune`, its format owned by
 * tuning_file.c (both ways). tune.c fills a cf_tuning_file and writes it; gemm.c reads it and
 * applies what it holds. */
#ifndef CLFORMER_GEMM_TUNING_FILE_H
#define CLFORMER_GEMM_TUNING_FILE_H

#include "clformer/gemm.h"

#define CF_TUNING_MAX_PARAMS 32  /* parameters of one `clblast` line (Xgemm has 16) */
#define CF_TUNING_NAME 48        /* a kernel or parameter name, with its NUL */

typedef struct cf_tuning_param {
  char name[CF_TUNING_NAME];
  size_t value;
} cf_tuning_param;

/* A `clblast` line: parameters of one CLBlast kernel (or of "GemmRoutine", its direct/indirect
 * switch), for CLBlastOverrideParameters. */
typedef struct cf_tuning_clblast {
  char kernel[CF_TUNING_NAME];
  int nparams;
  cf_tuning_param params[CF_TUNING_MAX_PARAMS];
} cf_tuning_clblast;

/* A `choice` line: the faster implementation for one shape and what both measured. */
typedef struct cf_tuning_choice {
  int ta, tb;
  size_t M, N, K, batch;
  cf_gemm_impl impl;  /* CF_GEMM_OWN or CF_GEMM_CLBLAST */
  double own_gflops, clblast_gflops;
} cf_tuning_choice;

/* A file's contents. Zero-initialised it is empty; cf_tuning_file_free releases it. */
typedef struct cf_tuning_file {
  char *comment;  /* the header comment: lines joined by '\n', without "# " (the format's legend,
                     which the writer adds, left out); NULL: none */
  cf_tuning_clblast *clblast;
  int nclblast, clblast_cap;
  cf_tuning_choice *choices;
  int nchoices, choices_cap;
} cf_tuning_file;

void cf_tuning_file_free(cf_tuning_file *tf);
/* Replace the header comment (printf-style; '\n' separates lines). */
cf_status cf_tuning_file_set_comment(cf_tuning_file *tf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cf_status cf_tuning_file_add_clblast(cf_tuning_file *tf, const cf_tuning_clblast *line);
cf_status cf_tuning_file_add_choice(cf_tuning_file *tf, const cf_tuning_choice *choice);

/* Append NAME=value to a `clblast` line; 0 when it is full or the name does not fit. */
int cf_tuning_clblast_add(cf_tuning_clblast *line, const char *name, size_t value);
/* "KERNEL NAME=VALUE ..." into buf (truncated to n); the length it needed, as snprintf. Any line
 * fits CF_TUNING_LINE bytes: names of at most 47 characters, values of at most 20 digits. */
#define CF_TUNING_LINE (CF_TUNING_NAME + CF_TUNING_MAX_PARAMS * (CF_TUNING_NAME + 22))
int cf_tuning_clblast_format(const cf_tuning_clblast *line, char *buf, size_t n);

/* Read path into *tf (emptied first). Malformed lines are skipped, each reported (cf_log level 1,
 * as path:line) when `report` is set. 1 when the file was read (running out of memory stops it
 * there, reported, tf holding the lines before), 0 when it cannot be opened (tf left empty). */
int cf_tuning_file_read(const char *path, cf_tuning_file *tf, int report);
/* Write *tf to path (its directory created), replacing any file there atomically. */
cf_status cf_tuning_file_write(const cf_tuning_file *tf, const char *path);

#endif
