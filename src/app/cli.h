/* The command-line program's subcommands. Each returns the process exit code:
 * 0 success, 1 a runtime failure, 2 bad input (usage, config, device spec, no OpenCL). */
#ifndef CLFORMER_CLI_H
#define CLFORMER_CLI_H

#include "clformer/train.h"

int cmd_devices(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_gradnorm(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_bleu(int argc, char **argv);
int cmd_bpe(int argc, char **argv);
int cmd_translate(int argc, char **argv);
int cmd_eval_bleu(int argc, char **argv);

/* This rank's device context: under mpirun, its share of the devices spec matches
 * (cf_dist_choose_device), agreed among ranks, with every rank's host and device printed by rank 0
 * (not when quiet); else the device spec selects. */
cf_status cf_cli_rank_context(const char *spec, int profiling, int quiet, cf_context **ctx);

struct cf_config;
/* Defaults, then the file (if any), then the --set overrides, then validation: 0, or 2 with
 * the message printed. */
int cf_cli_load_config(struct cf_config *c, const char *path, char **sets, int nsets);
/* The same for commands that use only the model's shapes (bench, tune): no training text needed. */
int cf_cli_load_model_config(struct cf_config *c, const char *path, char **sets, int nsets);

/* Exit code for a failed status: 2 for the user's input, 1 otherwise. */
int cf_exit_code(int status);
/* "--set KEY=VALUE" or "--set=KEY=VALUE" at argv[*i]: appends to sets (advancing *i past the value)
 * and returns 1; 0 when argv[*i] is not a --set. */
int cf_arg_set(int argc, char **argv, int *i, char **sets, int *nsets, int max_sets);
/* True if arg equals either name. */
int cf_arg_is(const char *arg, const char *long_name, const char *short_name);
/* The arguments `compare` and `gradnorm` share: the experiment file, --set, --seeds, --device, --out. */
typedef struct cf_experiment_args {
  const char *path, *device, *out;
  char *sets[256];
  int nsets, seeds;  /* seeds 0: the file's own */
} cf_experiment_args;
/* Takes argv[*i] (and its value) into a when it is one of those: 1; 0 when it is not; -1 after
 * printing why it is bad (a malformed --seeds). */
int cf_cli_experiment_arg(const char *cmd, int argc, char **argv, int *i, cf_experiment_args *a);

/* argv[i] matched no option of `clformer cmd`: says so (or "option --x needs a value", when it is the
 * last argument and the usage shows it with one) with the usage, and returns 2. Every subcommand's
 * parser ends in it. */
int cf_cli_unexpected(const char *cmd, int argc, char **argv, int i, const char *usage);

/* A training run's events, watched on their way to the display (inner) so that a run a runtime error
 * stopped can be explained after it: the step it stopped in, the device memory it had, its checkpoint. */
typedef struct cf_cli_run_watch {
  cf_train_hooks inner;
  int started, ended, last_step, steps;  /* last_step: the last one finished; ended: at the last step, or diverged */
  double device_bytes;
  char dir[2100], label[200];     /* of the last event */
} cf_cli_run_watch;
cf_train_hooks cf_cli_run_watch_hooks(cf_cli_run_watch *w, cf_train_hooks inner);
/* After a run (of `clformer cmd`) that failed with st: nothing for bad input (exit code 2); else, on
 * stderr, where it stopped, the device's memory for an out-of-memory or out-of-resources error (ctx
 * may be NULL), and the state of the last checkpoint in the run's directory (dir until an event named
 * one) with `resume`, the words that say how to continue ("continue with clformer train --resume D"). */
void cf_cli_run_failed(const char *cmd, const cf_cli_run_watch *w, cf_status st, cf_context *ctx, const char *dir,
                       const char *resume);

#endif
