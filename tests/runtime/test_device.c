/* Device enumeration and selection: every spec form, precedence, and the failure message. */
#include <string.h>
#include "testutil.h"

static int select_index(const cf_device_info *l, int n, const char *spec) {
  int i = -1;
  cf_status st = cf_device_select(l, n, spec, &i);
  return st == CF_OK ? i : -100 + (st == CF_ERR_NO_DEVICE ? 0 : -1);
}

int main(void) {
  /* Two PoCL devices of different kinds, so name selection has something to tell apart.
   * Only PoCL reads this; on other stacks the test uses whatever devices exist. */
  setenv("POCL_DEVICES", "pthread basic", 0);
  unsetenv("CLFORMER_DEVICE");
  cf_device_info *l;
  int n;
  cf_status st = cf_device_list(&l, &n);
  if (st == CL_PLATFORM_NOT_FOUND_KHR) { fprintf(stderr, "SKIP: no OpenCL platform\n"); return TEST_SKIP; }
  TEST_OK(st);
  TEST_ASSERT(n >= 1, "no devices");
  for (int i = 0; i < n; i++) {
    printf("%d:%d %s | %s | %s\n", l[i].platform_index, l[i].device_index, l[i].name, l[i].platform_name,
           cf_device_type_str(l[i].type));
    TEST_ASSERT(l[i].name[0] && l[i].platform_name[0], "device %d has no name", i);
    TEST_ASSERT(l[i].compute_units >= 1 && l[i].max_work_group >= 1 && l[i].global_mem > 0, "device %d facts", i);
  }
  int pocl = -1;
  for (int i = 0; i < n; i++)
    if (strstr(l[i].platform_name, "Portable Computing Language") && (l[i].type & CL_DEVICE_TYPE_CPU)) pocl = i;

  /* auto: the first GPU, else accelerator, else CPU */
  int a = select_index(l, n, "auto"), gpu = -1, cpu = -1, acc = -1;
  for (int i = n - 1; i >= 0; i--) {
    if (l[i].type & CL_DEVICE_TYPE_GPU) gpu = i;
    if (l[i].type & CL_DEVICE_TYPE_CPU) cpu = i;
    if (l[i].type & CL_DEVICE_TYPE_ACCELERATOR) acc = i;
  }
  TEST_ASSERT(a == (gpu >= 0 ? gpu : acc >= 0 ? acc : cpu), "auto picked %d", a);
  TEST_ASSERT(select_index(l, n, NULL) == a && select_index(l, n, "") == a && select_index(l, n, "AUTO") == a,
              "NULL, empty and AUTO must mean auto");
  TEST_ASSERT(select_index(l, n, "cpu") == (cpu >= 0 ? cpu : -100), "cpu");
  TEST_ASSERT(select_index(l, n, "gpu") == (gpu >= 0 ? gpu : -100), "gpu");
  TEST_ASSERT(select_index(l, n, "accelerator") == (acc >= 0 ? acc : -100), "accelerator");

  /* P:D addresses every device exactly */
  for (int i = 0; i < n; i++) {
    char spec[32];
    snprintf(spec, sizeof spec, "%d:%d", l[i].platform_index, l[i].device_index);
    TEST_ASSERT(select_index(l, n, spec) == i, "%s", spec);
  }
  TEST_ASSERT(select_index(l, n, "0:99") == -100, "0:99 must match nothing");
  TEST_ASSERT(select_index(l, n, "0:0x") == -100, "0:0x is not P:D and names no device");

  /* a case-insensitive substring of the device or platform name */
  if (pocl >= 0) {
    TEST_ASSERT(select_index(l, n, "portable computing") >= 0, "platform substring");
    if (n >= 2) {
      int pt = -1, basic = -1;
      for (int i = 0; i < n; i++) {
        if (!strncmp(l[i].name, "pthread", 7)) pt = i;
        if (!strncmp(l[i].name, "basic", 5)) basic = i;
      }
      TEST_ASSERT(pt >= 0 && basic >= 0, "POCL_DEVICES='pthread basic' should give both");
      TEST_ASSERT(select_index(l, n, "PThread") == pt, "name substring pthread");
      TEST_ASSERT(select_index(l, n, "basic") == basic, "name substring basic");
    }
  }

  /* a bad spec fails and the message lists every device */
  cf_set_verbosity(-1);
  TEST_ASSERT(select_index(l, n, "no-such-device-xyz") == -100, "bad spec must fail with CF_ERR_NO_DEVICE");
  const char *msg = cf_last_error();
  TEST_ASSERT(strstr(msg, "no-such-device-xyz") != NULL, "message names the spec: %s", msg);
  for (int i = 0; i < n; i++) TEST_ASSERT(strstr(msg, l[i].name) != NULL, "message lists %s: %s", l[i].name, msg);
  cf_set_verbosity(1);

  /* precedence: command line, then $CLFORMER_DEVICE, then the config, then auto */
  TEST_ASSERT(!strcmp(cf_device_spec_resolve("1:0", "cpu"), "1:0"), "cli first");
  TEST_ASSERT(!strcmp(cf_device_spec_resolve(NULL, "cpu"), "cpu"), "config when no env");
  TEST_ASSERT(!strcmp(cf_device_spec_resolve(NULL, NULL), "auto"), "auto last");
  setenv("CLFORMER_DEVICE", "gpu", 1);
  TEST_ASSERT(!strcmp(cf_device_spec_resolve(NULL, "cpu"), "gpu"), "env before config");
  TEST_ASSERT(!strcmp(cf_device_spec_resolve("0:0", "cpu"), "0:0"), "cli before env");
  unsetenv("CLFORMER_DEVICE");

  /* a context on the last device works and runs a kernel there */
  char spec[32];
  snprintf(spec, sizeof spec, "%d:%d", l[n - 1].platform_index, l[n - 1].device_index);
  cf_context_options o = {.device_spec = spec};
  cf_context *ctx;
  TEST_OK(cf_context_create(&o, &ctx));
  TEST_ASSERT(!strcmp(cf_context_device(ctx)->name, l[n - 1].name), "context opened the wrong device");
  cl_mem b = test_buffer(ctx, NULL, 37);
  TEST_OK(cf_fill(ctx, cf_at(b, 0), 2.5f, 37));
  float *x = test_read(ctx, cf_at(b, 0), 37);
  int good = 1;
  for (int i = 0; i < 37; i++) good &= x[i] == 2.5f;
  TEST_ASSERT(good, "fill on %s", spec);
  free(x);
  cf_buffer_free(b);
  cf_context_free(ctx);
  cf_context_free(NULL);  /* a no-op */

  o.device_spec = "no-such-device-xyz";
  cf_set_verbosity(-1);
  TEST_ASSERT(cf_context_create(&o, &ctx) == CF_ERR_NO_DEVICE && ctx == NULL, "context with a bad spec");
  cf_set_verbosity(1);
  free(l);
  return test_finish("test_device");
}
