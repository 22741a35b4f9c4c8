/* clformer: the command-line program. Dispatches to the subcommands in src/cmd_*.c. */
#include <stdio.h>
#include <string.h>
#include "app/cli.h"
#include "clformer/dist.h"

static const char *usage =
    "usage: clformer COMMAND [options]    (clformer COMMAND --help for its options)\n"
    "\n"
    "A portable OpenCL Transformer trainer (Post-LN and Pre-LN, after Xiong et al. 2020).\n"
    "\n"
    "commands:\n"
    "%s"
    "\n"
    "environment:\n"
    "  CLFORMER_DEVICE       device spec when --device is not given (auto, P:D, gpu, cpu, accelerator, name)\n"
    "  CLFORMER_CACHE_DIR    kernel binary cache (default $XDG_CACHE_HOME/clformer or ~/.cache/clformer)\n"
    "  CLFORMER_CACHE=off    do not cache compiled kernels (nor read or write GEMM tuning results)\n"
    "  CLFORMER_CACHE_MAX_MB size the cache is pruned to, least recently used first (default 256)\n"
    "  CLFORMER_KERNEL_DIR   read kernels from this directory (a cl/ source tree) instead of the embedded copy\n"
    "  CLFORMER_KERNEL_SHAPES auto (default), cpu or gpu: the kernels' launch shapes, whatever the device type\n"
    "  CLFORMER_GEMM         auto (default), own or clblast: force one GEMM implementation\n"
    "  CLFORMER_TUNE=off     ignore the stored `clformer tune` results\n"
    "  CLFORMER_PYTHON       the Python with torch for `bench step --vs-torch` (default /usr/bin/python3)\n"
    "  CLFORMER_VERBOSE      0 errors only, 1 notes (default), 2 debug\n";

static const struct {
  const char *name;
  int (*run)(int, char **);
  const char *help;
} commands[] = {
    {"compare", cmd_compare, "the warm-up comparison: train variants of a config; summary.md, summary.json, curves.svg"},
    {"gradnorm", cmd_gradnorm, "gradient norms at initialization per layer and depth (Theorem 1); table and gradnorm.svg"},
    {"train", cmd_train, "train a Post-LN or Pre-LN Transformer language model from a YAML config"},
    {"sample", cmd_sample, "generate text from a trained run"},
    {"translate", cmd_translate, "translate standard input, a sentence a line, with a trained encoder-decoder"},
    {"eval-bleu", cmd_eval_bleu, "BLEU of a trained encoder-decoder on its config's test (or validation) set"},
    {"check", cmd_check, "validate a training config and print it fully resolved"},
    {"devices", cmd_devices, "list OpenCL devices and show which one a --device spec selects"},
    {"selftest", cmd_selftest, "check every kernel on a device against double-precision references"},
    {"bench", cmd_bench, "measure GEMM, kernels and a training step on a device (JSON to compare devices)"},
    {"tune", cmd_tune, "find fast GEMM settings for a device; stored per device and driver, applied by every run"},
    {"bleu", cmd_bleu, "corpus BLEU of hypotheses (stdin) against reference files, as sacreBLEU computes it"},
    {"bpe", cmd_bpe, "byte-pair encoding: learn a subword vocabulary from text, encode text to ids, decode"},
};

static void print_usage(FILE *f) {
  char list[2048] = "";
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, usage, list);
}

/* Exit codes every rank of a job reaches together (a divergence, a stop by signal, both agreed each
 * step); any other failure is agreed only when cf_dist_agree said so, else the job is aborted. */
static int ends_together(int rc) { return rc == 0 || rc == 3 || rc == 130 || rc == 143 || cf_dist_failure_agreed(); }

static int dispatch(int argc, char **argv);

int main(int argc, char **argv) {
  /* under mpirun: one rank of a data-parallel job (clformer/dist.h); else the world of one */
  if (cf_dist_init(&argc, &argv) != CF_OK) return 2;
  int rc = dispatch(argc, argv);
  cf_dist_finalize(!ends_together(rc), rc);
  return rc;
}

/* Under mpirun only `train`, `compare` (each variant data-parallel in turn) and `bench step` run
 * data-parallel (cmd_bench.c refuses the other benchmarks); any other command would run once per
 * rank, each writing the same files or timing against the others, so every rank refuses it (agreed,
 * so the job ends with exit 2 rather than an abort) and rank 0 says why. */
static int one_process_only(const char *cmd) {
  const cf_world *w = cf_dist_world();
  if (w->size <= 1 || !strcmp(cmd, "train") || !strcmp(cmd, "compare") || !strcmp(cmd, "bench")) return 0;
  if (w->rank == 0)
    fprintf(stderr, "clformer %s: runs as one process; under mpirun (%d ranks) only `train`, `compare` and `bench "
            "step` run data-parallel\n", cmd, w->size);
  cf_dist_agree(CF_ERR_CONFIG);
  return 1;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2 || cf_arg_is(argv[1], "--help", "-h") || !strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (cf_arg_is(argv[1], "--version", "-V")) {
    printf("clformer %s\n", CLFORMER_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (!strcmp(argv[1], commands[i].name)) return one_process_only(argv[1]) ? 2 : commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "clformer: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
