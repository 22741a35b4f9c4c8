/* `clformer bench kernels|gemm|step|all`: device benchmarks (bench/bench.c for the memory-bound
 * kernels, bench/bench_gemm.c for GEMM, bench/bench_step.c for a training step). Registered in
 * app/main.c's command table and declared in app/cli.h as int cmd_bench(int argc, char **argv);
 *
 * The JSON file (--json FILE), schema 1. One object; numbers are plain JSON numbers, null where a
 * value does not exist; times in ms or us as the key says, rates in GB/s, GFLOP/s, tokens/s.
 * Keys are only ever added, never renamed, within a schema version. Written at the end through Jansson
 * (base/json.c's layout); after a failure it holds what was measured until then (the exit status says so).
 *   schema                 1
 *   clformer_version       "0.1.0"
 *   host                   {"cpu": /proc/cpuinfo's model name, "cpus": online CPUs, "core_round_trip_ns":
 *                           a value passed between the first two CPUs the process may use and back (gemm and
 *                           all on a CPU device, when it could be measured; else null)}
 *   device                 {"name", "platform", "platform_version", "driver", "type" ("CPU", "GPU", ...),
 *                           "compute_units", "kernel_shapes" ("cpu" or "gpu": see CLFORMER_KERNEL_SHAPES)}
 *   kernels                (kernels, all) {"copy": {"bytes", "gbs", "gbs_event" (null when the copy's
 *                           profiling event read under 100 ns: no bandwidth), "method"}, "method",
 *                           "results": [{"kernel", "N", "C", "T", "NH", "bytes", "flops", "us", "gbs",
 *                           "pct_copy", "gflops"}]}
 *   gemm                   (gemm, all) {"device", "peak_gflops", "openblas": {"core", "threads"} | null,
 *                           "clblast_tuning": {"applied", "file"} | null, "repeat", "shapes": [{"name", "op", "M", "N",
 *                           "K", "batch", "tri" (the causal triangle skipped, cf_gemm_tri_name), "flops"
 *                           (cf_gemm_shape_flops), "per_step" (calls in one training step),
 *                           "clblast"|"own"|"openblas"|"clblast_default": {"median", "min", "max"} GFLOP/s | null
 *                           ("clblast" as tuned when clblast_tuning is set; "clblast_default": CLBlast's own
 *                           parameters, timed before the tuned ones were applied; null unless CLBlast took tuned
 *                           parameters from the file and this run could time its defaults first),
 *                           "own_vs_clblast", "own_vs_openblas", "peak_vs_clblast" (FMA peak / clblast)}],
 *                           "median": {"clblast", "own", "openblas", "clblast_default", "own_vs_clblast",
 *                           "own_vs_openblas", "peak_vs_clblast", "tuned_vs_default"} over the shapes (GFLOP/s, and
 *                           the medians of the per-shape ratios), "per_step": {"gflop", "clblast_ms", "own_ms",
 *                           "openblas_ms", "clblast_default_ms", "own_vs_clblast", "own_vs_openblas"}: one step's
 *                           products, each shape's median time times its calls (ratios of times: above 1, own is
 *                           faster); absent implementations null}
 *   step                   (step, all) a training step (forward, backward, grad norm, Adam) of the config:
 *     model                {"arch" ("decoder" or "encoder_decoder"), "norm", "layers", "encoder_layers" (0 for
 *                           a decoder), "d_model", "heads", "d_ff", "vocab", "seq_len", "batch_size",
 *                           "params"}; an encoder-decoder's seq_len and batch_size are its largest batch
 *                           (data.max_len, and data.max_tokens in sentences of it), every sentence full
 *     gemm                 the GEMM implementation in force: "own" or "clblast" when forced ($CLFORMER_GEMM),
 *                           "auto" when each product class takes what was measured for it (bench step prints
 *                           the verdicts)
 *     warmup, steps        untimed steps, then timed steps
 *     step_ms              {"median", "min", "max"} wall clock per step (enqueue to clFinish)
 *     tokens_per_s         batch_size * seq_len / median step
 *     flops_per_step       matrix-product FLOPs (cf_model_gemm_flops): 6 N P + 6 L B T (T + 1) C (the
 *                           attention's causal triangles), P = L (4 C^2 + 2 C F) + V C (fused attention: no
 *                           6 L B T (T + 1) C); an encoder-decoder 6 N P with
 *                           P = (L + encoder layers)(4 C^2 + 2 C F) + V C + 4 L C^2 (cross-attention)
 *     gflops               flops_per_step / median step
 *     peak_device_bytes    the most device memory clformer's buffers held around the steps
 *     memory_lower_bound_bytes  parameters + gradients + optimizer state + saved activations (the
 *                          model's plan): what a step without recomputation cannot do with less
 *     startup              {"context_s", "model_s", "first_step_s", "total_s", "cache_hits", "cache_misses"}
 *                          seconds from the command's start (total_s: to the end of the first step);
 *                          cache_misses 0 means a warm kernel cache. null when the step was not run first.
 *     breakdown            {"steps", "step_ms", "device_ms", "gemm_ms", "unavailable", "fma_peak_gflops",
 *                           "gemm_fraction_of_peak", "ops": [{"name", "calls", "ms", "share"}]}: OpenCL
 *                           profiling events per kernel name, per step
 *                           (calls and ms are means over `steps` profiled steps; share = ms / device_ms),
 *                           largest first; GEMM kernels are those named gemm* (ours) or clblast* (CLBlast's
 *                           last kernel). unavailable: null, or why the device's events measure nothing
 *                           (rusticl's read about 1 ns each: cf_profile_implausible); then device_ms and
 *                           gemm_ms are null and ops is empty. fma_peak_gflops: the device's fp32 FMA peak
 *                           measured right after (as `bench gemm` does; 0 when there is no breakdown);
 *                           gemm_fraction_of_peak: flops_per_step / gemm_ms over it (null without it);
 *                           "products": [{"names", "signature", "calls", "flops", "ms", "gflops",
 *                           "fraction_of_peak"}]: the model's products by shape (cf_model_gemm_shapes
 *                           grouped by cf_gemm_signature), per step: calls and FLOPs counted, ms the
 *                           device time of the launches tagged with the signature (gflops and
 *                           fraction_of_peak null where none ran); only where GEMM launches of no model
 *                           shape ran, a last row "other" (signature "-", calls counting launches, flops 0,
 *                           gflops and fraction_of_peak null) holds them; empty when unavailable
 *     torch                null, or with --vs-torch {"setup": {"torch_version", "threads", "blas",
 *                           "openblas_core", "params", ...}, "steps", "rounds", "step_ms": {...},
 *                           "tokens_per_s", "clformer_vs_torch" (torch's median step / ours: > 1 means
 *                           clformer is faster)}
 *   world                  (step under mpirun, in place of step: bench/bench_world.c) {"ranks", "tokens_per_rank"
 *                           (each rank's batch_size * seq_len), "warmup", "steps", "alone": {"step_ms", "tokens_per_s"}
 *                           (rank 0 alone, the others idle), "per_rank": [{"rank", "host_device", "step_ms",
 *                           "tokens_per_s", "exchange_ms" (median per step: what the step waits after its backward for the overlapped exchange),
 *                           "mpi_ms" (of which inside MPI, waiting for the other ranks included)}], "tokens_per_s"
 *                           (ranks * tokens_per_rank / the slowest rank's median step), "efficiency" (tokens_per_s /
 *                           (ranks * alone's))}
 *   transfers              (step, all; bench/bench_transfer.c) {"in_force" ("map" or "copy": the way the step's
 *                           uploads go), "host_unified", "upload_kib" (a step's uploads), "upload": {"map", "copy"}:
 *                           {"host_ms", "device_ms", "commands", "step_ms", "unavailable"} per step, "checkpoint_mib"
 *                           (parameters and optimizer moments), "checkpoint_readout_ms": {"map", "copy"}:
 *                           {"median", "min", "max"}}
 * tools/compare_bench.py renders several such files as one Markdown table. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "clformer/check.h"
#include "clformer/gemm.h"
#include "app/cli.h"
#include "bench/host_probe.h"
#include "clformer/bench.h"
#include "clformer/dist.h"
#include "runtime/runtime.h"

int cmd_bench(int argc, char **argv);
/* bench/bench.c: the memory-bound kernels; `only` filters kernel names by substring (NULL: all); adds
 * "kernels" to report (NULL: none). */
