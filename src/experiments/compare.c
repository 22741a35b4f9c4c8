/* `clformer compare`: the warm-up comparison of Xiong et al. (2020), Section 3.2 / Figure 2, on a
 * language model. One YAML file names a base config and variants (sets of key overrides); each
 * variant (times each seed) is an ordinary training run in OUT/<variant>[/seed<S>]; finished runs
 * are skipped and unfinished ones resumed. Then summary.md, summary.json and curves.svg. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>
#include "clformer/data.h"
#include "clformer/check.h"
#include "clformer/experiments.h"
#include "clformer/train.h"
#include "config/config_yaml.h"
#include "runtime/runtime.h"
#include "experiments/svg.h"
#include "train/records.h"

typedef struct variant {
  char name[64];
  cf_config cfg;
} variant;

typedef struct spec {
  cf_config base;
  variant *v;
  int nv;
  double target_loss;   /* NAN: none */
  int plateau_after;    /* steps after which a loss near the unigram entropy counts as a plateau */
  int seeds;
  char out[1024];
} spec;

/* One run's record, read back from its metrics.csv and run.json. */
typedef struct run_rec {
  int present, diverged, plateaued, too_short, steps_done, step_to_target;
  double final_valid, best_valid, wall_s, tokens_per_s;
  int n;                  /* metric rows */
  double *step, *lr, *train, *valid;
} run_rec;

/* ---------- the comparison file ---------- */

static cf_status scalar(yaml_document_t *doc, yaml_node_t *n, const char *path, const char *key, const char **out) {
  if (n->type != YAML_SCALAR_NODE)
    return CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: %s: expected a single value", path, n->start_mark.line + 1,
                   n->start_mark.column + 1, key);
  *out = (const char *)n->data.scalar.value;
  (void)doc;
  return CF_OK;
}

static cf_status parse_spec(spec *s, const char *path, char **sets, int nsets) {
  memset(s, 0, sizeof *s);
  s->target_loss = NAN;
  s->plateau_after = 100;
  s->seeds = 1;
  cf_config_defaults(&s->base);
  yaml_document_t doc;
  CF_TRY(cf_yaml_load_file(path, &doc));
  cf_status st = CF_OK;
  yaml_node_t *root = yaml_document_get_root_node(&doc), *vars = NULL;
  if (!root || root->type != YAML_MAPPING_NODE) {
    st = CF_FAIL(CF_ERR_CONFIG, "%s: expected a mapping with base: and variants:", path);
    goto done;
  }
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top && st == CF_OK; p++) {
    yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
    if (k->type != YAML_SCALAR_NODE) { st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: keys must be plain names", path, k->start_mark.line + 1); break; }
    const char *key = (const char *)k->data.scalar.value, *val = NULL;
    char *end;
    if (!strcmp(key, "base")) st = cf_config_apply_node(&s->base, &doc, v, path);
    else if (!strcmp(key, "variants")) vars = v;
    else if (!strcmp(key, "target_loss")) {
      if ((st = scalar(&doc, v, path, key, &val)) == CF_OK) {
        s->target_loss = strtod(val, &end);
        if (*end || !(s->target_loss > 0))
          st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: target_loss: expected a positive number, got '%s'", path, v->start_mark.line + 1, val);
      }
    } else if (!strcmp(key, "plateau_after") || !strcmp(key, "seeds")) {
      if ((st = scalar(&doc, v, path, key, &val)) == CF_OK) {
        long x = strtol(val, &end, 10);
        if (*end || x < (key[0] == 's' ? 1 : 0) || x > 1000000)
          st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: %s: expected a %s integer, got '%s'", path, v->start_mark.line + 1, key,
                       key[0] == 's' ? "positive" : "non-negative", val);
        else if (key[0] == 's') s->seeds = (int)x;
        else s->plateau_after = (int)x;
      }
    } else if (!strcmp(key, "out")) {
      if ((st = scalar(&doc, v, path, key, &val)) == CF_OK) snprintf(s->out, sizeof s->out, "%s", val);
    } else
      st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: unknown key '%s' (a comparison has base, variants, target_loss, "
                   "plateau_after, seeds, out)", path, k->start_mark.line + 1, k->start_mark.column + 1, key);
  }
  if (st != CF_OK) goto done;
  if ((st = cf_config_resolve_paths(&s->base, path)) != CF_OK) goto done;
  for (int i = 0; i < nsets && st == CF_OK; i++) st = cf_config_set(&s->base, sets[i]);
  if (st != CF_OK) goto done;
  if (!vars || vars->type != YAML_SEQUENCE_NODE || vars->data.sequence.items.top == vars->data.sequence.items.start) {
    st = CF_FAIL(CF_ERR_CONFIG, "%s: variants: expected a non-empty list of {name, set}", path);
    goto done;
  }
  int nv = (int)(vars->data.sequence.items.top - vars->data.sequence.items.start);
  s->v = calloc((size_t)nv, sizeof *s->v);
  if (!s->v) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  for (int i = 0; i < nv && st == CF_OK; i++) {
    yaml_node_t *item = yaml_document_get_node(&doc, vars->data.sequence.items.start[i]);
    variant *var = &s->v[s->nv];
    var->cfg = s->base;
    if (item->type != YAML_MAPPING_NODE) {
      st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variants[%d]: expected {name: ..., set: {...}}", path, item->start_mark.line + 1, i);
      break;
    }
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top && st == CF_OK; p++) {
      yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
    if (k->type != YAML_SCALAR_NODE) { st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: keys must be plain names", path, k->start_mark.line + 1); break; }
      const char *key = (const char *)k->data.scalar.value, *val = NULL;
      if (!strcmp(key, "name")) {
        if ((st = scalar(&doc, v, path, key, &val)) != CF_OK) break;
        size_t n = strlen(val);
        int okname = n > 0 && n < sizeof var->name && strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n && val[0] != '.';
        if (!okname)
          st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variant name '%s': use letters, digits, '-', '_' and '.' (it names a directory)",
                       path, v->start_mark.line + 1, val);
        else snprintf(var->name, sizeof var->name, "%s", val);
      } else if (!strcmp(key, "set")) {
        st = cf_config_apply_node(&var->cfg, &doc, v, path);
        if (st == CF_OK) st = cf_config_resolve_paths(&var->cfg, path);
      } else
        st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: unknown key '%s' in a variant (expected name and set)", path,
                     k->start_mark.line + 1, k->start_mark.column + 1, key);
    }
    if (st != CF_OK) break;
    if (!var->name[0]) { st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu: variants[%d] has no name", path, item->start_mark.line + 1, i); break; }
    for (int j = 0; j < s->nv; j++)
      if (!strcmp(s->v[j].name, var->name)) st = CF_FAIL(CF_ERR_CONFIG, "%s: two variants are named '%s'", path, var->name);
    if (st == CF_OK) st = cf_config_validate(&var->cfg);
    if (st == CF_OK) s->nv++;
  }
  if (st == CF_OK && !s->out[0]) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(s->out, sizeof s->out, "runs/%.*s", (int)strcspn(b, "."), b);
  }
