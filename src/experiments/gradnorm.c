/* `clformer gradnorm`: gradient norms at initialization (Xiong et al. 2020, Theorem 1 and
 * Figure 3). For each placement and depth, over several seeds (each a random initialisation and a
 * batch of its own, shared by every placement and depth): the Frobenius norm of the gradient of
 * every layer's FFN weights (W1, W2), attention output projection and LN gains, before any update.
 * Then the scaling of the last layer's W2 gradient with depth: Theorem 1 predicts about L^0 for
 * Post-LN and L^-1/2 for Pre-LN. A language model has one stack of blocks; an encoder-decoder
 * (model.arch encoder_decoder) two, its decoder and its encoder, each measured and reported as a
 * series of its own, both stacks at the depth (model.layers = model.encoder_layers). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include "clformer/data.h"
#include "clformer/model.h"
#include "clformer/check.h"
#include "clformer/experiments.h"
#include "clformer/train.h"
#include "config/config_yaml.h"
#include "runtime/runtime.h"
#include "experiments/svg.h"

enum { W1, W2, WO, LN1, LN2, NQ };
static const char *qname[NQ] = {"ffn.fc1.weight", "ffn.fc2.weight", "attn.proj.weight", "ln1.weight", "ln2.weight"};
static const char *qshort[NQ] = {"W1", "W2", "W_o", "LN1 gain", "LN2 gain"};

typedef struct gn_spec {
  cf_config base;
  int depths[32], ndepths, seeds, norms[2], nnorms;
  int ed;  /* an encoder-decoder: two stacks, decoder then encoder */
  char out[1024];
} gn_spec;

/* The stacks of blocks measured: the language model's one, or the encoder-decoder's decoder (the
 * paper's Figure 3) and encoder; each a series of its own in the reports. */
enum { GN_MAX_STACKS = 2 };
static const char *stack_name[GN_MAX_STACKS] = {"decoder", "encoder"};
static int nstacks(const gn_spec *s) { return s->ed ? 2 : 1; }

static cf_status parse_ints(yaml_document_t *doc, yaml_node_t *n, const char *path, const char *key, int *out, int max,
                            int *count, int is_norm) {
  if (n->type != YAML_SEQUENCE_NODE) return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: %s: expected a list", path, n->start_mark.line + 1, key);
  *count = 0;
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
    yaml_node_t *v = yaml_document_get_node(doc, *it);
    const char *s = v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : "";
    char *end;
    long x = is_norm ? (!strcmp(s, "pre") ? CF_NORM_PRE : !strcmp(s, "post") ? CF_NORM_POST : -1) : strtol(s, &end, 10);
    if (*count >= max || x < (is_norm ? 0 : 1) || x > 1000 || (!is_norm && *end))
      return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: %s: '%s' is not %s", path, v->start_mark.line + 1, key, s,
                     is_norm ? "post or pre" : "a layer count from 1 to 1000");
    out[(*count)++] = (int)x;
  }
  if (*count == 0) return CF_FAIL(CF_ERR_CONFIG, "%s: %s: the list is empty", path, key);
  return CF_OK;
}