cf_status cf_bench_kernels(cf_context *ctx, int repeat, const char *only, FILE *tables, json_t *report);

static const char *usage =
    "usage: clformer bench kernels|gemm|step|all [--device SPEC] [--config CONFIG] [--set KEY=VALUE ...]\n"
    "                      [--json FILE] [--repeat N] [--only NAMES] [--vs-blas]\n"
    "                      [--steps N] [--warmup N] [--vs-torch] [--torch-threads N] [--torch-script PATH]\n"
    "\n"
    "Times the compute kernels on one device, after warm-up, as the median of repeated runs.\n"
    "  kernels  the device's copy bandwidth (clEnqueueCopyBuffer of 64 MiB, bytes read + written), then\n"
    "           every memory-bound kernel (LayerNorm, activations, bias, dropout, residual, softmax, Adam,\n"
    "           norms) at N = B*T = 4096 rows, T = 128, NH = 8, C = 256, 512, 1024: microseconds, GB/s\n"
    "           (the bytes each op must read and write, counted by hand) and % of the copy bandwidth;\n"
    "           the attention forward and backward in GFLOP/s\n"
    "  gemm     every GEMM shape the config's model issues, with each implementation (and CLBlast with\n"
    "           its default parameters first, when `clformer tune` stored tuned ones)\n"
    "  step     a full training step of the config's model: median [min, max] step time, tokens/s,\n"
    "           GFLOP/s of its matrix products, the start-up time (command start to the end of the first\n"
    "           step) and a per-kernel breakdown from OpenCL profiling events; under mpirun, rank 0\n"
    "           alone, then every rank data-parallel (its own batch, gradients summed each step): each\n"
    "           rank's step time, tokens/s and time in the exchange, the world's tokens/s and the scaling\n"
    "           efficiency against rank 0 alone\n"
    "  all      gemm, kernels and step\n"
    "\n"
    "  --device SPEC     auto | P:D | gpu | cpu | accelerator | part of a device or platform name\n"
    "                    (default: $CLFORMER_DEVICE, else the config's device, else auto)\n"
    "  --config CONFIG   training config whose model `gemm` and `step` use, or an experiment file\n"
    "                    (its base: config; default: the defaults)\n"
    "  --set KEY=VALUE   override a config key (repeatable)\n"
    "  --json FILE       also write the results as one JSON object to FILE ('-' for stdout; the tables then\n"
    "                    go to stderr): {schema, clformer_version, host, device: {name, platform,\n"
    "                    platform_version, driver, type, compute_units}, kernels, gemm, step (or world under\n"
    "                    mpirun), transfers}; the fields are\n"
    "                    documented at the top of src/app/cmd_bench.c. tools/compare_bench.py tabulates files.\n"
    "  --repeat N        timed samples, the median reported: per kernel (`kernels`, default 20), per\n"
    "                    GEMM shape and implementation (`gemm`, default 11)\n"
    "  --only NAMES      `kernels`: only the kernels whose name contains one of NAMES (comma-separated)\n"
    "  --vs-blas         `gemm`: also time OpenBLAS on the host\n"
    "  --steps N         `step`: timed steps (default 20, at least 10)\n"
    "  --warmup N        `step`: untimed steps first (default 3, at least 1)\n"
    "  --vs-torch        `step`: also run tools/torch_step.py (PyTorch on the host CPU, the same model and\n"
    "                    config), its steps interleaved with ours, and print the speed ratio; torch gets\n"
    "                    its best settings (allocator, OpenBLAS kernel, threads: see tools/torch_step.py)\n"
    "  --torch-threads N `--vs-torch`: torch's threads, OpenBLAS's left at its default (default: the\n"
    "                    fastest pair of torch and OpenBLAS thread counts in {1, cores})\n"
    "  --torch-script P  `--vs-torch`: path of torch_step.py (default: found beside the executable)\n"
    "environment: CLFORMER_PYTHON, the Python with torch (default /usr/bin/python3, else python3)\n";

