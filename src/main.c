/* clformer: the command-line program. Dispatches to the subcommands in src/cmd_*.c. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "clformer/clformer.h"

static const char *usage =
    "usage: clformer COMMAND [options]    (clformer COMMAND --help for its options)\n"
    "\n"
    "A portable OpenCL Transformer trainer (Post-LN and Pre-LN, after Xiong et al. 2020).\n"
    "\n"
    "commands:\n"
    "  devices    list OpenCL devices and show which one a --device spec selects\n"
    "\n"
    "environment:\n"
    "  CLFORMER_DEVICE       device spec when --device is not given (auto, P:D, gpu, cpu, accelerator, name)\n"
    "  CLFORMER_CACHE_DIR    kernel binary cache (default $XDG_CACHE_HOME/clformer or ~/.cache/clformer)\n"
    "  CLFORMER_CACHE=off    do not cache compiled kernels\n"
    "  CLFORMER_KERNEL_DIR   read kernels from this directory (a cl/ source tree) instead of the embedded copy\n"
    "  CLFORMER_VERBOSE      0 errors only, 1 notes (default), 2 debug\n";

static const struct { const char *name; int (*run)(int, char **); } commands[] = {
    {"devices", cmd_devices},
    {"check", cmd_check},
    {"train", cmd_train},
    {"sample", cmd_sample},
    {"selftest", cmd_selftest},
};

int main(int argc, char **argv) {
  if (argc < 2 || cf_arg_is(argv[1], "--help", "-h") || !strcmp(argv[1], "help")) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (cf_arg_is(argv[1], "--version", "-V")) {
    printf("clformer %s\n", CLFORMER_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "clformer: unknown command '%s'\n\n%s", argv[1], usage);
  return 2;
}