static cf_status parse_gn(gn_spec *s, const char *path, char **sets, int nsets) {
  memset(s, 0, sizeof *s);
  s->seeds = 3;
  s->norms[0] = CF_NORM_POST;
  s->norms[1] = CF_NORM_PRE;
  s->nnorms = 2;
  cf_config_defaults(&s->base);
  yaml_document_t doc;
  CF_TRY(cf_yaml_load_file(path, &doc));
  cf_status st = CF_OK;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root || root->type != YAML_MAPPING_NODE) st = CF_FAIL(CF_ERR_CONFIG, "%s: expected a mapping with base: and depths:", path);
  for (yaml_node_pair_t *p = root ? root->data.mapping.pairs.start : NULL; st == CF_OK && p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
    if (k->type != YAML_SCALAR_NODE) { st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: keys must be plain names", path, k->start_mark.line + 1); break; }
    const char *key = (const char *)k->data.scalar.value;
    if (!strcmp(key, "base")) st = cf_config_apply_node(&s->base, &doc, v, path);
    else if (!strcmp(key, "depths")) st = parse_ints(&doc, v, path, key, s->depths, 32, &s->ndepths, 0);
    else if (!strcmp(key, "placements")) st = parse_ints(&doc, v, path, key, s->norms, 2, &s->nnorms, 1);
    else if (!strcmp(key, "seeds") && v->type == YAML_SCALAR_NODE) {
      long x;
      if (!cf_parse_long((const char *)v->data.scalar.value, 1, 1000, &x))
        st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: seeds: expected an integer from 1 to 1000", path, v->start_mark.line + 1);
      else s->seeds = (int)x;
    } else if (!strcmp(key, "out") && v->type == YAML_SCALAR_NODE)
      snprintf(s->out, sizeof s->out, "%s", (const char *)v->data.scalar.value);
    else
      st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: unknown key '%s' (expected base, depths, placements, seeds, out)", path,
                   k->start_mark.line + 1, k->start_mark.column + 1, key);
  }
  if (st == CF_OK && !s->ndepths) st = CF_FAIL(CF_ERR_CONFIG, "%s: depths: missing (e.g. depths: [6, 12, 18, 24])", path);
  if (st == CF_OK) st = cf_config_resolve_paths(&s->base, path);
  for (int i = 0; i < nsets && st == CF_OK; i++) st = cf_config_set(&s->base, sets[i]);
  if (st == CF_OK) st = cf_config_validate(&s->base);
  s->ed = s->base.model.arch == CF_ARCH_ENCODER_DECODER;
  if (st == CF_OK && !s->out[0]) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(s->out, sizeof s->out, "runs/%.*s", (int)strcspn(b, "."), b);
  }
  yaml_document_delete(&doc);
  return st;
}

/* One stack's measurements: norms[sk * n + ...], n what one stack holds (`at` indexes inside it). */
static double *series(double *norms, const gn_spec *s, int sk, int Lmax) {
  return norms + (size_t)sk * s->nnorms * s->ndepths * s->seeds * Lmax * NQ;
}

/* norms[((ni * ndepths + di) * seeds + k) * Lmax * NQ + l * NQ + q] of one stack */
static double *at(double *norms, const gn_spec *s, int ni, int di, int k, int l, int q, int Lmax) {
  return &norms[(((size_t)ni * s->ndepths + di) * s->seeds + k) * Lmax * NQ + (size_t)l * NQ + q];
}

/* One quantity over the seeds: mean, sample standard deviation (0 for one seed), min and max. */
typedef struct gn_stat { double mean, sd, min, max; } gn_stat;

static gn_stat over_seeds(double *norms, const gn_spec *s, int ni, int di, int l, int q, int Lmax) {
  double a = 0, b = 0;
  gn_stat r = {0, 0, INFINITY, -INFINITY};
  for (int k = 0; k < s->seeds; k++) {
    double v = *at(norms, s, ni, di, k, l, q, Lmax);
    a += v;
    b += v * v;
    r.min = fmin(r.min, v);
    r.max = fmax(r.max, v);
  }
  r.mean = a / s->seeds;
  r.sd = s->seeds > 1 ? sqrt(fmax(0, (b - a * a / s->seeds) / (s->seeds - 1))) : 0;
  return r;
}

static void mean_sd(double *norms, const gn_spec *s, int ni, int di, int l, int q, int Lmax, double *mean, double *sd) {
  gn_stat r = over_seeds(norms, s, ni, di, l, q, Lmax);
  *mean = r.mean;
  *sd = r.sd;
}

/* mean (or sd) rows of one placement and depth: per layer, one number per quantity (6 digits).
 * Jansson's calls take NULL containers and values quietly, so one flag tells of any failure. */
static json_t *rows_json(double *norms, const gn_spec *s, int ni, int di, int Lmax, int want_sd) {
  json_t *rows = json_array();
  int bad = !rows;
  for (int l = 0; !bad && l < s->depths[di]; l++) {
    json_t *row = json_array();
    for (int q = 0; q < NQ; q++) {
      double mu, sd;
      mean_sd(norms, s, ni, di, l, q, Lmax, &mu, &sd);
      bad |= json_array_append_new(row, cf_json_num(want_sd ? sd : mu, "%.6g"));
    }
    bad |= json_array_append_new(rows, row);
  }
  if (bad) json_decref(rows);
  return bad ? NULL : rows;
}

/* gradnorm.json's last_layer_w2_scaling of placement ni: the last layer's W2 per depth, mean, sd,
 * min, max and each seed's own ("per_seed": a row per seed), and the exponent fitted to the means. */
