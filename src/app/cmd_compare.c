/* `clformer compare`: the command line over cf_compare (src/experiments/compare.c). */
#include <stdio.h>
#include <string.h>
#include "app/cli.h"
#include "app/progress.h"
#include "clformer/dist.h"
#include "clformer/experiments.h"

static const char *usage =
    "usage: clformer compare CONFIG [--seeds N] [--only NAME] [--set KEY=VALUE ...] [--device SPEC]\n"
    "                               [--out DIR] [--log-steps] [--report-only]\n"
    "\n"
    "Runs every variant of a comparison file in turn into OUT/<variant>/ (OUT/<variant>/seed<S>/ with\n"
    "several seeds, S = base seed + k; a single-seed run already in OUT/<variant>/ serves as the first\n"
    "seed), skipping finished runs and resuming unfinished ones, then writes OUT/summary.md,\n"
    "OUT/summary.json and OUT/curves.svg. A comparison file holds:\n"
    "  base:        a training config (every key of `clformer check --keys`)\n"
    "  variants:    a list of {name: NAME, set: {KEY: VALUE, ...}} overrides of the base\n"
    "  target_loss: validation loss whose first crossing is reported per variant (optional)\n"
    "  plateau_after: a run whose final validation loss is within 0.05 of the unigram entropy (or above)\n"
    "               after at least this many steps is reported as plateaued (default 100)\n"
    "  seeds:       seeds per variant (default 1; --seeds overrides); seed k uses base seed + k\n"
    "  out:         output directory (default runs/<config name>; --out overrides)\n"
    "\n"
    "  --seeds N       seeds per variant (overrides the file's seeds)\n"
    "  --only NAME     run just this variant (the summary covers every run present)\n"
    "  --set KEY=VALUE override a key of the base (repeatable); a variant's own set still wins\n"
    "  --device SPEC   OpenCL device (default: $CLFORMER_DEVICE, then the base config's, then auto)\n"
    "  --out DIR       output directory (overrides the file's out)\n"
    "  --log-steps     log-scaled step axis in curves.svg\n"
    "  --report-only   train nothing; rewrite the summary from the runs present\n";

/* This rank's device (every device a spec matches shared out under mpirun, the world said). */
static cf_status rank_context(const char *spec, cf_context **ctx) { return cf_cli_rank_context(spec, 0, 0, ctx); }

int cmd_compare(int argc, char **argv) {
  cf_experiment_args ea = {0};
  int rank = cf_dist_world()->rank;  /* under mpirun rank 0 alone prints and writes */
  cf_compare_options o = {.report = rank == 0 ? stdout : NULL, .make_context = rank_context};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int taken = cf_cli_experiment_arg("compare", argc, argv, &i, &ea);
    if (taken < 0) return 2;
    if (taken) continue;
    if (cf_arg_is(a, "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(a, "--only", NULL) && i + 1 < argc) o.only = argv[++i];
    else if (cf_arg_is(a, "--log-steps", NULL)) o.log_steps = 1;
    else if (cf_arg_is(a, "--report-only", NULL)) o.report_only = 1;
    else return cf_cli_unexpected("compare", argc, argv, i, usage);
  }
  if (!ea.path) { fprintf(stderr, "clformer compare: a comparison CONFIG is required\n\n%s", usage); return 2; }
  o.path = ea.path, o.sets = ea.sets, o.nsets = ea.nsets, o.seeds = ea.seeds, o.device = ea.device, o.out = ea.out;
  cf_cli_progress progress = {.resume_hint = "run the same compare command again", .silent = rank != 0};
  cf_cli_run_watch watch;
  o.hooks = cf_cli_run_watch_hooks(&watch, cf_cli_train_hooks(&progress));
  int interrupted = 0;
  cf_cli_signals_catch();
  cf_status st = cf_compare(&o, &interrupted);
  cf_cli_signals_restore();
  if (st != CF_OK && cf_dist_failure_agreed() == 2) return cf_exit_code(st);  /* the failing rank said why */
  if (st != CF_OK) cf_cli_run_failed("compare", &watch, st, NULL, NULL, "run the same compare command again to resume it");
  if (st != CF_OK) return cf_exit_code(st);
  return interrupted || cf_cli_stop_requested() ? cf_cli_stop_exit_code() : 0;  /* 130 SIGINT, 143 SIGTERM */
}