done:
  yaml_document_delete(&doc);
  return st;
}

/* ---------- runs ---------- */

static int exists(const char *dir, const char *file) {
  char p[2200];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", dir, file);
  return stat(p, &sb) == 0;
}

/* OUT/<variant> with one seed, OUT/<variant>/seed<s> with several. The base seed's run is found in
 * the other place when only that one holds it, so changing --seeds between 1 and N reuses the run
 * instead of training it again (the other seeds' directories then sit beside its files). */
static void run_dir(const spec *s, int vi, int seed_k, char *buf, size_t n) {
  char single[1100], seeded[1200];
  snprintf(single, sizeof single, "%s/%s", s->out, s->v[vi].name);
  snprintf(seeded, sizeof seeded, "%s/seed%llu", single, s->v[vi].cfg.seed + (unsigned long long)seed_k);
  int use_seeded = s->seeds > 1;
  if (seed_k == 0 && exists(single, "config.yaml") != exists(seeded, "config.yaml"))
    use_seeded = exists(seeded, "config.yaml");
  snprintf(buf, n, "%s", use_seeded ? seeded : single);
}

/* "finished", "diverged", "interrupted", or "" (no readable run.json) */
static void run_status(const char *dir, char *status, size_t n) {
  cf_run_record rec;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  snprintf(status, n, "%s", cf_run_record_read(dir, &rec) == CF_OK ? rec.status : "");
  cf_set_verbosity(v);
  cf_clear_error();
}

/* A run already in dir must be of variant vi's config (seed k), or its numbers would be mislabelled.
 * Only train.steps may differ, upwards: a shorter run is extended; a longer one would be reported
 * as this comparison's (its final loss averaged with runs of fewer steps), so it is refused too.
 * *saved_steps: the run's steps, 0 when dir holds no run. */
