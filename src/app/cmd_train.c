/* `clformer train CONFIG`: train (or resume) one model. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "app/cli.h"
#include "app/progress.h"
#include "clformer/check.h"
#include "clformer/data.h"
#include "clformer/dist.h"
#include "clformer/train.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer train CONFIG [--set KEY=VALUE ...] [--device SPEC] [--resume RUN_DIR] [--quiet]\n"
    "\n"
    "Trains the model CONFIG describes (see `clformer check --keys`) into train.out: progress lines,\n"
    "metrics.csv, config.yaml, checkpoint.safetensors and run.json. Ctrl-C (SIGINT) or SIGTERM stops\n"
    "after the current step with a checkpoint and one line saying so; --resume continues bit-identically.\n"
    "\n"
    "  --set KEY=VALUE   override a config key (repeatable), e.g. --set model.norm=post\n"
    "  --device SPEC     OpenCL device (default: $CLFORMER_DEVICE, then the config's device, then auto)\n"
    "  --resume RUN_DIR  continue the run in RUN_DIR from its checkpoint, or from step 0 when it was killed\n"
    "                    before its first one (CONFIG defaults to RUN_DIR/config.yaml); the run stays in\n"
    "                    RUN_DIR (CONFIG's train.out is not used, and --set train.out is refused)\n"
    "  --quiet           no progress lines (a stop by signal still prints its one line)\n"
    "\n"
    "exit codes: 0 finished, 1 runtime error, 2 bad input, 3 diverged (a non-finite loss or gradient, or a loss\n"
    "above 3 ln 256), 130 stopped by SIGINT, 143 stopped by SIGTERM\n";

/* --resume continues in its run directory: a --set train.out naming another is refused, not ignored
 * (the run would go on in RUN_DIR while its config.yaml said otherwise). 0, or 2 with the message. */
static int resume_keeps_out(const char *resume, char **sets, int nsets) {
  for (int i = 0; i < nsets; i++) {
    if (strncmp(sets[i], "train.out=", 10)) continue;
    char a[PATH_MAX], b[PATH_MAX];
    const char *out = sets[i] + 10;
    if (realpath(out, a) && realpath(resume, b) && !strcmp(a, b)) continue;  /* the same directory */
    fprintf(stderr, "clformer train: --set train.out=%s: train.out cannot be changed on resume; the run continues in "
            "its own directory %s (to start a new run in %s, leave out --resume)\n", out, resume, out);
    return 2;
  }
  return 0;
}

/* On resume, train.out names the run's directory, absolute (CONFIG's may name another directory, or
 * this one from another working directory), so that the run's config.yaml tells the truth. */
static void run_dir_as_out(cf_config *cfg, const char *resume) {
  char real[PATH_MAX];
  size_t n;  /* a missing run is refused later; memcpy, as the compiler cannot see the bound for snprintf */
  if (realpath(resume, real) && (n = strlen(real)) < sizeof cfg->train.out) memcpy(cfg->train.out, real, n + 1);
}

/* The config of this run: CONFIG (or RUN_DIR/config.yaml), the --set overrides, and, on resume, the
 * run's own directory as train.out; then its data opened once, so that a missing or unusable file is
 * said before any device work. 0, or 2 with the message printed. */
static int load_run_config(cf_config *cfg, const char *path, const char *resume, char **sets, int nsets) {
  if (resume && resume_keeps_out(resume, sets, nsets)) return 2;
  int rc = cf_cli_load_config(cfg, path, sets, nsets);
  if (rc) return rc;
  if (resume) run_dir_as_out(cfg, resume);
  return cf_data_check(cfg) == CF_OK ? 0 : 2;
}

/* The run itself on ctx: self-test, training, and after a runtime error where it stopped and how to
 * continue. The exit code. */
static int run(cf_context *ctx, const cf_config *cfg, const char *resume, int quiet) {
  if (cf_dist_agree(cf_selftest_ensure(ctx)) != CF_OK) return 1;
  cf_cli_progress progress = {.quiet = quiet, .silent = cf_dist_world()->rank != 0};
  cf_cli_run_watch watch;
  cf_train_options to = {.resume_dir = resume, .hooks = cf_cli_run_watch_hooks(&watch, cf_cli_train_hooks(&progress))};
  cf_train_result res;
  cf_cli_signals_catch();
  cf_status st = cf_train(ctx, cfg, &to, &res);
  cf_cli_signals_restore();
  const char *dir = resume ? resume : cfg->train.out;
  if (st != CF_OK && cf_dist_failure_agreed() == 2) return cf_exit_code(st);  /* the failing rank said why */
  if (st != CF_OK) {
    cf_dist_failure_reason(cf_last_error());  /* before the report below probes the checkpoint */
    char hint[2300];
    int ranks = cf_dist_world()->size;  /* under mpirun, the same job resumes it */
    if (ranks > 1) snprintf(hint, sizeof hint, "continue with mpirun -np %d clformer train --resume %s", ranks, dir);
    else snprintf(hint, sizeof hint, "continue with clformer train --resume %s", dir);
    cf_cli_run_failed("train", &watch, st, ctx, dir, hint);
    return cf_exit_code(st);
  }
  if (res.state.diverged_step) return 3;
  if (res.interrupted) return cf_cli_stop_exit_code();
  if (!quiet && !progress.silent)
    printf("done: best validation loss %.4f at step %d; run in %s\n", res.state.best_valid, res.state.best_step, dir);
  return 0;
}

int cmd_train(int argc, char **argv) {
  const char *path = NULL, *device = NULL, *resume = NULL;
  char *sets[256];
  int nsets = 0, quiet = 0;
  for (int i = 1; i < argc; i++) {
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_set(argc, argv, &i, sets, &nsets, 256)) continue;
    else if (cf_arg_is(argv[i], "--device", "-d") && i + 1 < argc) device = argv[++i];
    else if (cf_arg_is(argv[i], "--resume", NULL) && i + 1 < argc) resume = argv[++i];
    else if (cf_arg_is(argv[i], "--quiet", "-q")) quiet = 1;
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else return cf_cli_unexpected("train", argc, argv, i, usage);
  }
  char resumed_cfg[2100];
  if (!path && resume) {
    snprintf(resumed_cfg, sizeof resumed_cfg, "%s/config.yaml", resume);
    path = resumed_cfg;
  }
  if (!path) { fprintf(stderr, "clformer train: a CONFIG file is required\n\n%s", usage); return 2; }
  cf_config cfg;
  int rc = load_run_config(&cfg, path, resume, sets, nsets);
  if (rc) return rc;
  cf_context *ctx;
  cf_status st = cf_cli_rank_context(cf_device_spec_resolve(device, cfg.device), 0, quiet, &ctx);
  if (st != CF_OK) return cf_exit_code(st);
  rc = run(ctx, &cfg, resume, quiet);
  cf_context_free(ctx);
  return rc;
}
