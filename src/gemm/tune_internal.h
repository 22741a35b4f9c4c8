/* Inside the GEMM layer: what the two halves of `clformer tune` share. tune.c drives the run and
 * compares the implementations per shape; tune_clblast.c runs CLBlast's own tuners. */
#ifndef CLFORMER_GEMM_TUNE_INTERNAL_H
#define CLFORMER_GEMM_TUNE_INTERNAL_H

#include "clformer/gemm.h"
#include "gemm/tuning_file.h"

/* One tuning run: where it reports and its clock. */
typedef struct cf_tune_run {
  cf_context *ctx;
  FILE *report;    /* results and tables (cf_tune_options.report); NULL: none */
  FILE *progress;  /* progress and ETA lines (cf_tune_options.progress); NULL: none */
  int tty;         /* progress is a terminal: a running tuner's line rewrites itself ('\r') */
  double t0;       /* cf_now() at the start */
  double budget;   /* seconds for the whole run */
} cf_tune_run;

/* fprintf to f, nothing when f is NULL. */
void cf_tune_say(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* fflush f unless NULL: a report line is out before the progress stream (or a child) writes. */
void cf_tune_flush(FILE *f);
/* Seconds as M:SS (negative as 0:00). */
void cf_tune_fmt_time(double s, char *out, size_t n);

/* Step 1: CLBlast's tuners (those on PATH) under their shares of the budget, adding a `clblast`
 * line to tf for each that found a verified configuration. Fails only when it cannot make a
 * working directory or runs out of memory. */
cf_status cf_tune_clblast_tuners(const cf_tune_run *run, const cf_tune_options *o, cf_tuning_file *tf);

#endif
