/* The comparison file of `clformer compare` (format in include/clformer/experiments.h and the
 * command's usage): a base config, variants of it, and the report's settings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "clformer/data.h"
#include "clformer/experiments.h"
#include "config/config_yaml.h"
#include "experiments/compare.h"
#include "runtime/runtime.h"

static cf_status scalar(yaml_node_t *n, const char *path, const char *key, const char **out) {
  if (n->type != YAML_SCALAR_NODE)
    return CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: %s: expected a single value", path, n->start_mark.line + 1,
                   n->start_mark.column + 1, key);
  *out = (const char *)n->data.scalar.value;
  return CF_OK;
}

static cf_status key_name(yaml_node_t *k, const char *path, const char **key) {
  if (k->type != YAML_SCALAR_NODE) return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: keys must be plain names", path, k->start_mark.line + 1);
  *key = (const char *)k->data.scalar.value;
  return CF_OK;
}

/* One of target_loss, plateau_after, seeds, bleu_lines, out. */
static cf_status report_setting(spec *s, const char *key, yaml_node_t *v, const char *path) {
  const char *val = NULL;
  char *end;
  CF_TRY(scalar(v, path, key, &val));
  if (!strcmp(key, "target_loss")) {
    s->target_loss = strtod(val, &end);
    if (*end || !(s->target_loss > 0))
      return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: target_loss: expected a positive number, got '%s'", path, v->start_mark.line + 1, val);
  } else if (!strcmp(key, "out")) {
    snprintf(s->out, sizeof s->out, "%s", val);
  } else {
    int seeds = key[0] == 's';
    long x = strtol(val, &end, 10);
    if (*end || x < (seeds ? 1 : 0) || x > 1000000)
      return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: %s: expected a %s integer, got '%s'", path, v->start_mark.line + 1, key,
                     seeds ? "positive" : "non-negative", val);
    *(seeds ? &s->seeds : !strcmp(key, "bleu_lines") ? &s->bleu_lines : &s->plateau_after) = (int)x;
  }
  return CF_OK;
}

/* The top level: base (into s->base), variants (left in *vars for later), the report's settings. */
static cf_status parse_top(spec *s, yaml_document_t *doc, const char *path, yaml_node_t **vars) {
  yaml_node_t *root = yaml_document_get_root_node(doc);
  if (!root || root->type != YAML_MAPPING_NODE) return CF_FAIL(CF_ERR_CONFIG, "%s: expected a mapping with base: and variants:", path);
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
    const char *key = NULL;
    CF_TRY(key_name(k, path, &key));
    if (!strcmp(key, "base")) CF_TRY(cf_config_apply_node(&s->base, doc, v, path));
    else if (!strcmp(key, "variants")) *vars = v;
    else if (!strcmp(key, "target_loss") || !strcmp(key, "plateau_after") || !strcmp(key, "seeds") ||
             !strcmp(key, "bleu_lines") || !strcmp(key, "out"))
      CF_TRY(report_setting(s, key, v, path));
    else
      return CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: unknown key '%s' (a comparison has base, variants, target_loss, "
                     "plateau_after, seeds, bleu_lines, out)", path, k->start_mark.line + 1, k->start_mark.column + 1, key);
  }
  return CF_OK;
}

static cf_status variant_name(variant *var, yaml_node_t *v, const char *path) {
  const char *val = NULL;
  CF_TRY(scalar(v, path, "name", &val));
  size_t n = strlen(val);
  int ok = n > 0 && n < sizeof var->name && val[0] != '.' &&
           strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
  if (!ok)
    return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variant name '%s': use letters, digits, '-', '_' and '.' (it names a directory)",
                   path, v->start_mark.line + 1, val);
  snprintf(var->name, sizeof var->name, "%s", val);
  return CF_OK;
}