static json_t *scaling_json(double *norms, const gn_spec *s, int ni, int Lmax, gn_stat ys[2][32], const double es[2]) {
  json_t *ny = json_array(), *nsd = json_array(), *nmin = json_array(), *nmax = json_array(), *per = json_array();
  int bad = 0;
  for (int di = 0; di < s->ndepths; di++) {
    bad |= json_array_append_new(ny, cf_json_num(ys[ni][di].mean, "%.6g"));
    bad |= json_array_append_new(nsd, cf_json_num(ys[ni][di].sd, "%.6g"));
    bad |= json_array_append_new(nmin, cf_json_num(ys[ni][di].min, "%.6g"));
    bad |= json_array_append_new(nmax, cf_json_num(ys[ni][di].max, "%.6g"));
  }
  for (int k = 0; k < s->seeds; k++) {
    json_t *row = json_array();
    for (int di = 0; di < s->ndepths; di++)
      bad |= json_array_append_new(row, cf_json_num(*at(norms, s, ni, di, k, s->depths[di] - 1, W2, Lmax), "%.6g"));
    bad |= json_array_append_new(per, row);
  }
  int pre = s->norms[ni] == CF_NORM_PRE;
  json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "norms", ny, "sd", nsd, "min", nmin, "max", nmax,
                        "per_seed", per, "exponent", cf_json_num(es[ni], "%.4f"), "theorem1",
                        pre ? json_real(-0.5) : json_integer(0));
  if (bad) json_decref(o);
  return bad ? NULL : o;
}

/* One stack's "placements" (every mean and sd) and "last_layer_w2_scaling" into o (NULL: nothing but
 * the failure); 1 on a failure. */
static int stack_json(json_t *o, double *norms, const gn_spec *s, int Lmax, gn_stat ys[2][32], const double es[2]) {
  json_t *placements = json_object(), *scaling = json_object();
  int bad = 0;
  for (int ni = 0; ni < s->nnorms; ni++) {
    const char *name = s->norms[ni] == CF_NORM_PRE ? "pre" : "post";
    json_t *byd = json_object();
    for (int di = 0; di < s->ndepths; di++) {
      char key[16];
      snprintf(key, sizeof key, "%d", s->depths[di]);
      bad |= json_object_set_new(byd, key, json_pack("{s:o, s:o}", "mean", rows_json(norms, s, ni, di, Lmax, 0), "sd",
                                                     rows_json(norms, s, ni, di, Lmax, 1)));
    }
    bad |= json_object_set_new(placements, name, byd);
    bad |= json_object_set_new(scaling, name, scaling_json(norms, s, ni, Lmax, ys, es));
  }
  bad |= json_object_set_new(o, "placements", placements);
  bad |= json_object_set_new(o, "last_layer_w2_scaling", scaling);
  return bad;
}

/* gradnorm.json: every mean and sd, and the scaling of the last layer's W2 with depth; NULL when out
 * of memory. An encoder-decoder's "placements" and "last_layer_w2_scaling" are its decoder's, and
 * "encoder" holds the same two for its encoder ("arch": "encoder_decoder"). */
static json_t *gradnorm_json(double *norms, const gn_spec *s, int Lmax, const char *device,
                             gn_stat ys[GN_MAX_STACKS][2][32], double es[GN_MAX_STACKS][2]) {
  json_t *depths = json_array(), *quantities = json_array();
  int bad = 0;
  for (int d = 0; d < s->ndepths; d++) bad |= json_array_append_new(depths, json_integer(s->depths[d]));
  for (int q = 0; q < NQ; q++) bad |= json_array_append_new(quantities, json_string(qname[q]));
  json_t *doc = json_pack("{s:o, s:i, s:o, s:o}", "device", cf_json_str(device), "seeds", s->seeds, "depths", depths,
                          "quantities", quantities);
  if (s->ed) bad |= json_object_set_new(doc, "arch", json_string("encoder_decoder"));
  bad |= stack_json(doc, norms, s, Lmax, ys[0], es[0]);
  if (s->ed) {
    json_t *enc = json_object();
    bad |= stack_json(enc, series(norms, s, 1, Lmax), s, Lmax, ys[1], es[1]);
    bad |= json_object_set_new(doc, "encoder", enc);
  }
  if (bad) json_decref(doc);
  return bad ? NULL : doc;
}

