/* cf_profile_implausible: profiling events that measure nothing (every one 0 ms, or 1-2 ns each as
 * Mesa's rusticl 22.3 reports them) or more than the wall clock allows are named, never reported as
 * times; real ones, a clock too coarse for a tiny run, and nothing collected pass. No device needed. */
#include <math.h>
#include <string.h>
#include "runtime/profile.h"
#include "testutil.h"

static cf_profile_entry entry(const char *name, double ms, int calls) {
  cf_profile_entry e;
  memset(&e, 0, sizeof e);
  snprintf(e.name, sizeof e.name, "%s", name);
  e.ms = ms;
  e.calls = calls;
  return e;
}

int main(void) {
  char why[160];
  cf_profile_entry zero[3] = {entry("gemm_an_strips", 0, 40), entry("layernorm_forward", 0, 12),
                              entry("adam_step", 0, 1)};
  const char *r = cf_profile_implausible(zero, 3, 2339.69, why, sizeof why);
  TEST_ASSERT(r && strstr(r, "every one of 53 profiling events read 0 ms") && strstr(r, "2339.69 ms"),
              "all-zero events over a 2.3 s step: %s", r ? r : "(believed)");
  TEST_ASSERT(!cf_profile_implausible(zero, 3, 0.01, why, sizeof why),
              "zero events over 0.01 ms of wall clock are believable (a coarse clock)");
  cf_profile_entry tiny[2] = {entry("gemm_an_strips", 0.00006, 40), entry("layernorm_forward", 0.00004, 21)};
  r = cf_profile_implausible(tiny, 2, 1693.27, why, sizeof why);
  TEST_ASSERT(r && strstr(r, "61 profiling events") && strstr(r, "1.6 ns each"),
              "61 events of 1.6 ns (rusticl 22.3) over a 1.7 s step: %s", r ? r : "(believed)");
  cf_profile_entry small[1] = {entry("fill", 0.05, 10)};
  TEST_ASSERT(!cf_profile_implausible(small, 1, 0.2, why, sizeof why), "ten 5 us kernels in 0.2 ms are believable");
  cf_profile_entry real[2] = {entry("gemm_an_strips", 1.5, 40), entry("layernorm_forward", 0, 12)};
  TEST_ASSERT(!cf_profile_implausible(real, 2, 2.0, why, sizeof why), "1.5 ms of events in a 2 ms step");
  TEST_ASSERT(!cf_profile_implausible(real, 2, 1.1, why, sizeof why), "1.5 ms in 1.1 ms: within the slack");
  r = cf_profile_implausible(real, 2, 0.2, why, sizeof why);
  TEST_ASSERT(r && strstr(r, "more than"), "1.5 ms of events in 0.2 ms of wall clock: %s", r ? r : "(believed)");
  cf_profile_entry nan_e[1] = {entry("gemm_an_strips", NAN, 3)};
  TEST_ASSERT(cf_profile_implausible(nan_e, 1, 5.0, why, sizeof why) != NULL, "a NaN time is not believed");
  TEST_ASSERT(!cf_profile_implausible(zero, 0, 100.0, why, sizeof why), "nothing collected: nothing to judge");
  cf_profile_entry none[1] = {entry("gemm_an_strips", 0, 0)};
  TEST_ASSERT(!cf_profile_implausible(none, 1, 100.0, why, sizeof why), "entries without calls are ignored");
  return test_finish("test_profile");
}