/* variants[i]: {name, set} over the base, named uniquely, validated. */
static cf_status parse_variant(spec *s, yaml_document_t *doc, yaml_node_t *item, int i, const char *path) {
  variant *var = &s->v[s->nv];
  var->cfg = s->base;
  if (item->type != YAML_MAPPING_NODE)
    return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variants[%d]: expected {name: ..., set: {...}}", path, item->start_mark.line + 1, i);
  for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
    const char *key = NULL;
    CF_TRY(key_name(k, path, &key));
    if (!strcmp(key, "name")) CF_TRY(variant_name(var, v, path));
    else if (!strcmp(key, "set")) {
      CF_TRY(cf_config_apply_node(&var->cfg, doc, v, path));
      CF_TRY(cf_config_resolve_paths(&var->cfg, path));
    } else
      return CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: unknown key '%s' in a variant (expected name and set)", path,
                     k->start_mark.line + 1, k->start_mark.column + 1, key);
  }
  if (!var->name[0]) return CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variants[%d] has no name", path, item->start_mark.line + 1, i);
  for (int j = 0; j < s->nv; j++)
    if (!strcmp(s->v[j].name, var->name)) return CF_FAIL(CF_ERR_CONFIG, "%s: two variants are named '%s'", path, var->name);
  CF_TRY(cf_config_validate(&var->cfg));
  s->nv++;
  return CF_OK;
}

static cf_status parse_variants(spec *s, yaml_document_t *doc, yaml_node_t *vars, const char *path) {
  if (!vars || vars->type != YAML_SEQUENCE_NODE || vars->data.sequence.items.top == vars->data.sequence.items.start)
    return CF_FAIL(CF_ERR_CONFIG, "%s: variants: expected a non-empty list of {name, set}", path);
  int nv = (int)(vars->data.sequence.items.top - vars->data.sequence.items.start);
  if (!(s->v = calloc((size_t)nv, sizeof *s->v))) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < nv; i++)
    CF_TRY(parse_variant(s, doc, yaml_document_get_node(doc, vars->data.sequence.items.start[i]), i, path));
  return CF_OK;
}

static cf_status parse_document(spec *s, yaml_document_t *doc, const char *path, char **sets, int nsets) {
  yaml_node_t *vars = NULL;
  CF_TRY(parse_top(s, doc, path, &vars));
  CF_TRY(cf_config_resolve_paths(&s->base, path));
  for (int i = 0; i < nsets; i++) CF_TRY(cf_config_set(&s->base, sets[i]));
  CF_TRY(parse_variants(s, doc, vars, path));
  if (!s->out[0]) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(s->out, sizeof s->out, "runs/%.*s", (int)strcspn(b, "."), b);
  }
  return CF_OK;
}

cf_status compare_parse_spec(spec *s, const char *path, char **sets, int nsets) {
  memset(s, 0, sizeof *s);
  s->target_loss = NAN;
  s->plateau_after = 100;
  s->seeds = 1;
  cf_config_defaults(&s->base);
  yaml_document_t doc;
  CF_TRY(cf_yaml_load_file(path, &doc));
  cf_status st = parse_document(s, &doc, path, sets, nsets);
  yaml_document_delete(&doc);
  return st;
}

cf_status cf_compare_check(const char *path, char **sets, int nsets, FILE *report) {
  spec s;
  cf_status st = compare_parse_spec(&s, path, sets, nsets);  /* validates every variant */
  if (st == CF_OK) st = cf_data_check(&s.base);               /* what cf_compare opens first */
  for (int i = 0; st == CF_OK && i < s.nv; i++) st = cf_data_check(&s.v[i].cfg);  /* what each run opens */
  if (st == CF_OK && report) {
    fprintf(report, "# %s: a comparison of %d variant%s, %d seed%s each, into %s: valid; each variant resolved:\n", path,
            s.nv, s.nv == 1 ? "" : "s", s.seeds, s.seeds == 1 ? "" : "s", s.out);
    for (int i = 0; i < s.nv; i++) {  /* train.out: where compare runs it (its first seed) */
      cf_config c = s.v[i].cfg;
      compare_run_dir(&s, i, 0, c.train.out, sizeof c.train.out);
      fprintf(report, "--- # variant %s\n", s.v[i].name);
      cf_config_write(&c, report);
    }
  }
  free(s.v);
  return st;
}