/* Least-squares slope of log y against log x. */
static double loglog_slope(const double *x, const double *y, int n) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    double a = log(x[i]), b = log(y[i]);
    sx += a; sy += b; sxx += a * a; sxy += a * b;
  }
  double d = n * sxx - sx * sx;
  return d != 0 ? (n * sxy - sx * sy) / d : NAN;
}

static const char *norm_name(int n) { return n == CF_NORM_PRE ? "Pre-LN" : "Post-LN"; }

/* The config of one (placement, depth): the base at that depth (an encoder-decoder's encoder too) and
 * placement, no dropout, validated. */
static cf_status depth_config(const gn_spec *s, int ni, int di, cf_config *c) {
  *c = s->base;
  c->model.norm = s->norms[ni];
  c->model.layers = s->depths[di];
  if (s->ed) c->model.encoder_layers = s->depths[di];
  c->model.final_norm = CF_FINAL_NORM_AUTO;
  c->model.dropout = c->model.attn_dropout = 0;
  return cf_config_validate(c);
}

/* One initialisation of one (placement, depth) on seed k's batch (a language model's inputs and
 * targets, or an encoder-decoder's pairs): every layer's quantities of every stack into norms. */
static cf_status measure_one(cf_context *ctx, const gn_spec *s, int ni, int di, int k, const int *in, const int *tg,
                             const cf_pair_input *pairs, double *norms, int Lmax) {
  cf_config c;
  CF_TRY(depth_config(s, ni, di, &c));
  cf_model *m;
  int B, T;
  cf_model_shape(&c, &B, &T);
  CF_TRY(cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m));
  float *g = malloc((size_t)cf_model_num_views(m) * sizeof *g);
  cf_status st = g ? cf_model_init(m, s->base.seed + (unsigned long long)k) : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) st = pairs ? cf_model_forward_pairs(m, pairs, 0, 0, 1, 0) : cf_model_forward(m, in, tg, 0, 0);
  if (st == CF_OK) st = cf_model_backward(m);
  if (st == CF_OK) st = cf_model_tensor_grad_norms(m, g);
  for (int sk = 0; sk < nstacks(s); sk++)
    for (int l = 0; st == CF_OK && l < c.model.layers; l++)
      for (int q = 0; st == CF_OK && q < NQ; q++) {
        char name[96];
        snprintf(name, sizeof name, "%s%slayers.%d.%s", s->ed ? stack_name[sk] : "", s->ed ? "." : "", l, qname[q]);
        const cf_tensor_view *v = cf_model_find_view(m, name);
        if (!v) st = CF_FAIL(CF_ERR_INVALID_ARG, "gradnorm: the model has no tensor %s", name);
        for (int i = 0; v && i < cf_model_num_views(m); i++)
          if (cf_model_view(m, i) == v) *at(series(norms, s, sk, Lmax), s, ni, di, k, l, q, Lmax) = g[i];
      }
  free(g);
  cf_model_free(m);
  return st;
}

/* Seed k's batch: batch 0 of the training split under seed base.seed + k, the one its initialisation
 * uses (so each seed is a draw of weights and data, the same for every placement and depth). */
static void seed_batch(const gn_spec *s, const cf_data *data, int k, int *in, int *tg) {
  cf_data_batch(data, CF_SPLIT_TRAIN, s->base.seed + (unsigned long long)k, 0, s->base.data.batch_size,
                s->base.data.seq_len, in, tg);
}

/* An encoder-decoder's batch of each seed k: the first training batch of pairs under seed
 * base.seed + k, the one a training run of that seed takes at step 1. The BPE is learned once, by
 * the first, into OUT/bpe.merges (a file left by an earlier run is replaced: the base may differ),
 * and read back by the others. */
static cf_status seed_pairs(const gn_spec *s, cf_pair_batch *pb) {
  char merges[1200];
  snprintf(merges, sizeof merges, "%s/%s", s->out, CF_TRAIN_MERGES_FILE);
  if (unlink(merges) && errno != ENOENT) return CF_FAIL(CF_ERR_IO, "cannot replace %s: %s", merges, strerror(errno));
  for (int k = 0; k < s->seeds; k++) {
    cf_config c = s->base;
    c.seed = s->base.seed + (unsigned long long)k;
    cf_translation t;
    CF_TRY(cf_translation_open(&t, &c, merges));
    cf_status st = cf_translation_train_batch(&t, 1, &pb[k], NULL);
    cf_translation_close(&t);
    CF_TRY(st);
  }
  return CF_OK;
}

