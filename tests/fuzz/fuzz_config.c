/* libFuzzer target: the YAML config loader and validator (cf_config_load_string, cf_config_validate),
 * and, for a config they accept, the writer's round trip (cf_config_write's YAML must load and
 * validate again: include/clformer/config.h promises it). Built by tests/fuzz/CMakeLists.txt with
 * clang, -fsanitize=fuzzer,address,undefined; run by the ctest test fuzz_config. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clformer/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > CF_CONFIG_MAX_BYTES) return 0;  /* cf_config_load refuses these unread */
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  cf_config *c = malloc(sizeof *c);
  if (!c) { free(text); return 0; }
  cf_config_defaults(c);
  if (cf_config_load_string(c, text, "fuzz.yaml") == CF_OK && cf_config_validate(c) == CF_OK) {
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (f) {
      cf_config_write(c, f);
      fclose(f);
      cf_config *d = malloc(sizeof *d);
      if (d) {
        cf_config_defaults(d);
        if (cf_config_load_string(d, out, "written.yaml") != CF_OK || cf_config_validate(d) != CF_OK) {
          fprintf(stderr, "fuzz_config: a validated config's written YAML does not load again: %s\n%s\n",
                  cf_last_error(), out);
          abort();
        }
        free(d);
      }
      free(out);
    }
  }
  free(c);
  free(text);
  return 0;
}
