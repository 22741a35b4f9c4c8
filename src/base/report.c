/* Small pieces the reports share: benchmark medians (JSON is written through base/json.c). */
#include <math.h>
#include <stdio.h>
#include "base/base.h"

double cf_median(double *v, int n) {
  for (int i = 1; i < n; i++)  /* insertion sort: a few dozen samples */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