static cf_status check_run(const spec *s, int vi, int k, const char *dir, int *saved_steps) {
  *saved_steps = 0;
  if (!exists(dir, "config.yaml")) return CF_OK;
  cf_config c = s->v[vi].cfg, saved;
  c.seed += (unsigned long long)k;
  char p[1300], key[64], was[1100], now[1100];
  cf_config_defaults(&saved);
  snprintf(p, sizeof p, "%s/config.yaml", dir);
  if (cf_config_load(&saved, p) != CF_OK || cf_config_validate(&saved) != CF_OK) return CF_ERR_CONFIG;
  if (cf_config_first_difference(&saved, &c, key, was, now))
    return CF_FAIL(CF_ERR_CONFIG, "%s holds a run with %s = %s, but variant '%s' now says %s: move that run away "
                   "or choose another out", dir, key, was, s->v[vi].name, now);
  if (saved.train.steps > c.train.steps)
    return CF_FAIL(CF_ERR_CONFIG, "%s holds a run of %d steps, but variant '%s' now runs %d: a longer run would be "
                   "reported as a shorter one; set train.steps=%d, or move that run away or choose another out", dir,
                   saved.train.steps, s->v[vi].name, c.train.steps, saved.train.steps);
  *saved_steps = saved.train.steps;
  return CF_OK;
}

static void read_run(const spec *s, const cf_config *cfg, const char *dir, double entropy, run_rec *r) {
  memset(r, 0, sizeof *r);
  r->final_valid = r->best_valid = NAN;
  r->step_to_target = -1;
  char status[32];
  run_status(dir, status, sizeof status);
  cf_metrics_row *rows;
  if ((strcmp(status, "finished") && strcmp(status, "diverged")) || cf_metrics_read(dir, &rows, &r->n) != CF_OK) return;
  r->step = malloc((size_t)(r->n + 1) * sizeof(double));
  r->lr = malloc((size_t)(r->n + 1) * sizeof(double));
  r->train = malloc((size_t)(r->n + 1) * sizeof(double));
  r->valid = malloc((size_t)(r->n + 1) * sizeof(double));
  if (!r->step || !r->lr || !r->train || !r->valid) r->n = 0;
  for (int i = 0; i < r->n; i++) {
    const cf_metrics_row *w = &rows[i];
    r->step[i] = w->step;
    r->lr[i] = w->lr;
    r->train[i] = w->train_loss;
    r->valid[i] = w->valid_loss;
    r->wall_s = w->wall_s;
    r->steps_done = w->step;
    if (isfinite(w->valid_loss)) {
      r->final_valid = w->valid_loss;
      if (!(w->valid_loss >= r->best_valid)) r->best_valid = w->valid_loss;
      if (r->step_to_target < 0 && isfinite(s->target_loss) && w->valid_loss <= s->target_loss) r->step_to_target = w->step;
    }
  }
  free(rows);
  /* the run's average speed (a resumed run's wall time spans its sessions) */
  r->tokens_per_s = r->wall_s > 0 ? (double)r->steps_done * cfg->data.batch_size * cfg->data.seq_len / r->wall_s : NAN;
  r->present = 1;
  r->diverged = !strcmp(status, "diverged");
  int stuck = !r->diverged && isfinite(r->final_valid) && r->final_valid >= entropy - 0.05;
  r->plateaued = stuck && r->steps_done >= s->plateau_after;
  r->too_short = stuck && !r->plateaued;
}

static void free_run(run_rec *r) {
  free(r->step);
  free(r->lr);
  free(r->train);
  free(r->valid);
}

/* ---------- the report ---------- */

typedef struct agg {
  int runs, diverged, plateaued, too_short, reached;
  double final_mean, final_sd, best_mean, best_sd, target_mean, wall_mean, tps_mean;
} agg;

static agg aggregate(const run_rec *r, int n) {
  agg a = {0};
  double sf = 0, sf2 = 0, sb = 0, sb2 = 0, st = 0, sw = 0, stps = 0;
  int nf = 0;
  for (int i = 0; i < n; i++) {
    if (!r[i].present) continue;
    a.runs++;
    a.diverged += r[i].diverged;
    a.plateaued += r[i].plateaued;
    a.too_short += r[i].too_short;
    sw += r[i].wall_s;
    stps += r[i].tokens_per_s;
    if (r[i].step_to_target >= 0) { a.reached++; st += r[i].step_to_target; }
    if (!r[i].diverged && isfinite(r[i].final_valid)) {
      nf++;
      sf += r[i].final_valid; sf2 += r[i].final_valid * r[i].final_valid;
      sb += r[i].best_valid; sb2 += r[i].best_valid * r[i].best_valid;
    }
  }
  a.final_mean = nf ? sf / nf : NAN;
  a.best_mean = nf ? sb / nf : NAN;
  a.final_sd = nf > 1 ? sqrt(fmax(0, (sf2 - sf * sf / nf) / (nf - 1))) : 0;
  a.best_sd = nf > 1 ? sqrt(fmax(0, (sb2 - sb * sb / nf) / (nf - 1))) : 0;
  a.target_mean = a.reached ? st / a.reached : NAN;
  a.wall_mean = a.runs ? sw / a.runs : NAN;
  a.tps_mean = a.runs ? stps / a.runs : NAN;
  return a;
}

