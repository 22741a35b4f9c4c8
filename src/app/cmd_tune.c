/* `clformer tune`: fast GEMM settings for a device (src/gemm/tune.c), stored in the cache directory
 * keyed by device and driver and applied by every later run. Registered in src/app/main.c's
 * command table and declared in src/app/cli.h as int cmd_tune(int argc, char **argv); */
#include <stdlib.h>
#include <string.h>
#include "clformer/check.h"
#include "clformer/gemm.h"
#include "app/cli.h"
#include "clformer/bench.h"
#include "clformer/model.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer tune [--device SPEC] [--config CONFIG] [--set KEY=VALUE ...] [--budget SECONDS]\n"
    "                     [--fraction F] [--no-clblast-tuners] [--show]\n"
    "\n"
    "Finds fast GEMM settings for one device and the config's model shapes: runs CLBlast's tuners from\n"
    "clblast-utils (clblast_tuner_xgemm_direct and clblast_tuner_xgemm on a random part of their search\n"
    "space; the helper kernels around Xgemm: clblast_tuner_transpose_pad, _transpose_fast, _copy_pad,\n"
    "_copy_fast), applies the best parameters, then times every GEMM shape of the model through clformer's\n"
    "own kernels and CLBlast's direct and indirect kernels; sets CLBlast's direct/indirect switch\n"
    "(XGEMM_MIN_INDIRECT_SIZE) from those times and records the faster implementation per shape. The\n"
    "results go to the cache directory (one file per device and driver); every later run applies them\n"
    "automatically ($CLFORMER_GEMM still forces one implementation; CLFORMER_TUNE=off ignores the file).\n"
    "\n"
    "  --device SPEC          auto | P:D | gpu | cpu | accelerator | part of a device or platform name\n"
    "  --config CONFIG        training config whose model shapes are tuned, or an experiment file (its\n"
    "                         base: config; default: the defaults)\n"
    "  --set KEY=VALUE        override a config key (repeatable)\n"
    "  --budget SECONDS       wall-clock budget of the whole run (default 840)\n"
    "  --fraction F           share of the CLBlast GEMM tuners' search space to try (default 0.005; the\n"
    "                         helper kernels' small spaces are searched over a fixed share)\n"
    "  --no-clblast-tuners    skip CLBlast's tuners: only choose per shape\n"
    "  --show                 print the stored results for the device and exit\n";

int cmd_tune(int argc, char **argv) {
  const char *spec = NULL, *config = NULL;
  char *sets[256];
  int nsets = 0, show = 0;
  cf_tune_options to = {.budget_s = 840, .fraction = 0.005, .report = stdout, .progress = stderr};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    char *end;
    if (cf_arg_is(a, "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(a, "--device", "-d") && more) spec = argv[++i];
    else if (cf_arg_is(a, "--config", "-c") && more) config = argv[++i];
    else if (cf_arg_set(argc, argv, &i, sets, &nsets, 256)) continue;
    else if (cf_arg_is(a, "--no-clblast-tuners", NULL)) to.skip_clblast_tuners = 1;
    else if (cf_arg_is(a, "--show", NULL)) show = 1;
    else if (cf_arg_is(a, "--budget", NULL) && more) {
      to.budget_s = strtod(argv[++i], &end);
      if (*end || !(to.budget_s >= 10 && to.budget_s <= 86400)) {
        fprintf(stderr, "clformer tune: --budget wants seconds in [10, 86400], got '%s'\n", argv[i]);
        return 2;
      }
    } else if (cf_arg_is(a, "--fraction", NULL) && more) {
      to.fraction = strtod(argv[++i], &end);
      if (*end || !(to.fraction > 0 && to.fraction <= 1)) {
        fprintf(stderr, "clformer tune: --fraction wants a number in (0, 1], got '%s'\n", argv[i]);
        return 2;
      }
    } else return cf_cli_unexpected("tune", argc, argv, i, usage);
  }
  cf_config cfg;
  int rc = cf_cli_load_model_config(&cfg, config, sets, nsets);
  if (rc) return rc;
  cf_context_options o = {.device_spec = cf_device_spec_resolve(spec, cfg.device), .profiling = 0};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) return cf_exit_code(st);
  if (show) {
    char path[4200], *text = NULL;
    if (!cf_gemm_tune_path(ctx, path, sizeof path)) printf("caching is off: no tuning results\n");
    else {
      int v = cf_verbosity();
      cf_set_verbosity(-1);  /* no file yet is a normal answer, not an error */
      st = cf_read_file(path, &text, NULL);
      cf_set_verbosity(v);
    }
    if (show && text) printf("%s:\n%s", path, text);
    else if (st != CF_OK) {
      cf_clear_error();
      printf("no tuning results for this device and driver (%s); run clformer tune\n", path);
    }
    free(text);
    cf_context_free(ctx);
    return 0;
  }
  cf_gemm_shape shapes[CF_GEMM_MAX_SHAPES];
  int nshapes = cf_model_gemm_shapes(&cfg, shapes);
  to.rows = (size_t)cfg.data.batch_size * (size_t)cfg.data.seq_len;
  to.width = (size_t)cfg.model.d_model;
  st = cf_gemm_tune(ctx, shapes, nshapes, &to);
  cf_context_free(ctx);
  return cf_exit_code(st);
}
