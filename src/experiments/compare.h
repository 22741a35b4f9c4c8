/* Inside `compare`: the comparison file's contents, one run's record, and the pieces in
 * compare_spec.c (the file) and compare_report.c (summary.md, summary.json, curves.svg). */
#ifndef CLFORMER_EXPERIMENTS_COMPARE_H
#define CLFORMER_EXPERIMENTS_COMPARE_H

#include "clformer/config.h"

typedef struct variant {
  char name[64];
  cf_config cfg;
} variant;

typedef struct spec {
  cf_config base;
  variant *v;
  int nv;
  double target_loss;   /* NAN: none */
  int plateau_after;    /* steps after which a loss near the unigram entropy counts as a plateau */
  int seeds;
  int bleu_lines;       /* an encoder-decoder's BLEU at each evaluation: greedy, on data.test's first
                           bleu_lines lines (0: all) */
  char out[1024];
} spec;

/* One run's record, read back from its metrics.csv and run.json. */
typedef struct run_rec {
  int present, diverged, plateaued, too_short, steps_done, step_to_target;
  double final_valid, best_valid, wall_s, tokens_per_s;
  int n;                  /* metric rows */
  double *step, *lr, *train, *valid;
  double *bleu;           /* NAN where not measured */
  double final_bleu;      /* the last measured, NAN: none */
} run_rec;

/* The run directory of variant vi's seed_k-th seed (compare.c). */
void compare_run_dir(const spec *s, int vi, int seed_k, char *buf, size_t n);
/* Read the comparison file at path over the defaults, with the --set overrides on its base. On
 * failure s->v may hold a partial list: free it. */
cf_status compare_parse_spec(spec *s, const char *path, char **sets, int nsets);
/* summary.md, summary.json and curves.svg in s->out from runs[variant][seed]. */
cf_status compare_write_report(const spec *s, run_rec **runs, double entropy, int log_steps);

#endif