static const char *verdict(const agg *a) {
  if (!a->runs) return "not finished";
  if (a->diverged == a->runs) return "diverged";
  if (a->plateaued == a->runs) return "plateaued";
  if (a->too_short == a->runs) return "not below the plateau yet (shorter than plateau_after)";
  if (a->diverged || a->plateaued || a->too_short) return "mixed";
  return "trained";
}

static void pm(char *buf, size_t n, double mean, double sd, int runs) {
  if (!isfinite(mean)) snprintf(buf, n, "-");
  else if (runs > 1) snprintf(buf, n, "%.3f ± %.3f", mean, sd);
  else snprintf(buf, n, "%.3f", mean);
}

static void describe(const variant *v, char *buf, size_t n) {
  snprintf(buf, n, "%s-LN, lr %g, %s", v->cfg.model.norm == CF_NORM_PRE ? "Pre" : "Post", v->cfg.optim.lr,
           v->cfg.schedule.warmup ? "warm-up" : "no warm-up");
  if (v->cfg.schedule.warmup) snprintf(buf + strlen(buf), n - strlen(buf), " %d", v->cfg.schedule.warmup);
}

static void write_reading(FILE *f, const spec *s, const agg *a, double entropy) {
  /* Which variants trained without warm-up, which failed, and how much warm-up mattered for pairs
   * that differ only in it. */
  char trained[2048] = "", failed[2048] = "";
  for (int i = 0; i < s->nv; i++) {
    if (s->v[i].cfg.schedule.warmup || !a[i].runs) continue;
    char d[160];
    describe(&s->v[i], d, sizeof d);
    const char *vd = verdict(&a[i]);
    char *dst = !strcmp(vd, "trained") ? trained : failed;
    size_t len = strlen(dst);
    if (dst == trained) snprintf(dst + len, 2048 - len, "%s%s (%s)", len ? "; " : "", s->v[i].name, d);
    else snprintf(dst + len, 2048 - len, "%s%s (%s: %s in %d of %d runs)", len ? "; " : "", s->v[i].name, d,
                  a[i].plateaued ? "plateaued near the unigram entropy" : a[i].diverged ? "diverged" : vd,
                  a[i].plateaued ? a[i].plateaued : a[i].diverged, a[i].runs);
  }
  fprintf(f, "**Reading.** The unigram entropy of the training text is %.3f nats per byte: a model that only "
             "learned byte frequencies sits there. ", entropy);
  if (trained[0]) fprintf(f, "Trained without warm-up: %s. ", trained);
  if (failed[0]) fprintf(f, "Failed without warm-up: %s. ", failed);
  for (int i = 0; i < s->nv; i++) {
    if (s->v[i].cfg.schedule.warmup || !a[i].runs) continue;
    for (int j = 0; j < s->nv; j++) {
      const cf_config *x = &s->v[i].cfg, *y = &s->v[j].cfg;
      if (!y->schedule.warmup || !a[j].runs || x->model.norm != y->model.norm || x->optim.lr != y->optim.lr) continue;
      fprintf(f, "%s-LN at lr %g: with %d warm-up steps the final validation loss is %.3f, without it %.3f "
                 "(%s by %.3f nats). ", x->model.norm == CF_NORM_PRE ? "Pre" : "Post", x->optim.lr, y->schedule.warmup,
              a[j].final_mean, a[i].final_mean, a[j].final_mean < a[i].final_mean ? "warm-up better" : "warm-up worse",
              fabs(a[i].final_mean - a[j].final_mean));
    }
  }
  int best = -1;
  for (int i = 0; i < s->nv; i++)
    if (a[i].runs && isfinite(a[i].final_mean) && (best < 0 || a[i].final_mean < a[best].final_mean)) best = i;
  if (best >= 0) fprintf(f, "Lowest final validation loss: %s (%.3f). ", s->v[best].name, a[best].final_mean);
  if (isfinite(s->target_loss)) {
    int fast = -1;
    for (int i = 0; i < s->nv; i++)
      if (a[i].reached && (fast < 0 || a[i].target_mean < a[fast].target_mean)) fast = i;
    if (fast >= 0) fprintf(f, "First to reach the target loss %.2f: %s (step %.0f).", s->target_loss, s->v[fast].name,
                           a[fast].target_mean);
    else fprintf(f, "No variant reached the target loss %.2f.", s->target_loss);
  }
  fputs("\n", f);
}

