/* One device per rank: the ranks of a host share out the devices a --device spec matches, by their
 * local rank (rank 0 of a host takes the first match, rank 1 the second, ...); more ranks than
 * matches wrap around, so two ranks may share a device (allowed, and said by the caller). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "clformer/dist.h"
#include "clformer/runtime.h"
#include "base/base.h"

/* Whether device i is one spec names: "auto" names every device of the type auto picks (a host
 * with two GPUs gives its ranks both); any other spec, what it selects from that device alone. */
static int matches(const cf_device_info *list, int count, int i, const char *spec, int auto_index) {
  if (!spec || !*spec || !strcasecmp(spec, "auto")) return list[i].type == list[auto_index].type;
  int idx = -1, v = cf_verbosity();
  cf_set_verbosity(-1);  /* a device the spec does not name is no error here */
  cf_status st = cf_device_select(list + i, 1, spec, &idx);
  cf_set_verbosity(v);
  cf_clear_error();
  return st == CF_OK && idx == 0;
}

cf_status cf_dist_choose_device(const char *spec, char *pd, size_t n, int *shared, int *nmatch) {
  cf_device_info *list = NULL;
  int count = 0, first = -1;
  CF_TRY(cf_device_list(&list, &count));
  /* the spec's own choice first: a spec that matches nothing is refused with its usual message */
  cf_status st = cf_device_select(list, count, spec, &first);
  int *hit = st == CF_OK ? malloc((size_t)count * sizeof *hit) : NULL;
  if (st == CF_OK && !hit) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  int k = 0;
  for (int i = 0; st == CF_OK && i < count; i++)
    if (i == first || matches(list, count, i, spec, first)) hit[k++] = i;
  if (st == CF_OK) {
    const cf_world *w = cf_dist_world();
    const cf_device_info *d = &list[hit[w->local_rank % k]];
    snprintf(pd, n, "%d:%d", d->platform_index, d->device_index);
    *shared = w->local_size > k;
    if (nmatch) *nmatch = k;
  }
  free(hit);
  free(list);
  return st;
}
