/* `bench step`'s matrix products by shape (bench_internal.h): what each of the model's products
 * cost inside the step, from the profiling events the GEMM layer tags with the product's
 * signature, against the FLOPs cf_model_gemm_shapes counts for it. `bench gemm` times the same
 * shapes alone, operands warm in cache; the difference is what the step's order costs them. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/gemm.h"
#include "clformer/model.h"
#include "base/base.h"
#include "bench/bench_internal.h"

static int by_ms(const void *a, const void *b) {
  double x = ((const cf_bench_product *)a)->ms, y = ((const cf_bench_product *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The row for signature sig among rows[0..*n), added when new (room for every shape). */
static cf_bench_product *row_of(cf_bench_product *rows, int *n, const char *sig) {
  for (int i = 0; i < *n; i++)
    if (!strcmp(rows[i].sig, sig)) return &rows[i];
  cf_bench_product *r = &rows[(*n)++];
  memset(r, 0, sizeof *r);
  snprintf(r->sig, sizeof r->sig, "%s", sig);
  return r;
}

int cf_bench_products(const struct cf_config *cfg, const cf_profile_entry *by_tag, int ntags, int steps,
                      cf_bench_product *rows) {
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  int n = 0, nsh = cf_model_gemm_shapes(cfg, sh);
  for (int i = 0; i < nsh && n < CF_BENCH_MAX_PRODUCTS; i++) {
    char sig[CF_PROFILE_TAG];
    cf_gemm_signature(sig, sizeof sig, sh[i].ta, sh[i].tb, sh[i].M, sh[i].N, sh[i].K, sh[i].batch);
    cf_bench_product *r = row_of(rows, &n, sig);
    size_t len = strlen(r->names);
    snprintf(r->names + len, sizeof r->names - len, "%s%s", len ? ", " : "", sh[i].name);
    r->calls += sh[i].per_step;
    r->flops += cf_gemm_shape_flops(&sh[i]) * sh[i].per_step;
  }
  int nshapes = n;
  double other_ms = 0;
  int other_launches = 0;
  for (int t = 0; t < ntags; t++) {
    int i = 0;
    while (i < nshapes && strcmp(by_tag[t].name, rows[i].sig)) i++;
    if (i < nshapes) {
      rows[i].ms = by_tag[t].ms / (steps > 0 ? steps : 1);
    } else {  /* a product of no model shape: the shape list and the model drifted apart */
      other_ms += by_tag[t].ms / (steps > 0 ? steps : 1);
      other_launches += by_tag[t].calls;
    }
  }
  qsort(rows, (size_t)n, sizeof *rows, by_ms);
  if (other_launches && n < CF_BENCH_MAX_PRODUCTS) {
    cf_bench_product *r = &rows[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->names, sizeof r->names, "other");
    snprintf(r->sig, sizeof r->sig, "-");
    r->calls = other_launches / (steps > 0 ? steps : 1);
    r->ms = other_ms;
  }
  return n;
}

void cf_bench_products_print(FILE *out, const cf_bench_product *rows, int n, double peak) {
  int w = 7;  /* the names' column: as wide as the longest */
  for (int i = 0; i < n; i++)
    if ((int)strlen(rows[i].names) > w) w = (int)strlen(rows[i].names);
  fprintf(out, "  matrix products by shape (their launches' device time; `bench gemm` times them alone):\n");
  fprintf(out, "  %-*s %-24s %6s %9s %9s %8s\n", w, "product", "op M x N x K x batch", "calls", "ms/step", "GFLOP/s",
          "of peak");
  for (int i = 0; i < n; i++) {
    const cf_bench_product *r = &rows[i];
    int rated = r->ms > 0 && r->flops > 0;
    double gflops = rated ? r->flops / r->ms * 1e-6 : 0;
    fprintf(out, "  %-*s %-24s %6d %9.3f ", w, r->names, r->sig, r->calls, r->ms);
    if (rated) fprintf(out, "%9.1f ", gflops);
    else fprintf(out, "%9s ", "-");
    if (peak > 0 && rated) fprintf(out, "%7.1f%%\n", 100 * gflops / peak);
    else fprintf(out, "%8s\n", "-");
  }
}

json_t *cf_bench_products_json(const cf_bench_product *rows, int n, double peak) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) {
    const cf_bench_product *r = &rows[i];
    int rated = r->ms > 0 && r->flops > 0;  /* "other" counts no FLOPs */
    double gflops = rated ? r->flops / r->ms * 1e-6 : 0;
    json_t *row = json_pack("{s:s, s:s, s:i, s:o, s:o, s:o, s:o}", "names", r->names, "signature", r->sig, "calls",
                            r->calls, "flops", cf_json_num(r->flops, "%.0f"), "ms", cf_json_num(r->ms, "%.4f"), "gflops",
                            rated ? cf_json_num(gflops, "%.2f") : json_null(), "fraction_of_peak",
                            peak > 0 && rated ? cf_json_num(gflops / peak, "%.4f") : json_null());
    if (!row || json_array_append_new(a, row)) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}
