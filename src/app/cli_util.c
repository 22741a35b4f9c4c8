/* Helpers shared by the subcommands. */
#include <errno.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "app/cli.h"
#include "base/base.h"
#include "clformer/base.h"
#include "clformer/runtime.h"

int cf_exit_code(int status) {
  switch (status) {
    case CF_OK: return 0;
    case CF_ERR_NO_DEVICE: case CF_ERR_CONFIG: case CF_ERR_INVALID_ARG: case CF_ERR_DATA:
    case CF_ERR_CHECKPOINT: case CL_PLATFORM_NOT_FOUND_KHR: case CL_DEVICE_NOT_FOUND:
      return 2;
    default: return 1;
  }
}

int cf_arg_is(const char *arg, const char *long_name, const char *short_name) {
  return (long_name && !strcmp(arg, long_name)) || (short_name && !strcmp(arg, short_name));
}

int cf_arg_set(int argc, char **argv, int *i, char **sets, int *nsets, int max_sets) {
  const char *a = argv[*i];
  if (!strncmp(a, "--set=", 6) && *nsets < max_sets) {
    sets[(*nsets)++] = argv[*i] + 6;
    return 1;
  }
  if (!strcmp(a, "--set") && *i + 1 < argc && *nsets < max_sets) {
    sets[(*nsets)++] = argv[++*i];
    return 1;
  }
  return 0;
}

/* Whether the usage text shows `name` followed by a value placeholder ("--device SPEC"). Short
 * forms are looked up by their long name, which is what the usage texts list. */
static int option_takes_value(const char *usage, const char *name) {
  static const char *const aliases[][2] = {{"-c", "--config"}, {"-d", "--device"}, {"-n", "--tokens"}, {"-o", "--out"},
                                           {"-p", "--prompt"}, {"-r", "--repeat"}, {"-t", "--temperature"}};
  for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++)
    if (!strcmp(name, aliases[k][0])) name = aliases[k][1];
  size_t n = strlen(name);
  for (const char *p = strstr(usage, name); p; p = strstr(p + 1, name)) {
    int starts = p == usage || !(isalnum((unsigned char)p[-1]) || p[-1] == '-');
    if (starts && p[n] == ' ' && isupper((unsigned char)p[n + 1])) return 1;
  }
  return 0;
}

int cf_cli_unexpected(const char *cmd, int argc, char **argv, int i, const char *usage) {
  const char *a = argv[i];
  if (i == argc - 1 && a[0] == '-' && option_takes_value(usage, a))
    fprintf(stderr, "clformer %s: option %s needs a value\n\n%s", cmd, a, usage);
  else
    fprintf(stderr, "clformer %s: unexpected argument '%s'\n\n%s", cmd, a, usage);
  return 2;
}

int cf_cli_experiment_arg(const char *cmd, int argc, char **argv, int *i, cf_experiment_args *a) {
  const char *arg = argv[*i];
  int has = *i + 1 < argc;
  if (cf_arg_set(argc, argv, i, a->sets, &a->nsets, (int)(sizeof a->sets / sizeof *a->sets))) return 1;
  if (cf_arg_is(arg, "--seeds", NULL) && has) {
    long v;
    if (!cf_parse_long(argv[++*i], 1, 1000, &v)) {
      fprintf(stderr, "clformer %s: --seeds needs an integer from 1 to 1000\n", cmd);
      return -1;
    }
    a->seeds = (int)v;
  } else if (cf_arg_is(arg, "--device", "-d") && has) a->device = argv[++*i];
  else if (cf_arg_is(arg, "--out", "-o") && has) a->out = argv[++*i];
  else if (arg[0] != '-' && !a->path) a->path = arg;
  else return 0;
  return 1;
}
