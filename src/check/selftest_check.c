/* The comparison every self-test row uses. */
#include <math.h>
#include <stdio.h>
#include "clformer/check.h"

int cf_selftest_check(cf_selftest *t, const char *op, const float *out, const double *ref, size_t n,
                      double atol, double rtol, double ms) {
  double max_err = 0, worst = 0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)out[i] - ref[i]);
    if (!isfinite(out[i]) || !isfinite(ref[i])) finite = 0;
    if (err > max_err) max_err = err;
    double w = err / (atol + rtol * fabs(ref[i]));
    if (w > worst) worst = w;
  }
  int pass = finite && worst <= 1.0;
  if (t->n < (int)(sizeof t->rows / sizeof t->rows[0])) {
    cf_selftest_row *r = &t->rows[t->n++];
    snprintf(r->op, sizeof r->op, "%s", op);
    r->max_err = finite ? max_err : INFINITY;
    r->worst = finite ? worst : INFINITY;
    r->atol = atol;
    r->rtol = rtol;
    r->pass = pass;
    r->ms = ms;
  }
  return pass;
}

float cf_selftest_random(unsigned long long *state) {
  unsigned long long z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
