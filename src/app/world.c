/* The device of this rank (clformer/dist.h) and the run header's lines for the world: every rank's
 * host and device, printed by rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include "app/cli.h"
#include "clformer/dist.h"
#include "clformer/runtime.h"

/* "world: N ranks" and one line per rank, from rank 0; a device two ranks share is said. */
static cf_status print_world(const cf_context *ctx, int shared, int matches, int quiet) {
  const cf_world *w = cf_dist_world();
  const cf_device_info *d = cf_context_device(ctx);
  enum { LEN = 600 };
  char mine[LEN], *all = malloc((size_t)w->size * LEN);
  if (!all) return CF_ERR_NO_MEMORY;
  snprintf(mine, sizeof mine, "%s, device %d:%d %s", w->host, d->platform_index, d->device_index, d->name);
  cf_status st = cf_dist_gather_text(mine, all, LEN);
  if (st == CF_OK && w->rank == 0 && !quiet) {
    printf("world: %d ranks (data parallel: each takes 1/%d of every batch; gradients summed in a fixed order)\n",
           w->size, w->size);
    for (int r = 0; r < w->size; r++) printf("  rank %d: %s\n", r, all + (size_t)r * LEN);
    if (shared)
      printf("  note: %d ranks on %s share its %d matching device%s (allowed; they take turns on it)\n", w->local_size,
             w->host, matches, matches == 1 ? "" : "s");
    fflush(stdout);
  }
  free(all);
  return st;
}

cf_status cf_cli_rank_context(const char *spec, int profiling, int quiet, cf_context **ctx) {
  *ctx = NULL;
  char pd[32];
  int shared = 0, matches = 1;
  cf_status st = CF_OK;
  if (cf_dist_world()->size > 1) {
    st = cf_dist_choose_device(spec, pd, sizeof pd, &shared, &matches);
    spec = pd;
  }
  cf_context_options o = {.device_spec = spec, .profiling = profiling};
  if (st == CF_OK) st = cf_context_create(&o, ctx);
  st = cf_dist_agree(st);
  if (st == CF_OK && cf_dist_world()->size > 1) st = print_world(*ctx, shared, matches, quiet);
  if (st != CF_OK) {
    cf_context_free(*ctx);
    *ctx = NULL;
  }
  return st;
}