static void write_svg(const spec *s, run_rec **runs, double entropy, int log_steps, const char *path) {
  int W = 960, H = 760;
  FILE *f = svg_begin(path, W, H);
  if (!f) return;
  int maxstep = 1;
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < s->nv; i++) {
    if (s->v[i].cfg.train.steps > maxstep) maxstep = s->v[i].cfg.train.steps;
    for (int k = 0; k < s->seeds; k++)
      for (int j = 0; j < runs[i][k].n; j++) {
        double v = runs[i][k].valid[j], t = runs[i][k].train[j];
        if (isfinite(v)) { lo = fmin(lo, v); hi = fmax(hi, v); }
        if (isfinite(t)) { lo = fmin(lo, t); hi = fmax(hi, t); }
      }
  }
  if (!isfinite(lo)) { lo = 0; hi = 6; }
  hi = fmin(fmax(hi, entropy + 0.3), 6.0);
  lo = fmax(0, lo - 0.1);
  svg_panel top = {95, 40, W - 125, 420, log_steps ? 1 : 0, maxstep, lo, hi, log_steps, 0,
                   "Validation loss (solid) and training loss (light) per variant", log_steps ? "step (log scale)" : "step",
                   "loss (nats per byte)", 0};
  size_t longest = 0;
  for (int i = 0; i < s->nv; i++) {
    char d[160];
    describe(&s->v[i], d, sizeof d);
    if (strlen(s->v[i].name) + strlen(d) + 3 > longest) longest = strlen(s->v[i].name) + strlen(d) + 3;
  }
  top.legend_w = 6.3 * (double)longest + 44;
  svg_axes(f, &top);
  double ex[2] = {top.xmin, top.xmax}, ey[2] = {entropy, entropy};
  svg_line(f, &top, ex, ey, 2, "#888888", 1, 1, "4,4");
  svg_text(f, top.x + 6, top.y + top.h - (entropy - lo) / (hi - lo) * top.h - 4, "unigram entropy", 10, "start");
  for (int i = 0; i < s->nv; i++) {
    for (int k = 0; k < s->seeds; k++) {
      run_rec *r = &runs[i][k];
      if (!r->present) continue;
      double *vx = malloc((size_t)r->n * sizeof *vx), *vy = malloc((size_t)r->n * sizeof *vy);
      int m = 0;
      for (int j = 0; j < r->n; j++)
        if (isfinite(r->valid[j])) { vx[m] = r->step[j]; vy[m++] = r->valid[j]; }
      svg_line(f, &top, r->step, r->train, r->n, svg_color(i), 1, 0.3, "");
      svg_line(f, &top, vx, vy, m, svg_color(i), 2, 1, "");
      free(vx);
      free(vy);
    }
    char label[260], d[160];
    describe(&s->v[i], d, sizeof d);
    snprintf(label, sizeof label, "%s (%s)", s->v[i].name, d);
    svg_legend(f, &top, i, svg_color(i), "", label);
  }
  /* the learning-rate schedules, computed from each variant's config */
  double lrmax = 0;
  for (int i = 0; i < s->nv; i++) lrmax = fmax(lrmax, s->v[i].cfg.optim.lr);
  svg_panel bot = {95, 540, W - 125, 170, log_steps ? 1 : 0, maxstep, 0, lrmax * 1.1, log_steps, 0, "Learning-rate schedule",
                   "step", "learning rate", 0};
  svg_axes(f, &bot);
  int np = 400;
  double *xs = malloc((size_t)np * sizeof *xs), *ys = malloc((size_t)np * sizeof *ys);
  for (int i = 0; i < s->nv; i++) {
    for (int j = 0; j < np; j++) {
      int st = log_steps ? (int)round(pow(10, log10((double)s->v[i].cfg.train.steps) * (j + 1) / np))
                         : 1 + (int)((double)(s->v[i].cfg.train.steps - 1) * j / (np - 1));
      if (st < 1) st = 1;
      xs[j] = st;
      ys[j] = cf_config_lr(&s->v[i].cfg, st);
    }
    svg_line(f, &bot, xs, ys, np, svg_color(i), 2, 0.9, i % 2 ? "6,3" : "");
  }
  free(xs);
  free(ys);
  svg_end(f);
}

/* summary.json, one run's row. */
static json_t *run_json(const spec *s, int i, int k, const run_rec *r) {
  char dir[1200];
  run_dir(s, i, k, dir, sizeof dir);
  unsigned long long seed = s->v[i].cfg.seed + (unsigned long long)k;
  return json_pack("{s:o, s:o, s:i, s:o, s:o, s:o, s:b, s:b, s:o, s:o}", "seed",
                   (long long)seed >= 0 ? json_integer((json_int_t)seed) : json_real((double)seed), "dir",
                   cf_json_str(dir), "steps_done", r->steps_done, "final_valid", cf_json_num(r->final_valid, "%.6g"),
                   "best_valid", cf_json_num(r->best_valid, "%.6g"), "step_to_target",
                   r->step_to_target >= 0 ? json_integer(r->step_to_target) : json_null(), "diverged", r->diverged,
                   "plateaued", r->plateaued, "wall_s", cf_json_num(r->wall_s, "%.3f"), "tokens_per_s",
                   cf_json_num(r->tokens_per_s, "%.1f"));
}

