/* Whole-string numbers, for every place that reads one from a user (command line, config files). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include "base/base.h"

int cf_parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

int cf_parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}
