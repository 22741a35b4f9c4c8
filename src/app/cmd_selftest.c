/* `clformer selftest`: every kernel against the double-precision references on this device. */
#include <string.h>
#include "clformer/check.h"
#include "app/cli.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer selftest [--device SPEC]\n"
    "\n"
    "Runs every kernel (forward and backward) on small random inputs against clformer's double-precision\n"
    "references and prints op, max error, tolerance, pass/fail and time. Exit 0 when all pass, 1 otherwise.\n"
    "`train` runs it once per device, driver and kernel version and refuses a device that fails.\n";

int cmd_selftest(int argc, char **argv) {
  const char *device = NULL;
  for (int i = 1; i < argc; i++) {
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(argv[i], "--device", "-d") && i + 1 < argc) device = argv[++i];
    else return cf_cli_unexpected("selftest", argc, argv, i, usage);
  }
  cf_context_options o = {.device_spec = device};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) return cf_exit_code(st);
  printf("self-test on %s (%s, driver %s)\n\n", cf_context_device(ctx)->name, cf_context_device(ctx)->platform_name,
         cf_context_device(ctx)->driver_version);
  cf_selftest t;
  double t0 = cf_now();
  st = cf_selftest_run(ctx, &t);
  cf_selftest_print(&t, stdout);
  int bad = cf_selftest_failures(&t);
  if (st != CF_OK)  /* the error is printed above: say that the run stopped, not that ops passed */
    printf("\nthe self-test stopped after %d ops (%d passed) on an error (%s)\n", t.n, t.n - bad, cf_status_str(st));
  else printf("\n%d of %d ops pass (%.1f s)\n", t.n - bad, t.n, cf_now() - t0);
  if (st == CF_OK) cf_selftest_record(ctx, &t);  /* `train` need not run it again */
  cf_context_free(ctx);
  if (st != CF_OK) return 1;
  return bad ? 1 : 0;
}