/* summary.json, one variant: its settings, the means over its runs, and the runs present. */
static json_t *variant_json(const spec *s, int i, const agg *a, const run_rec *runs) {
  const cf_config *c = &s->v[i].cfg;
  json_t *rows = json_array();
  int bad = !rows;
  for (int k = 0; k < s->seeds; k++)
    if (runs[k].present) bad |= json_array_append_new(rows, run_json(s, i, k, &runs[k]));
  json_t *mean = json_pack("{s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:o, s:o}", "final_valid",
                           cf_json_num(a->final_mean, "%.6g"), "final_valid_sd", cf_json_num(a->final_sd, "%.6g"),
                           "best_valid", cf_json_num(a->best_mean, "%.6g"), "step_to_target",
                           cf_json_num(a->target_mean, "%.6g"), "runs", a->runs, "diverged", a->diverged, "plateaued",
                           a->plateaued, "wall_s", cf_json_num(a->wall_mean, "%.6g"), "tokens_per_s",
                           cf_json_num(a->tps_mean, "%.6g"));
  json_t *v = json_pack("{s:o, s:s, s:o, s:i, s:i, s:s, s:o, s:o}", "name", cf_json_str(s->v[i].name), "norm",
                        c->model.norm == CF_NORM_PRE ? "pre" : "post", "lr", cf_json_num(c->optim.lr, "%g"), "warmup",
                        c->schedule.warmup, "steps", c->train.steps, "result", verdict(a), "mean", mean, "runs", rows);
  if (bad) json_decref(v);
  return bad ? NULL : v;
}

/* summary.json: the numbers of summary.md for scripts; NULL when out of memory. */
static json_t *summary_json(const spec *s, run_rec **runs, const agg *a, double entropy) {
  json_t *variants = json_array();
  int bad = !variants;
  for (int i = 0; i < s->nv; i++) bad |= json_array_append_new(variants, variant_json(s, i, &a[i], runs[i]));
  json_t *doc = json_pack("{s:o, s:o, s:i, s:i, s:o}", "unigram_entropy", cf_json_num(entropy, "%.6g"), "target_loss",
                          cf_json_num(s->target_loss, "%.6g"), "plateau_after", s->plateau_after, "seeds", s->seeds,
                          "variants", variants);
  if (bad) json_decref(doc);
  return bad ? NULL : doc;
}

