/* `clformer bench kernels|gemm|all`: device benchmarks (src/bench.c for the memory-bound kernels,
 * src/bench_gemm.c for GEMM). Registered in src/main.c's command table and declared in src/cli.h as
 *   int cmd_bench(int argc, char **argv);                                                    */
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "clformer/bench.h"
#include "clformer/clformer.h"
#include "internal.h"

int cmd_bench(int argc, char **argv);
/* src/bench.c: the memory-bound kernels; `only` filters kernel names by substring (NULL: all). */
cf_status cf_bench_kernels(cf_context *ctx, int repeat, const char *only, FILE *json);

static const char *usage =
    "usage: clformer bench kernels|gemm|all [--device SPEC] [--config CONFIG] [--set KEY=VALUE ...]\n"
    "                      [--json FILE] [--repeat N] [--only NAME] [--vs-blas]\n"
    "\n"
    "Times the compute kernels on one device, after warm-up, as the median of repeated runs.\n"
    "  kernels  the device's copy bandwidth (clEnqueueCopyBuffer of 64 MiB, bytes read + written), then\n"
    "           every memory-bound kernel (LayerNorm, activations, bias, dropout, residual, softmax, Adam,\n"
    "           norms) at N = B*T = 4096 rows, T = 128, NH = 8, C = 256, 512, 1024: microseconds, GB/s\n"
    "           (the bytes each op must read and write, counted by hand) and % of the copy bandwidth;\n"
    "           the attention forward and backward in GFLOP/s\n"
    "  gemm     every GEMM shape the config's model issues, with each implementation\n"
    "  all      both\n"
    "\n"
    "  --device SPEC     auto | P:D | gpu | cpu | accelerator | part of a device or platform name\n"
    "                    (default: $CLFORMER_DEVICE, else the config's device, else auto)\n"
    "  --config CONFIG   training config whose model shapes `gemm` uses (default: the defaults)\n"
    "  --set KEY=VALUE   override a config key (repeatable)\n"
    "  --json FILE       also write the results as one JSON object to FILE ('-' for stdout):\n"
    "                    {clformer_version, device: {name, platform, platform_version, driver, type,\n"
    "                    compute_units}, kernels: {copy, method, results: [{kernel, N, C, T, NH, bytes,\n"
    "                    flops, us, gbs, pct_copy, gflops}]}, gemm: {...}}\n"
    "  --repeat N        timed samples per kernel, the median reported (default 20)\n"
    "  --only NAME       `kernels`: only the kernels whose name contains NAME\n"
    "  --vs-blas         `gemm`: also time OpenBLAS on the host\n";

int cmd_bench(int argc, char **argv) {
  const char *what = NULL, *spec = NULL, *config = NULL, *json_path = NULL, *only = NULL;
  char *sets[256];
  int nsets = 0, repeat = 20, vs_blas = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (cf_arg_is(a, "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(a, "--device", "-d") && more) spec = argv[++i];
    else if (cf_arg_is(a, "--config", "-c") && more) config = argv[++i];
    else if (cf_arg_is(a, "--set", NULL) && more && nsets < 256) sets[nsets++] = argv[++i];
    else if (cf_arg_is(a, "--json", NULL) && more) json_path = argv[++i];
    else if (cf_arg_is(a, "--only", NULL) && more) only = argv[++i];
    else if (cf_arg_is(a, "--vs-blas", NULL)) vs_blas = 1;
    else if (cf_arg_is(a, "--repeat", "-r") && more) {
      char *end;
      long r = strtol(argv[++i], &end, 10);
      if (*end || r < 1 || r > 100000) {
        fprintf(stderr, "clformer bench: --repeat wants a positive integer, got '%s'\n", argv[i]);
        return 2;
      }
      repeat = (int)r;
    } else if (a[0] != '-' && !what && (!strcmp(a, "kernels") || !strcmp(a, "gemm") || !strcmp(a, "all")))
      what = a;
    else { fprintf(stderr, "clformer bench: unexpected argument '%s'\n\n%s", a, usage); return 2; }
  }
  if (!what) { fprintf(stderr, "clformer bench: say what to time: kernels, gemm or all\n\n%s", usage); return 2; }

  /* Without a config only the model's shapes matter: name a training file so validation passes. */
  char no_data[] = "data.train=(none: bench)";
  if (!config && nsets < 256) {
    memmove(sets + 1, sets, sizeof *sets * (size_t)nsets);
    sets[0] = no_data;
    nsets++;
  }
  cf_config cfg;
  int rc = cf_cli_load_config(&cfg, config, sets, nsets);
  if (rc) return rc;
  cf_context_options o = {.device_spec = cf_device_spec_resolve(spec, cfg.device), .profiling = 1};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) return cf_exit_code(st);

  FILE *json = NULL;
  if (json_path) {
    json = strcmp(json_path, "-") ? fopen(json_path, "w") : stdout;
    if (!json) {
      perror(json_path);
      cf_context_free(ctx);
      return 1;
    }
    const cf_device_info *d = cf_context_device(ctx);
    const char *keys[] = {"name", "platform", "platform_version", "driver", "type"};
    const char *vals[] = {d->name, d->platform_name, d->platform_version, d->driver_version,
                          cf_device_type_str(d->type)};
    fprintf(json, "{\n  \"clformer_version\": \"%s\",\n  \"device\": {", CLFORMER_VERSION);
    for (int k = 0; k < 5; k++) {
      fprintf(json, "\"%s\": \"", keys[k]);
      for (const char *c = vals[k]; *c; c++)  /* drivers' strings, JSON-escaped */
        if (*c == '"' || *c == '\\') fprintf(json, "\\%c", *c);
        else if ((unsigned char)*c >= 0x20) fputc(*c, json);
      fputs("\", ", json);
    }
    fprintf(json, "\"compute_units\": %u},\n  ", d->compute_units);
  }
  int kernels = strcmp(what, "gemm") != 0, gemm = strcmp(what, "kernels") != 0;
  if (kernels) st = cf_bench_kernels(ctx, repeat, only, json);
  if (st == CF_OK && gemm) {
    if (kernels) printf("\n");
    if (json) fprintf(json, "%s\"gemm\": ", kernels ? ",\n  " : "");
    st = cf_bench_gemm(ctx, &cfg, vs_blas, json);
  }
  if (json) {
    fprintf(json, "\n}\n");
    if (json != stdout) fclose(json);
  }
  cf_context_free(ctx);
  return cf_exit_code(st);
}