/* Every (placement, depth, seed), each seed on its own batch (pb: the encoder-decoder's, else NULL),
 * with progress after each. */
static cf_status measure_all(cf_context *ctx, const gn_spec *s, const cf_gradnorm_options *o, const cf_data *data,
                             const cf_pair_batch *pb, int *in, int *tg, double *norms, int Lmax) {
  double t0 = cf_now();
  int total = s->nnorms * s->ndepths * s->seeds, idx = 0;
  for (int ni = 0; ni < s->nnorms; ni++)
    for (int di = 0; di < s->ndepths; di++)
      for (int k = 0; k < s->seeds; k++) {
        cf_pair_input pairs;
        if (pb) pairs = cf_pair_input_of(&pb[k]);
        else seed_batch(s, data, k, in, tg);
        CF_TRY(measure_one(ctx, s, ni, di, k, in, tg, pb ? &pairs : NULL, norms, Lmax));
        if (!o->progress) continue;
        char what[96];
        snprintf(what, sizeof what, "%s, %d layers, seed %d", norm_name(s->norms[ni]), s->depths[di],
                 (int)(s->base.seed + (unsigned long long)k));
        double el = cf_now() - t0;
        idx++;
        o->progress(o->user, idx, total, what, el, el / idx * (total - idx));
      }
  return CF_OK;
}

/* Per placement: the last layer's W2 norm over the seeds at each depth (ys) and the exponent fitted to
 * its means (es). */
static void last_w2_scaling(const gn_spec *s, double *norms, int Lmax, gn_stat ys[2][32], double es[2]) {
  for (int ni = 0; ni < s->nnorms; ni++) {
    double x[32], y[32];
    for (int di = 0; di < s->ndepths; di++) {
      x[di] = s->depths[di];
      ys[ni][di] = over_seeds(norms, s, ni, di, s->depths[di] - 1, W2, Lmax);
      y[di] = ys[ni][di].mean;
    }
    es[ni] = s->ndepths > 1 ? loglog_slope(x, y, s->ndepths) : NAN;
  }
}

static const char *theorem1(int norm) { return norm == CF_NORM_PRE ? "L^-0.5" : "L^0"; }

/* One table per depth (and stack): every layer's quantities, mean ± sd, a column per placement and
 * quantity. norms: the stack's series. */
static void markdown_depth(FILE *md, const gn_spec *s, double *norms, int Lmax, int di, int sk) {
  fprintf(md, "## %d layers", s->depths[di]);
  if (s->ed) fprintf(md, ": %s (%s.layers.N)", stack_name[sk], stack_name[sk]);
  fprintf(md, "\n\n| layer |");
  for (int ni = 0; ni < s->nnorms; ni++)
    for (int q = 0; q < NQ; q++) fprintf(md, " %s %s |", norm_name(s->norms[ni]), qshort[q]);
  fprintf(md, "\n|---|");
  for (int i = 0; i < s->nnorms * NQ; i++) fputs("---|", md);
  fputc('\n', md);
  for (int l = 0; l < s->depths[di]; l++) {
    fprintf(md, "| %d |", l + 1);
    for (int ni = 0; ni < s->nnorms; ni++)
      for (int q = 0; q < NQ; q++) {
        double mu, sd;
        mean_sd(norms, s, ni, di, l, q, Lmax, &mu, &sd);
        fprintf(md, " %.3g ± %.2g |", mu, sd);
      }
    fputc('\n', md);
  }
  fputc('\n', md);
}

/* gradnorm.md's first paragraph: what was measured, on which model and data. pb: the encoder-decoder's
 * batches (NULL for a language model). */