static cf_status write_report(const spec *s, run_rec **runs, double entropy, int log_steps) {
  agg *a = calloc((size_t)(unsigned)s->nv, sizeof *a);
  if (!a) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < s->nv; i++) a[i] = aggregate(runs[i], s->seeds);
  char path[2300];
  /* summary.md */
  snprintf(path, sizeof path, "%s/summary.md", s->out);
  FILE *f = fopen(path, "w");
  if (!f) { free(a); return CF_FAIL(CF_ERR_IO, "cannot write %s", path); }
  fprintf(f, "# Warm-up comparison: %s\n\n", s->out);
  fprintf(f, "%d variant(s), %d seed(s) each. Unigram entropy of the training text: %.3f nats/byte. ", s->nv, s->seeds, entropy);
  if (isfinite(s->target_loss)) fprintf(f, "Target validation loss: %.3f. ", s->target_loss);
  fprintf(f, "A run is *plateaued* when its final validation loss is within 0.05 of the unigram entropy (or above) after "
             "at least %d steps, *diverged* when its loss or gradient became non-finite or exceeded 3 ln 256.\n\n",
          s->plateau_after);
  fprintf(f, "| variant | placement | lr | warm-up | final valid | best valid | step to target | result | wall time | tokens/s |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < s->nv; i++) {
    const cf_config *c = &s->v[i].cfg;
    char fv[64], bv[64], tg[64], res[160];
    pm(fv, sizeof fv, a[i].final_mean, a[i].final_sd, a[i].runs);
    pm(bv, sizeof bv, a[i].best_mean, a[i].best_sd, a[i].runs);
    if (!isfinite(s->target_loss)) snprintf(tg, sizeof tg, "-");
    else if (a[i].reached == 0) snprintf(tg, sizeof tg, "never");
    else if (s->seeds > 1) snprintf(tg, sizeof tg, "%.0f (%d/%d runs)", a[i].target_mean, a[i].reached, a[i].runs);
    else snprintf(tg, sizeof tg, "%.0f", a[i].target_mean);
    if (s->seeds > 1 && a[i].runs) snprintf(res, sizeof res, "%s (%d plateaued, %d diverged of %d)", verdict(&a[i]),
                                            a[i].plateaued, a[i].diverged, a[i].runs);
    else snprintf(res, sizeof res, "%s", verdict(&a[i]));
    char wall[32] = "-", tps[32] = "-";
    if (isfinite(a[i].wall_mean)) snprintf(wall, sizeof wall, "%.0f s", a[i].wall_mean);
    if (isfinite(a[i].tps_mean)) snprintf(tps, sizeof tps, "%.0f", a[i].tps_mean);
    fprintf(f, "| %s | %s-LN | %g | %d | %s | %s | %s | %s | %s | %s |\n", s->v[i].name,
            c->model.norm == CF_NORM_PRE ? "Pre" : "Post", c->optim.lr, c->schedule.warmup, fv, bv, tg, res, wall, tps);
  }
  fputs("\n", f);
  write_reading(f, s, a, entropy);
  fprintf(f, "\nCurves: [curves.svg](curves.svg). Numbers for scripts: summary.json. Each run's metrics.csv, config.yaml, "
             "run.json and checkpoint are in its directory.\n");
  fclose(f);
  /* summary.json */
  snprintf(path, sizeof path, "%s/summary.json", s->out);
  json_t *doc = summary_json(s, runs, a, entropy);
  cf_status st = cf_json_write_file(doc, path);
  json_decref(doc);
  if (st != CF_OK) {
    free(a);
    return st;
  }
  snprintf(path, sizeof path, "%s/curves.svg", s->out);
  write_svg(s, runs, entropy, log_steps, path);
  free(a);
  return CF_OK;
}

static void remove_leftovers(const char *dir) {
  /* a run that stopped before its first checkpoint: only our own logs to clear, nothing to keep */
  const char *files[] = {"metrics.csv", "config.yaml"};
  for (int i = 0; i < 2; i++) {
    char p[2200];
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    unlink(p);
  }
}

/* The index of the variant named `only` (-1 for NULL: all of them). */
static cf_status find_variant(const spec *s, const char *only, int *index) {
  *index = -1;
  if (!only) return CF_OK;
  for (int i = 0; i < s->nv; i++)
    if (!strcmp(s->v[i].name, only)) *index = i;
  if (*index >= 0) return CF_OK;
  char names[1024] = "";
  for (int i = 0; i < s->nv; i++) snprintf(names + strlen(names), sizeof names - strlen(names), " %s", s->v[i].name);
  return CF_FAIL(CF_ERR_CONFIG, "no variant named '%s'; the variants are:%s", only, names);
}

static int finished(const char *status) { return !strcmp(status, "finished") || !strcmp(status, "diverged"); }

/* Steps still to train over the runs this command covers, for the comparison's ETA. */
static long steps_remaining(const spec *s, int only_i) {
  long remaining = 0;
  for (int i = 0; i < s->nv; i++)
    for (int k = 0; k < s->seeds; k++) {
      char dir[1200], status[32];
      if (only_i >= 0 && i != only_i) continue;
      run_dir(s, i, k, dir, sizeof dir);
      run_status(dir, status, sizeof status);
      if (!finished(status)) remaining += s->v[i].cfg.train.steps;
    }
  return remaining;
}

/* Variant i, seed k: skipped when done, else trained or resumed into its directory. */
static cf_status train_one(cf_context *ctx, const spec *s, const cf_compare_options *o, int i, int k,
                           const char *label, long *remaining, int *interrupted) {
  char dir[1200], status[32];
  run_dir(s, i, k, dir, sizeof dir);
  run_status(dir, status, sizeof status);
  cf_config c = s->v[i].cfg;
  c.seed += (unsigned long long)k;
  int saved_steps = 0;
  CF_TRY(check_run(s, i, k, dir, &saved_steps));
  if (!strcmp(status, "diverged") || (!strcmp(status, "finished") && saved_steps >= c.train.steps)) {
    if (o->report) fprintf(o->report, "%s already %s: skipped\n", label, status);
    return CF_OK;
  }
  if (strlen(dir) >= sizeof c.train.out) return CF_FAIL(CF_ERR_CONFIG, "run directory path too long: %s", dir);
  memcpy(c.train.out, dir, strlen(dir) + 1);
  int resume = exists(dir, "checkpoint.safetensors");
  if (!resume) remove_leftovers(dir);
  *remaining -= c.train.steps;
  cf_train_options to = {.resume_dir = resume ? dir : NULL, .label = label, .eta_extra_steps = *remaining,
                         .hooks = o->hooks};
  cf_train_result res;
  CF_TRY(cf_train(ctx, &c, &to, &res));
  *interrupted = res.interrupted;
  if (res.state.diverged_step && o->report) fprintf(o->report, "%s diverged at step %d\n", label, res.state.diverged_step);
  return CF_OK;
}

