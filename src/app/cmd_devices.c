/* `clformer devices`: list every OpenCL device, show which one a spec selects. */
#include <stdlib.h>
#include <string.h>
#include "app/cli.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer devices [--json] [--device SPEC] [--verbose]\n"
    "\n"
    "Lists every OpenCL platform and device: P:D, platform, name, vendor, type, compute units, clock,\n"
    "global and local memory, max work-group size, OpenCL C version, driver, fp16/fp64, and the\n"
    "device `auto` picks.\n"
    "\n"
    "  --json           print the same as JSON\n"
    "  --device SPEC    show the device SPEC selects (exit 2 and the list when it matches none);\n"
    "                   SPEC is auto | P:D | gpu | cpu | accelerator | part of a device or platform name\n"
    "                   (default: $CLFORMER_DEVICE, else auto)\n"
    "  --verbose        also open the selected device and time a cold and a warm kernel-program load\n";

static int time_program_loads(const char *spec) {
  cf_context_options o = {.device_spec = spec};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) return cf_exit_code(st);
  char *src = NULL;
  cl_program p = NULL;
  double cold = 0, warm = 0;
  st = cf_program_source("elementwise", &src);
  /* cold: the cache bypassed, as on a first run */
  char *saved = getenv("CLFORMER_CACHE") ? strdup(getenv("CLFORMER_CACHE")) : NULL;
  setenv("CLFORMER_CACHE", "off", 1);
  if (st == CF_OK) {
    double t0 = cf_now();
    st = cf_program_build_source(ctx, "elementwise", src, &p);
    cold = 1e3 * (cf_now() - t0);
    if (p) clReleaseProgram(p);
    p = NULL;
  }
  if (saved) { setenv("CLFORMER_CACHE", saved, 1); free(saved); } else unsetenv("CLFORMER_CACHE");
  /* warm: once to fill the cache, then timed */
  for (int i = 0; i < 2 && st == CF_OK; i++) {
    double t0 = cf_now();
    st = cf_program_build_source(ctx, "elementwise", src, &p);
    warm = 1e3 * (cf_now() - t0);
    if (p) clReleaseProgram(p);
    p = NULL;
  }
  free(src);
  if (st == CF_OK) {
    const char *dir = cf_cache_dir();
    cf_cache_stats cs = cf_context_cache_stats(ctx);
    printf("\nprogram load on %s: cold (compiled from source) %.1f ms, warm (%s) %.1f ms\n",
           cf_context_device(ctx)->name, cold, cs.hits ? "binary cache hit" : "cache off", warm);
    printf("kernel binary cache: %s\n", dir ? dir : "off (CLFORMER_CACHE=off)");
  }
  cf_context_free(ctx);
  return cf_exit_code(st);
}

int cmd_devices(int argc, char **argv) {
  int json = 0, verbose = 0;
  const char *spec = NULL;
  for (int i = 1; i < argc; i++) {
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(argv[i], "--json", NULL)) json = 1;
    else if (cf_arg_is(argv[i], "--verbose", "-v")) verbose = 1;
    else if (cf_arg_is(argv[i], "--device", "-d") && i + 1 < argc) spec = argv[++i];
    else if (!strncmp(argv[i], "--device=", 9)) spec = argv[i] + 9;
    else return cf_cli_unexpected("devices", argc, argv, i, usage);
  }
  cf_device_info *list;
  int count, auto_index;
  cf_status st = cf_device_list(&list, &count);
  if (st != CF_OK) return cf_exit_code(st);
  cf_device_select(list, count, "auto", &auto_index);
  int chosen = -1;
  const char *resolved = cf_device_spec_resolve(spec, NULL);
  if (spec || getenv("CLFORMER_DEVICE")) {
    st = cf_device_select(list, count, resolved, &chosen);
    if (st != CF_OK) {  /* the message already lists the devices */
      if (!spec) fprintf(stderr, "clformer: (the spec came from $CLFORMER_DEVICE)\n");
      free(list);
      return 2;
    }
  }
  if (json) st = cf_device_print_json(stdout, list, count, auto_index);
  else {
    cf_device_print_table(stdout, list, count, auto_index);
    if (chosen >= 0)
      printf("\n'%s' selects %d:%d  %s (%s)\n", resolved, list[chosen].platform_index, list[chosen].device_index,
             list[chosen].name, list[chosen].platform_name);
  }
  free(list);
  if (verbose && !json) return time_program_loads(resolved);
  return cf_exit_code(st);
}