static void markdown_intro(FILE *md, const gn_spec *s, const char *device, const cf_pair_batch *pb) {
  const cf_config *b = &s->base;
  fprintf(md, "# Gradient norms at initialization\n\nFrobenius norm of each layer's gradient before any update, mean ± "
              "standard deviation over %d seeds (%llu..%llu), each its own initialisation (model.init: %s) and its own "
              "batch of ", s->seeds, b->seed, b->seed + (unsigned long long)s->seeds - 1,
          b->model.init == CF_WEIGHT_INIT_FAIRSEQ ? "fairseq" : "xavier");
  if (!s->ed)
    fprintf(md, "%d x %d bytes (the same for every placement and depth). Model: d_model %d, %d heads, d_ff %d, "
                "%s, embeddings %sscaled by sqrt(d_model), device %s.\n\n", b->data.batch_size, b->data.seq_len,
            b->model.d_model, b->model.heads, b->model.d_ff, b->model.activation == CF_ACT_RELU ? "ReLU" : "GELU",
            b->model.scale_embeddings ? "" : "not ", device);
  else {
    fprintf(md, "sentence pairs, the first training batch under that seed (at most %d tokens a side; the same for every "
                "placement and depth). Model: an encoder-decoder of L encoder and L decoder blocks at depth L "
                "(model.encoder_layers = model.layers = L), d_model %d, %d heads, d_ff %d, %s, embeddings %sscaled by "
                "sqrt(d_model), %s, label smoothing %g, device %s. The decoder's blocks are the paper's Figure 3; the "
                "encoder's are a series of their own.\n\nThe batches (pairs, source x target tokens padded):",
            b->data.max_tokens, b->model.d_model, b->model.heads, b->model.d_ff,
            b->model.activation == CF_ACT_RELU ? "ReLU" : "GELU", b->model.scale_embeddings ? "" : "not ",
            b->model.tie_embeddings ? "embeddings tied" : "embeddings not tied", b->model.label_smoothing, device);
    for (int k = 0; k < s->seeds; k++)
      fprintf(md, "%s seed %llu: %d, %d x %d", k ? ";" : "", b->seed + (unsigned long long)k, pb[k].B, pb[k].S, pb[k].T);
    fprintf(md, ".\n\n");
  }
}

/* gradnorm.md: the tables, then the scaling of the last layer's W2 with depth (a row per stack and
 * placement). */
static cf_status write_markdown(const gn_spec *s, double *norms, int Lmax, const char *device, const cf_pair_batch *pb,
                                gn_stat ys[GN_MAX_STACKS][2][32], double es[GN_MAX_STACKS][2]) {
  char p[1200];
  snprintf(p, sizeof p, "%s/gradnorm.md", s->out);
  FILE *md = fopen(p, "w");
  if (!md) return CF_FAIL(CF_ERR_IO, "cannot write into %s", s->out);
  markdown_intro(md, s, device, pb);
  for (int di = 0; di < s->ndepths; di++)
    for (int sk = 0; sk < nstacks(s); sk++) markdown_depth(md, s, series(norms, s, sk, Lmax), Lmax, di, sk);
  fprintf(md, "## Scaling of the last layer's W2 gradient with depth (Theorem 1)\n\nMean ± sd [min, max] over the seeds; "
              "the exponent is fitted to the means.\n\n|%s placement |", s->ed ? " stack |" : "");
  for (int d = 0; d < s->ndepths; d++) fprintf(md, " L = %d |", s->depths[d]);
  fprintf(md, " fitted exponent | Theorem 1 |\n|---|");
  for (int d = 0; d <= s->ndepths + 1 + s->ed; d++) fputs("---|", md);
  fputc('\n', md);
  for (int sk = 0; sk < nstacks(s); sk++)
    for (int ni = 0; ni < s->nnorms; ni++) {
      if (s->ed) fprintf(md, "| %s ", stack_name[sk]);
      fprintf(md, "| %s |", norm_name(s->norms[ni]));
      for (int di = 0; di < s->ndepths; di++)
        fprintf(md, " %.4g ± %.2g [%.4g, %.4g] |", ys[sk][ni][di].mean, ys[sk][ni][di].sd, ys[sk][ni][di].min,
                ys[sk][ni][di].max);
      fprintf(md, " L^%.2f | %s |\n", es[sk][ni], theorem1(s->norms[ni]));
    }
  fprintf(md, "\nFigure: [gradnorm.svg](gradnorm.svg) (W2 gradient norm against layer, one panel per depth, %serror bars "
              "over seeds).\n", s->ed ? "the decoder solid and the encoder dashed, " : "");
  return fclose(md) ? CF_FAIL(CF_ERR_IO, "cannot write %s", p) : CF_OK;
}