static int parse_int(const char *what, const char *s, int lo, int hi, int *out) {
  char *end;
  long r = strtol(s, &end, 10);
  if (!*s || *end || r < lo || r > hi) {
    fprintf(stderr, "clformer bench: %s wants an integer in [%d, %d], got '%s'\n", what, lo, hi, s);
    return 0;
  }
  *out = (int)r;
  return 1;
}

static void host_cpu(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10)) {
      char *v = strchr(line, ':');
      if (v) {
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        snprintf(out, n, "%s", v);
      }
      break;
    }
  fclose(f);
}

/* The JSON report's schema, version, host and device (see the top of this file); the benchmarks add
 * their own members. NULL when out of memory. */
static json_t *report_head(cf_context *ctx, double round_trip) {
  const cf_device_info *d = cf_context_device(ctx);
  char cpu[256];
  host_cpu(cpu, sizeof cpu);
  json_t *host = json_pack("{s:o, s:I, s:o}", "cpu", cf_json_str(cpu), "cpus", (json_int_t)sysconf(_SC_NPROCESSORS_ONLN),
                           "core_round_trip_ns", round_trip > 0 ? json_integer(llround(round_trip)) : json_null());
  json_t *dev = json_pack("{s:o, s:o, s:o, s:o, s:s, s:I, s:s}", "name", cf_json_str(d->name), "platform",
                          cf_json_str(d->platform_name), "platform_version", cf_json_str(d->platform_version), "driver",
                          cf_json_str(d->driver_version), "type", cf_device_type_str(d->type), "compute_units",
                          (json_int_t)d->compute_units, "kernel_shapes", cf_context_cpu_shapes(ctx) ? "cpu" : "gpu");
  return json_pack("{s:i, s:s, s:o, s:o}", "schema", 1, "clformer_version", CLFORMER_VERSION, "host", host, "device",
                   dev);
}

