/* The command-line program's subcommands. Each returns the process exit code:
 * 0 success, 1 a runtime failure, 2 bad input (usage, config, device spec, no OpenCL). */
#ifndef CLFORMER_CLI_H
#define CLFORMER_CLI_H

int cmd_devices(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_gradnorm(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);

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

/* argv[i] matched no option of `clformer cmd`: says so (or that the option needs a value, when it
 * is the last argument and the usage shows it with one) with the usage, and returns 2. */
int cf_cli_unexpected(const char *cmd, int argc, char **argv, int i, const char *usage);

#endif