static void print_scaling(FILE *f, const gn_spec *s, gn_stat ys[GN_MAX_STACKS][2][32], double es[GN_MAX_STACKS][2]) {
  fprintf(f, "last layer's W2 gradient norm against depth (mean ± sd over %d seeds, each its own weights and batch):\n",
          s->seeds);
  for (int sk = 0; sk < nstacks(s); sk++)
    for (int ni = 0; ni < s->nnorms; ni++) {
      if (s->ed) fprintf(f, "  %s", stack_name[sk]);
      fprintf(f, "  %-8s", norm_name(s->norms[ni]));
      for (int di = 0; di < s->ndepths; di++)
        fprintf(f, "  L=%d: %.4g ± %.2g", s->depths[di], ys[sk][ni][di].mean, ys[sk][ni][di].sd);
      fprintf(f, "  -> fitted L^%.2f (Theorem 1: %s)\n", es[sk][ni], theorem1(s->norms[ni]));
    }
}

/* gradnorm.svg: one panel per depth, W2 gradient norm against layer, a line per placement (and per
 * stack: the encoder's dashed). */
static void write_svg(const gn_spec *s, double *norms, int Lmax) {
  char p[1200];
  int cols = s->ndepths < 2 ? 1 : 2, rows = (s->ndepths + cols - 1) / cols, PW = 440, PH = 260;
  snprintf(p, sizeof p, "%s/gradnorm.svg", s->out);
  FILE *f = svg_begin(p, cols * (PW + 110) + 20, rows * (PH + 90) + 20);
  double ylo = INFINITY, yhi = 0;
  for (int sk = 0; sk < nstacks(s); sk++)
    for (int ni = 0; ni < s->nnorms; ni++)
      for (int di = 0; di < s->ndepths; di++)
        for (int l = 0; l < s->depths[di]; l++)
          for (int k = 0; k < s->seeds; k++) {
            double v = *at(series(norms, s, sk, Lmax), s, ni, di, k, l, W2, Lmax);
            if (v > 0) { ylo = fmin(ylo, v); yhi = fmax(yhi, v); }
          }
  if (!isfinite(ylo)) { ylo = 1e-3; yhi = 1; }
  for (int di = 0; f && di < s->ndepths; di++) {
    char title[96];
    snprintf(title, sizeof title, "%d layers: gradient norm of W2", s->depths[di]);
    svg_panel pn = {90.0 + (di % cols) * (PW + 110), 40.0 + (di / cols) * (PH + 90), PW, PH, 0.5, s->depths[di] + 0.5,
                    ylo / 1.5, yhi * 1.5, 0, 1, NULL, "layer", "||dL/dW2||", s->ed ? 140 : 110};
    pn.title = title;
    svg_axes(f, &pn);
    for (int sk = 0; sk < nstacks(s); sk++)
      for (int ni = 0; ni < s->nnorms; ni++) {
        double xs[1000], mu[1000], lo[1000], hi[1000];
        for (int l = 0; l < s->depths[di]; l++) {
          double sd;
          xs[l] = l + 1;
          mean_sd(series(norms, s, sk, Lmax), s, ni, di, l, W2, Lmax, &mu[l], &sd);
          lo[l] = mu[l] - sd > 0 ? mu[l] - sd : mu[l] / 1.5;
          hi[l] = mu[l] + sd;
        }
        const char *col = svg_color(s->norms[ni] == CF_NORM_PRE ? 0 : 1), *dash = sk ? "6,3" : "";
        char label[64];
        snprintf(label, sizeof label, "%s%s%s", norm_name(s->norms[ni]), s->ed ? " " : "", s->ed ? stack_name[sk] : "");
        svg_line(f, &pn, xs, mu, s->depths[di], col, 2, 1, dash);
        if (s->seeds > 1) svg_errorbars(f, &pn, xs, lo, hi, s->depths[di], col);
        svg_legend(f, &pn, sk * s->nnorms + ni, col, dash, label);
      }
  }
  if (f) svg_end(f);
}

