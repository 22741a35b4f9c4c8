/* Numbers: whole-string parsing for every place that reads one from a user (command line, config
 * files), and the median the benchmarks report. */
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

double cf_median(double *v, int n) {
  for (int i = 1; i < n; i++)  /* insertion sort: a few dozen samples */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
