/* `clformer gradnorm`: the command line over cf_gradnorm (src/experiments/gradnorm.c). */
#include <stdio.h>
#include <unistd.h>
#include "app/cli.h"
#include "clformer/experiments.h"

static const char *usage =
    "usage: clformer gradnorm CONFIG [--seeds N] [--set KEY=VALUE ...] [--device SPEC] [--out DIR]\n"
    "\n"
    "Gradient norms at initialization (no update made) on one fixed batch, per layer, for each placement\n"
    "and depth, over N random initialisations. Writes OUT/gradnorm.md (tables), OUT/gradnorm.json and\n"
    "OUT/gradnorm.svg, and prints the fitted exponent of the last layer's W2 gradient norm against depth.\n"
    "The file holds:\n"
    "  base:        a model config (data, model, seed; see `clformer check --keys`)\n"
    "  depths:      list of layer counts, e.g. [6, 12, 18, 24]\n"
    "  placements:  list of post and/or pre (default [post, pre])\n"
    "  seeds:       initialisations per (placement, depth) (default 3)\n"
    "  out:         output directory (default runs/<config name>)\n"
    "\n"
    "  --seeds N       initialisations (overrides the file's seeds)\n"
    "  --set KEY=VALUE override a key of the base (repeatable; model.layers, and an encoder-decoder's model.encoder_layers,\n"
    "                  are the depths' to set)\n"
    "  --device SPEC   OpenCL device (default: $CLFORMER_DEVICE, then the base config's, then auto)\n"
    "  --out DIR       output directory (overrides the file's out)\n";

/* One line per finished initialisation, rewritten in place on a terminal. */
static void show_progress(void *user, int done, int total, const char *what, double elapsed_s, double eta_s) {
  int tty = *(const int *)user;
  printf("%s[%d/%d] %s (%.0f s, ETA %.0f s)%s", tty ? "\r\033[K" : "", done, total, what, elapsed_s, eta_s,
         tty && done < total ? "" : "\n");
  fflush(stdout);
}

int cmd_gradnorm(int argc, char **argv) {
  cf_experiment_args ea = {0};
  for (int i = 1; i < argc; i++) {
    int taken = cf_cli_experiment_arg("gradnorm", argc, argv, &i, &ea);
    if (taken < 0) return 2;
    if (taken) continue;
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    return cf_cli_unexpected("gradnorm", argc, argv, i, usage);
  }
  if (!ea.path) { fprintf(stderr, "clformer gradnorm: a CONFIG is required\n\n%s", usage); return 2; }
  int tty = isatty(STDOUT_FILENO);
  cf_gradnorm_options o = {.path = ea.path, .sets = ea.sets, .nsets = ea.nsets, .seeds = ea.seeds,
                           .device = ea.device, .out = ea.out, .report = stdout, .progress = show_progress,
                           .user = &tty};
  return cf_exit_code(cf_gradnorm(&o));
}