/* Every run this command covers, in turn, until one fails or a stop is asked for. */
static cf_status train_all(const spec *s, const cf_compare_options *o, int only_i, int *interrupted) {
  cf_context_options co = {.device_spec = cf_device_spec_resolve(o->device, s->base.device)};
  cf_context *ctx;
  CF_TRY(cf_context_create(&co, &ctx));
  cf_status st = cf_selftest_ensure(ctx);
  long remaining = steps_remaining(s, only_i);
  int total = (only_i >= 0 ? 1 : s->nv) * s->seeds, idx = 0;
  for (int i = 0; i < s->nv && st == CF_OK && !*interrupted; i++) {
    if (only_i >= 0 && i != only_i) continue;
    for (int k = 0; k < s->seeds && st == CF_OK && !*interrupted; k++) {
      if (o->hooks.should_stop && o->hooks.should_stop(o->hooks.user)) {
        *interrupted = 1;
        break;
      }
      char label[200];
      idx++;
      if (s->seeds > 1) snprintf(label, sizeof label, "[%d/%d %s seed %llu]", idx, total, s->v[i].name,
                                 s->v[i].cfg.seed + (unsigned long long)k);
      else snprintf(label, sizeof label, "[%d/%d %s]", idx, total, s->v[i].name);
      st = train_one(ctx, s, o, i, k, label, &remaining, interrupted);
    }
  }
  cf_context_free(ctx);
  return st;
}

/* Every run present must be of its variant's config (also with --report-only, and for the variants
 * --only left out): otherwise the old report is left alone. */
static cf_status check_all_runs(const spec *s) {
  for (int i = 0; i < s->nv; i++)
    for (int k = 0; k < s->seeds; k++) {
      char dir[1200];
      int steps;
      run_dir(s, i, k, dir, sizeof dir);
      CF_TRY(check_run(s, i, k, dir, &steps));
    }
  return CF_OK;
}

/* The report over every run present, finished or diverged. */
static cf_status report(const spec *s, const cf_compare_options *o, double entropy) {
  run_rec **runs = calloc((size_t)(unsigned)s->nv, sizeof *runs);  /* nv >= 1: a spec has variants */
  cf_status st = runs ? CF_OK : CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < s->nv && st == CF_OK; i++) {
    if (!(runs[i] = calloc((size_t)(unsigned)s->seeds, sizeof **runs))) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; runs[i] && k < s->seeds; k++) {
      char dir[1200];
      run_dir(s, i, k, dir, sizeof dir);
      read_run(s, &s->v[i].cfg, dir, entropy, &runs[i][k]);
    }
  }
  if (st == CF_OK) st = write_report(s, runs, entropy, o->log_steps);
  if (st == CF_OK && o->report) fprintf(o->report, "wrote %s/summary.md, summary.json and curves.svg\n", s->out);
  for (int i = 0; runs && i < s->nv; i++) {
    for (int k = 0; runs[i] && k < s->seeds; k++) free_run(&runs[i][k]);
    free(runs[i]);
  }
  free(runs);
  return st;
}

/* The comparison's setup (the file, the variant asked for, the corpus for its unigram entropy,
 * the output directory), then its runs, then the report. A setup that fails leaves the old report
 * alone. */
static cf_status compare(spec *s, const cf_compare_options *o, int *interrupted) {
  if (o->seeds) s->seeds = o->seeds;
  if (o->out) snprintf(s->out, sizeof s->out, "%s", o->out);
  int only_i;
  CF_TRY(find_variant(s, o->only, &only_i));
  cf_data data;  /* for the unigram entropy (and to fail early on a missing corpus) */
  CF_TRY(cf_data_open(&data, &s->base));
  double entropy = data.unigram_entropy;
  cf_data_close(&data);
  CF_TRY(cf_mkdirs(s->out));
  if (!o->report_only) CF_TRY(train_all(s, o, only_i, interrupted));
  CF_TRY(check_all_runs(s));
  return report(s, o, entropy);
}

cf_status cf_compare(const cf_compare_options *o, int *interrupted) {
  *interrupted = 0;
  spec s;
  cf_status st = parse_spec(&s, o->path, o->sets, o->nsets);
  if (st == CF_OK) st = compare(&s, o, interrupted);
  free(s.v);
  return st;
}