/* The reports from the measurements: gradnorm.md, gradnorm.json, gradnorm.svg. */
static cf_status write_reports(const gn_spec *s, double *norms, int Lmax, const char *device, const cf_pair_batch *pb,
                               FILE *report) {
  gn_stat ys[GN_MAX_STACKS][2][32];
  double es[GN_MAX_STACKS][2];
  for (int sk = 0; sk < nstacks(s); sk++) last_w2_scaling(s, series(norms, s, sk, Lmax), Lmax, ys[sk], es[sk]);
  CF_TRY(write_markdown(s, norms, Lmax, device, pb, ys, es));
  if (report) print_scaling(report, s, ys, es);
  char p[1200];
  snprintf(p, sizeof p, "%s/gradnorm.json", s->out);
  json_t *doc = gradnorm_json(norms, s, Lmax, device, ys, es);
  cf_status st = cf_json_write_file(doc, p);
  json_decref(doc);
  if (st == CF_OK) write_svg(s, norms, Lmax);
  if (st == CF_OK && report) fprintf(report, "wrote %s/gradnorm.md, gradnorm.json and gradnorm.svg\n", s->out);
  return st;
}

/* The device, the measurements, the reports. data: the language model's (NULL for an encoder-decoder,
 * whose batches seed_pairs makes once the output directory is there). */
static cf_status gradnorm(const gn_spec *s, const cf_gradnorm_options *o, cf_data *data) {
  int Lmax = 0, B = s->base.data.batch_size, T = s->base.data.seq_len;
  for (int d = 0; d < s->ndepths; d++) Lmax = s->depths[d] > Lmax ? s->depths[d] : Lmax;
  double *norms = calloc((size_t)nstacks(s) * s->nnorms * s->ndepths * s->seeds * Lmax * NQ, sizeof *norms);
  int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  cf_pair_batch *pb = s->ed ? calloc((size_t)s->seeds, sizeof *pb) : NULL;
  cf_context *ctx = NULL;
  cf_status st = norms && in && tg && (pb || !s->ed) ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (st == CF_OK) {
    cf_context_options co = {.device_spec = cf_device_spec_resolve(o->device, s->base.device)};
    st = cf_context_create(&co, &ctx);
  }
  if (st == CF_OK) st = cf_selftest_ensure(ctx);
  if (st == CF_OK) st = cf_mkdirs(s->out);
  if (st == CF_OK && pb) st = seed_pairs(s, pb);
  if (st == CF_OK) st = measure_all(ctx, s, o, data, pb, in, tg, norms, Lmax);
  if (st == CF_OK) st = write_reports(s, norms, Lmax, cf_context_device(ctx)->name, pb, o->report);
  cf_context_free(ctx);
  for (int k = 0; pb && k < s->seeds; k++) cf_pair_batch_free(&pb[k]);
  free(pb);
  free(norms);
  free(in);
  free(tg);
  return st;
}

cf_status cf_gradnorm(const cf_gradnorm_options *o) {
  gn_spec s;
  CF_TRY(parse_gn(&s, o->path, o->sets, o->nsets));
  if (o->seeds) s.seeds = o->seeds;
  if (o->out) snprintf(s.out, sizeof s.out, "%s", o->out);
  if (s.ed) return gradnorm(&s, o, NULL);
  cf_data data;
  CF_TRY(cf_data_open(&data, &s.base));
  cf_status st = gradnorm(&s, o, &data);
  cf_data_close(&data);
  return st;
}

/* The file as cf_gradnorm reads it, every model it would build, and its data; no device. */
cf_status cf_gradnorm_check(const char *path, char **sets, int nsets, FILE *report) {
  gn_spec s;
  CF_TRY(parse_gn(&s, path, sets, nsets));
  for (int ni = 0; ni < s.nnorms; ni++)
    for (int di = 0; di < s.ndepths; di++) {
      cf_config c;  /* the model measure_one builds */
      CF_TRY(depth_config(&s, ni, di, &c));
    }
  CF_TRY(cf_data_check(&s.base));  /* what cf_gradnorm opens */
  if (!report) return CF_OK;
  fprintf(report, "# %s: a gradnorm file:", path);
  for (int ni = 0; ni < s.nnorms; ni++) fprintf(report, "%s %s", ni ? " and" : "", norm_name(s.norms[ni]));
  fprintf(report, " at depths");
  for (int di = 0; di < s.ndepths; di++) fprintf(report, "%s %d", di ? "," : "", s.depths[di]);
  fprintf(report, ", %d seed%s each, into %s: valid; its base resolved (%s are replaced):\n", s.seeds,
          s.seeds == 1 ? "" : "s", s.out,
          s.ed ? "model.norm, model.layers and model.encoder_layers" : "model.norm and model.layers");
  cf_config_write(&s.base, report);
  return CF_OK;
}
