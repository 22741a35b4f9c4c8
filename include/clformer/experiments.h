/* The paper's experiments as library calls: `compare` (the warm-up comparison, Section 3.2 /
 * Figure 2) and `gradnorm` (gradient norms at initialization, Theorem 1 / Figure 3). Each reads its
 * YAML file, runs, and writes its report files; what a person should see goes to the caller's
 * stream and progress callback, never straight to the terminal. */
#ifndef CLFORMER_EXPERIMENTS_H
#define CLFORMER_EXPERIMENTS_H

#include <stdio.h>
#include "clformer/base.h"
#include "clformer/train.h"

/* Called after each unit of work: done of total finished, `what` the one just finished. */
typedef void (*cf_progress_fn)(void *user, int done, int total, const char *what, double elapsed_s, double eta_s);

typedef struct cf_compare_options {
  const char *path;            /* the comparison file */
  char **sets;                 /* KEY=VALUE overrides of its base */
  int nsets;
  int seeds;                   /* 0: the file's own */
  const char *device, *out;    /* NULL: the file's own */
  const char *only;            /* run just this variant; NULL: all */
  int log_steps;               /* log-scaled step axis in curves.svg */
  int report_only;             /* train nothing; rewrite the summary from the runs present */
  FILE *report;                /* one line per skipped or diverged run and the files written; NULL: none */
  cf_train_hooks hooks;        /* every run's progress; a stop request ends the comparison after that run */
} cf_compare_options;
/* Runs the comparison's variants in turn (each a training run that reports its own progress) and
 * writes OUT/summary.md, summary.json and curves.svg. *interrupted is set when a run stopped on a
 * signal (its checkpoint saved); the report is still written. */
cf_status cf_compare(const cf_compare_options *opts, int *interrupted);

/* Checks a comparison file as cf_compare reads it, the --set overrides on its base, without training:
 * every variant resolved and validated, and the data of the base and of every variant opened as
 * training opens it (cf_data_check). On success writes a summary line and each variant's resolved
 * config (a YAML document each) to report (NULL: nothing). CF_ERR_CONFIG or CF_ERR_DATA, reported,
 * otherwise. */
cf_status cf_compare_check(const char *path, char **sets, int nsets, FILE *report);

typedef struct cf_gradnorm_options {
  const char *path;
  char **sets;
  int nsets;
  int seeds;                   /* 0: the file's own */
  const char *device, *out;    /* NULL: the file's own */
  FILE *report;                /* the fitted exponents and the files written; NULL: none */
  cf_progress_fn progress;     /* after each (placement, depth, seed); NULL: none */
  void *user;
} cf_gradnorm_options;
/* Writes OUT/gradnorm.md, gradnorm.json and gradnorm.svg. */
cf_status cf_gradnorm(const cf_gradnorm_options *opts);
/* Checks a gradnorm file as cf_gradnorm reads it, the --set overrides on its base, without a device:
 * the model of every placement and depth validated, the base's data opened. On success writes a
 * summary line and the resolved base config to report (NULL: nothing). */
cf_status cf_gradnorm_check(const char *path, char **sets, int nsets, FILE *report);

#endif