/* What the command line asked for. */
typedef struct bench_args {
  const char *what, *spec, *config, *json_path, *only;
  char *sets[256];
  int nsets, repeat, vs_blas;  /* repeat 0: each benchmark's own default */
  cf_bench_step_options so;
} bench_args;

/* The options into a; -1 to go on, else the exit status (0 after --help). */
static int parse_args(int argc, char **argv, bench_args *a) {
  cf_bench_step_options so = {20, 3, 3, 0, 0, NULL, 0, 0};
  a->so = so;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    int more = i + 1 < argc;
    if (cf_arg_is(s, "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(s, "--device", "-d") && more) a->spec = argv[++i];
    else if (cf_arg_is(s, "--config", "-c") && more) a->config = argv[++i];
    else if (cf_arg_is(s, "--set", NULL) && more && a->nsets < 255) a->sets[a->nsets++] = argv[++i];
    else if (cf_arg_is(s, "--json", NULL) && more) a->json_path = argv[++i];
    else if (cf_arg_is(s, "--only", NULL) && more) a->only = argv[++i];
    else if (cf_arg_is(s, "--vs-blas", NULL)) a->vs_blas = 1;
    else if (cf_arg_is(s, "--vs-torch", NULL)) a->so.vs_torch = 1;
    else if (cf_arg_is(s, "--torch-script", NULL) && more) a->so.torch_script = argv[++i];
    else if (cf_arg_is(s, "--repeat", "-r") && more) { if (!parse_int("--repeat", argv[++i], 1, 100000, &a->repeat)) return 2; }
    else if (cf_arg_is(s, "--steps", NULL) && more) { if (!parse_int("--steps", argv[++i], 10, 10000, &a->so.steps)) return 2; }
    else if (cf_arg_is(s, "--warmup", NULL) && more) { if (!parse_int("--warmup", argv[++i], 1, 10000, &a->so.warmup)) return 2; }
    else if (cf_arg_is(s, "--torch-threads", NULL) && more) {
      if (!parse_int("--torch-threads", argv[++i], 1, 4096, &a->so.torch_threads)) return 2;
    } else if (s[0] != '-' && !a->what &&
               (!strcmp(s, "kernels") || !strcmp(s, "gemm") || !strcmp(s, "step") || !strcmp(s, "all")))
      a->what = s;
    else if (s[0] != '-' && !a->what) {
      fprintf(stderr, "clformer bench: unknown benchmark '%s': kernels, gemm, step or all (see --help)\n", s);
      return 2;
    } else return cf_cli_unexpected("bench", argc, argv, i, usage);
  }
  if (!a->what) { fprintf(stderr, "clformer bench: say what to time: kernels, gemm, step or all\n\n%s", usage); return 2; }
  return -1;
}

/* The --json file, opened before anything is measured so a bad path fails first; NULL (and a
 * message) when it cannot be opened. */
static FILE *open_json(const char *path) {
  FILE *json = strcmp(path, "-") ? fopen(path, "w") : stdout;
  if (!json) fprintf(stderr, "clformer bench: --json %s: %s\n", path, strerror(errno));
  return json;
}

/* Which benchmarks run. */
typedef struct bench_plan {
  int kernels, gemm, step;
} bench_plan;

/* The notes before the tables: the host's core-to-core round trip (measured for gemm on a CPU
 * device, where our own GEMM runs on the host's cores and how far apart they are explains much of
 * the drift between runs; else -1), and kernel shapes that are not the device's own. Returns the
 * round trip. */
static double print_notes(cf_context *ctx, const bench_plan *p, FILE *tables) {
  int device_cpu = (cf_context_device(ctx)->type & CL_DEVICE_TYPE_CPU) != 0;
  int probe_cpus[2] = {0, 0};
  double round_trip = p->gemm && device_cpu ? cf_host_core_round_trip_ns(probe_cpus) : -1;
  if (round_trip > 0)
    fprintf(tables,
            "host: core-to-core round trip %.0f ns between CPUs %d and %d (what data written on one costs to read on "
            "the other; in a VM it changes with where the vCPUs are placed)\n", round_trip, probe_cpus[0],
            probe_cpus[1]);
  if (cf_context_cpu_shapes(ctx) != device_cpu)
    fprintf(tables, "note: the kernels run their %s shapes (CLFORMER_KERNEL_SHAPES), not "
            "this device's own: figures are not the device's best\n", device_cpu ? "GPU" : "CPU");
  return round_trip;
}

/* The benchmarks of the plan, each stopping the rest on failure. gemm first: it times CLBlast with
 * its default parameters before any GEMM of the process reads the tuning file (the attention in
 * `kernels` runs GEMMs). */
static cf_status run_plan(cf_context *ctx, const bench_plan *p, const cf_config *cfg, const bench_args *a,
                          FILE *tables, json_t *report) {
  if (p->gemm) CF_TRY(cf_bench_gemm(ctx, cfg, a->vs_blas, a->repeat, tables, report));
  if (p->kernels) {
    if (p->gemm) fputc('\n', tables);
    CF_TRY(cf_bench_kernels(ctx, a->repeat, a->only, tables, report));
  }
  if (p->step) {
    if (p->kernels || p->gemm) fputc('\n', tables);
    CF_TRY(cf_bench_step(ctx, cfg, &a->so, tables, report));
  }
  return CF_OK;
}

/* Writes what was measured, also after a failure (st), and closes the file; the status to exit with. */
static cf_status write_report(json_t *report, FILE *json, const char *json_path, cf_status st) {
  cf_status ws = report ? cf_json_write(report, json, json == stdout ? "the JSON report" : json_path) : CF_OK;
  if (json != stdout && fclose(json) && ws == CF_OK) ws = CF_FAIL(CF_ERR_IO, "cannot write %s", json_path);
  json_decref(report);
  return st == CF_OK ? ws : st;
}

/* Under mpirun: `bench step` data-parallel (bench_world.c), every rank on its device, rank 0 alone
 * printing and writing --json; anything else times one device, so every rank refuses it (agreed). */
static int run_world(bench_args *a, const cf_config *cfg) {
  const cf_world *w = cf_dist_world();
  if (strcmp(a->what, "step") || a->so.vs_torch) {
    if (w->rank == 0)
      fprintf(stderr, "clformer bench: under mpirun (%d ranks) only `bench step` runs (data parallel, without "
              "--vs-torch); %s times one device: run it without mpirun\n", w->size,
              a->so.vs_torch ? "--vs-torch" : a->what);
    cf_dist_agree(CF_ERR_CONFIG);
    return 2;
  }
  FILE *json = NULL;
  if (w->rank == 0 && a->json_path && !(json = open_json(a->json_path))) return cf_exit_code(cf_dist_agree(CF_ERR_IO));
  cf_context *ctx;
  cf_status st = cf_dist_agree(CF_OK);
  if (st == CF_OK) st = cf_cli_rank_context(cf_device_spec_resolve(a->spec, cfg->device), 0, 0, &ctx);
  if (st != CF_OK) {
    if (json && json != stdout) fclose(json);
    return cf_exit_code(st);
  }
  json_t *report = json ? report_head(ctx, -1) : NULL;
  if (json && !report) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the JSON report");
  if (st == CF_OK) st = cf_bench_step_world(ctx, cfg, &a->so, json == stdout ? stderr : stdout, report);
  if (json) st = write_report(report, json, a->json_path, st);
  cf_context_free(ctx);
  return cf_exit_code(st);
}

int cmd_bench(int argc, char **argv) {
  double t_start = cf_now();
  bench_args a;
  memset(&a, 0, sizeof a);
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  cf_config cfg;
  rc = cf_cli_load_model_config(&cfg, a.config, a.sets, a.nsets);
  if (rc) return rc;
  if (cf_dist_world()->size > 1) return run_world(&a, &cfg);
  FILE *json = a.json_path ? open_json(a.json_path) : NULL;
  if (a.json_path && !json) return 2;
  cf_context_options o = {.device_spec = cf_device_spec_resolve(a.spec, cfg.device), .profiling = 1};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) {
    if (json && json != stdout) fclose(json);
    return cf_exit_code(st);
  }
  a.so.t_context = cf_now();
  int all = !strcmp(a.what, "all");
  bench_plan p = {all || !strcmp(a.what, "kernels"), all || !strcmp(a.what, "gemm"), all || !strcmp(a.what, "step")};
  FILE *tables = json == stdout ? stderr : stdout;  /* keep a JSON stream on stdout clean */
  double round_trip = print_notes(ctx, &p, tables);
  json_t *report = json ? report_head(ctx, round_trip) : NULL;
  if (json && !report) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory building the JSON report");
  if (p.step && !p.kernels && !p.gemm) a.so.t_start = t_start;  /* start-up is measured only when the step runs first */
  if (st == CF_OK) st = run_plan(ctx, &p, &cfg, &a, tables, report);
  if (json) st = write_report(report, json, a.json_path, st);
  cf_context_free(ctx);
  return cf_exit_code(st);
}
