/* The command-line program's subcommands. Each returns the process exit code:
 * 0 success, 1 a runtime failure, 2 bad input (usage, config, device spec, no OpenCL). */
#ifndef CLFORMER_CLI_H
#define CLFORMER_CLI_H

int cmd_devices(int argc, char **argv);

/* Exit code for a failed status: 2 for the user's input, 1 otherwise. */
int cf_exit_code(int status);
/* True if arg equals either name. */
int cf_arg_is(const char *arg, const char *long_name, const char *short_name);

#endif
