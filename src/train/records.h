/* The run directory's records, written by a training run and read back by `compare`: the one
 * owner of their formats.
 *   metrics.csv  one row per progress line: step,lr,train_loss,valid_loss,grad_norm,tokens_per_s,wall_s
 *                and an encoder-decoder's ,bleu (valid_loss, tokens_per_s and bleu empty where not
 *                measured); read by column name
 *   run.json     how the run ended: status (finished, diverged, interrupted), steps_done, steps,
 *                diverged_step, best_valid (-1 when none), best_step, wall_s, tokens_per_s */
#ifndef CLFORMER_TRAIN_RECORDS_H
#define CLFORMER_TRAIN_RECORDS_H

#include <stdio.h>
#include "clformer/base.h"

typedef struct cf_metrics_row {
  int step;
  double lr, train_loss;
  double valid_loss;     /* NAN: not evaluated at this step */
  double grad_norm;
  double tokens_per_s;   /* NAN: not measured (a diverged step's row) */
  double wall_s;
  double bleu;           /* NAN: not measured (cf_train_options.bleu) */
} cf_metrics_row;

/* Open DIR/metrics.csv for appending (bleu: with the bleu column): a fresh file with its header when
 * after_step is 0, else the rows up to after_step kept (a resumed run drops what the interrupted one logged after its last
 * checkpoint) through an atomic rewrite. NULL with errno set on failure. */
FILE *cf_metrics_open(const char *dir, int after_step, int bleu);
/* Append one row and flush it (a killed run keeps every row it printed); bleu: the file has that
 * column (as opened). */
void cf_metrics_append(FILE *f, const cf_metrics_row *row, int bleu);
/* Every row of DIR/metrics.csv (columns found by their header names); *rows is malloc'd. */
cf_status cf_metrics_read(const char *dir, cf_metrics_row **rows, int *n);

typedef struct cf_run_record {
  char status[16];       /* "finished", "diverged", "interrupted" */
  int steps_done, steps, diverged_step, best_step;
  double best_valid;     /* NAN when none */
  double wall_s, tokens_per_s;
  int ranks;             /* the ranks that trained its last session (clformer/dist.h); 1 when not recorded */
} cf_run_record;

cf_status cf_run_record_write(const char *dir, const cf_run_record *r);
/* CF_ERR_NOT_FOUND (unreported) when DIR has no run.json; CF_ERR_IO when it is unreadable. */
cf_status cf_run_record_read(const char *dir, cf_run_record *r);

#endif
