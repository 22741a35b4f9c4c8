/* The report of `clformer compare`: summary.md (the table and a reading of it), summary.json and
 * curves.svg, from the runs' records. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "experiments/compare.h"
#include "experiments/svg.h"
#include "runtime/runtime.h"

typedef struct agg {
  int runs, diverged, plateaued, too_short, reached;
  double final_mean, final_sd, best_mean, best_sd, target_mean, wall_mean, tps_mean;
  double final_min, final_max, best_min, best_max;  /* over the runs that did not diverge */
  int bleu_runs;                                    /* runs with a final BLEU (an encoder-decoder's) */
  double bleu_mean, bleu_sd, bleu_min, bleu_max;
} agg;

/* A comparison of encoder-decoders: BLEU beside the losses, no unigram entropy. */
static int translation(const spec *s) { return s->base.model.arch == CF_ARCH_ENCODER_DECODER; }

static void aggregate_bleu(const run_rec *r, int n, agg *a) {
  double sum = 0, sum2 = 0;
  a->bleu_min = INFINITY;
  a->bleu_max = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (!r[i].present || r[i].diverged || !isfinite(r[i].final_bleu)) continue;  /* as the losses' */
    a->bleu_runs++;
    sum += r[i].final_bleu;
    sum2 += r[i].final_bleu * r[i].final_bleu;
    a->bleu_min = fmin(a->bleu_min, r[i].final_bleu);
    a->bleu_max = fmax(a->bleu_max, r[i].final_bleu);
  }
  int k = a->bleu_runs;
  a->bleu_mean = k ? sum / k : NAN;
  a->bleu_sd = k > 1 ? sqrt(fmax(0, (sum2 - sum * sum / k) / (k - 1))) : 0;
}

static agg aggregate(const run_rec *r, int n) {
  agg a = {.final_min = INFINITY, .final_max = -INFINITY, .best_min = INFINITY, .best_max = -INFINITY};
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
      a.final_min = fmin(a.final_min, r[i].final_valid); a.final_max = fmax(a.final_max, r[i].final_valid);
      a.best_min = fmin(a.best_min, r[i].best_valid); a.best_max = fmax(a.best_max, r[i].best_valid);
    }
  }
  a.final_mean = nf ? sf / nf : NAN;
  a.best_mean = nf ? sb / nf : NAN;
  a.final_sd = nf > 1 ? sqrt(fmax(0, (sf2 - sf * sf / nf) / (nf - 1))) : 0;
  a.best_sd = nf > 1 ? sqrt(fmax(0, (sb2 - sb * sb / nf) / (nf - 1))) : 0;
  a.target_mean = a.reached ? st / a.reached : NAN;
  a.wall_mean = a.runs ? sw / a.runs : NAN;
  a.tps_mean = a.runs ? stps / a.runs : NAN;
  aggregate_bleu(r, n, &a);
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

/* mean ± sd [min, max] over a variant's runs; the mean alone for one run. */
static void pm(char *buf, size_t n, double mean, double sd, double lo, double hi, int runs) {
  if (!isfinite(mean)) snprintf(buf, n, "-");
  else if (runs > 1) snprintf(buf, n, "%.3f ± %.3f [%.3f, %.3f]", mean, sd, lo, hi);
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
  fprintf(f, "**Reading.** ");
  if (isfinite(entropy))
    fprintf(f, "The unigram entropy of the training text is %.3f nats per byte: a model that only learned byte "
               "frequencies sits there. ", entropy);
  if (trained[0]) fprintf(f, "Trained without warm-up: %s. ", trained);
  if (failed[0]) fprintf(f, "Failed without warm-up: %s. ", failed);
  for (int i = 0; i < s->nv; i++) {
    if (s->v[i].cfg.schedule.warmup || !a[i].runs) continue;
    for (int j = 0; j < s->nv; j++) {
      const cf_config *x = &s->v[i].cfg, *y = &s->v[j].cfg;
      if (!y->schedule.warmup || !a[j].runs || x->model.norm != y->model.norm || x->optim.lr != y->optim.lr) continue;
      fprintf(f, "%s-LN at lr %g: with %d warm-up steps the final validation loss is %.3f, without it %.3f "
                 "(%s by %.3f nats)", x->model.norm == CF_NORM_PRE ? "Pre" : "Post", x->optim.lr, y->schedule.warmup,
              a[j].final_mean, a[i].final_mean, a[j].final_mean < a[i].final_mean ? "warm-up better" : "warm-up worse",
              fabs(a[i].final_mean - a[j].final_mean));
      if (a[i].bleu_runs && a[j].bleu_runs)
        fprintf(f, "; BLEU %.2f with warm-up, %.2f without", a[j].bleu_mean, a[i].bleu_mean);
      fputs(". ", f);
    }
  }
  int best = -1;
  for (int i = 0; i < s->nv; i++)
    if (a[i].runs && isfinite(a[i].final_mean) && (best < 0 || a[i].final_mean < a[best].final_mean)) best = i;
  if (best >= 0) fprintf(f, "Lowest final validation loss: %s (%.3f). ", s->v[best].name, a[best].final_mean);
  int top = -1;
  for (int i = 0; i < s->nv; i++)
    if (a[i].bleu_runs && (top < 0 || a[i].bleu_mean > a[top].bleu_mean)) top = i;
  if (top >= 0) fprintf(f, "Highest final BLEU: %s (%.2f). ", s->v[top].name, a[top].bleu_mean);
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

/* Each run's BLEU at its evaluations, a line per run in its variant's colour. */
static void bleu_panel(FILE *f, const spec *s, run_rec **runs, const svg_panel *p) {
  svg_axes(f, p);
  for (int i = 0; i < s->nv; i++)
    for (int k = 0; k < s->seeds; k++) {
      const run_rec *r = &runs[i][k];
      if (!r->present) continue;
      double *x = malloc((size_t)(r->n + 1) * sizeof *x), *y = malloc((size_t)(r->n + 1) * sizeof *y);
      int m = 0;
      for (int j = 0; x && y && j < r->n; j++)
        if (isfinite(r->bleu[j])) { x[m] = r->step[j]; y[m++] = r->bleu[j]; }
      if (x && y) svg_line(f, p, x, y, m, svg_color(i), 2, 1, "");
      free(x);
      free(y);
    }
}

/* The learning-rate schedules, computed from each variant's config, in a panel at height y. */
static void lr_panel(FILE *f, const spec *s, int log_steps, int maxstep, int y, int W) {
  double lrmax = 0;
  for (int i = 0; i < s->nv; i++) lrmax = fmax(lrmax, s->v[i].cfg.optim.lr);
  svg_panel bot = {95, y, W - 125, 170, log_steps ? 1 : 0, maxstep, 0, lrmax * 1.1, log_steps, 0, "Learning-rate schedule",
                   "step", "learning rate", 0};
  svg_axes(f, &bot);
  int np = 400;
  double *xs = malloc((size_t)np * sizeof *xs), *ys = malloc((size_t)np * sizeof *ys);
  for (int i = 0; xs && ys && i < s->nv; i++) {
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
}

static void write_svg(const spec *s, run_rec **runs, double entropy, int log_steps, const char *path) {
  int pairs = translation(s), W = 960, H = pairs ? 1000 : 760, lr_y = pairs ? 780 : 540;
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
  if (isfinite(entropy)) hi = fmax(hi, entropy + 0.3);
  hi = fmin(hi, pairs ? 10.0 : 6.0);
  lo = fmax(0, lo - 0.1);
  svg_panel top = {95, 40, W - 125, 420, log_steps ? 1 : 0, maxstep, lo, hi, log_steps, 0,
                   "Validation loss (solid) and training loss (light) per variant", log_steps ? "step (log scale)" : "step",
                   pairs ? "loss (nats per token)" : "loss (nats per byte)", 0};
  size_t longest = 0;
  for (int i = 0; i < s->nv; i++) {
    char d[160];
    describe(&s->v[i], d, sizeof d);
    if (strlen(s->v[i].name) + strlen(d) + 3 > longest) longest = strlen(s->v[i].name) + strlen(d) + 3;
  }
  top.legend_w = 6.3 * (double)longest + 44;
  svg_axes(f, &top);
  double ex[2] = {top.xmin, top.xmax}, ey[2] = {entropy, entropy};
  if (isfinite(entropy)) {
    svg_line(f, &top, ex, ey, 2, "#888888", 1, 1, "4,4");
    svg_text(f, top.x + 6, top.y + top.h - (entropy - lo) / (hi - lo) * top.h - 4, "unigram entropy", 10, "start");
  }
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
  double most = 1;
  for (int i = 0; pairs && i < s->nv; i++)
    for (int k = 0; k < s->seeds; k++)
      for (int j = 0; j < runs[i][k].n; j++)
        if (isfinite(runs[i][k].bleu[j])) most = fmax(most, runs[i][k].bleu[j]);
  svg_panel mid = {95, 540, W - 125, 170, log_steps ? 1 : 0, maxstep, 0, most * 1.1, log_steps, 0,
                   "BLEU of greedy translations of the test sentences", "step", "BLEU", 0};
  if (pairs) bleu_panel(f, s, runs, &mid);
  lr_panel(f, s, log_steps, maxstep, lr_y, W);
  svg_end(f);
}

/* summary.json, one run's row. */
static json_t *run_json(const spec *s, int i, int k, const run_rec *r) {
  char dir[1200];
  compare_run_dir(s, i, k, dir, sizeof dir);
  unsigned long long seed = s->v[i].cfg.seed + (unsigned long long)k;
  return json_pack("{s:o, s:o, s:i, s:o, s:o, s:o, s:o, s:b, s:b, s:o, s:o}", "seed",
                   (long long)seed >= 0 ? json_integer((json_int_t)seed) : json_real((double)seed), "dir",
                   cf_json_str(dir), "steps_done", r->steps_done, "final_valid", cf_json_num(r->final_valid, "%.6g"),
                   "final_bleu", cf_json_num(r->final_bleu, "%.4g"),
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
  json_t *mean = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:o, s:o}",
                           "final_bleu", cf_json_num(a->bleu_mean, "%.4g"), "final_bleu_sd",
                           cf_json_num(a->bleu_sd, "%.4g"), "final_valid",
                           cf_json_num(a->final_mean, "%.6g"), "final_valid_sd", cf_json_num(a->final_sd, "%.6g"),
                           "final_valid_min", cf_json_num(a->final_min, "%.6g"), "final_valid_max",
                           cf_json_num(a->final_max, "%.6g"), "best_valid", cf_json_num(a->best_mean, "%.6g"),
                           "best_valid_sd", cf_json_num(a->best_sd, "%.6g"), "best_valid_min",
                           cf_json_num(a->best_min, "%.6g"), "best_valid_max", cf_json_num(a->best_max, "%.6g"),
                           "step_to_target",
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

cf_status compare_write_report(const spec *s, run_rec **runs, double entropy, int log_steps) {
  agg *a = calloc((size_t)(unsigned)s->nv, sizeof *a);
  if (!a) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < s->nv; i++) a[i] = aggregate(runs[i], s->seeds);
  char path[2300];
  /* summary.md */
  snprintf(path, sizeof path, "%s/summary.md", s->out);
  FILE *f = fopen(path, "w");
  if (!f) { free(a); return CF_FAIL(CF_ERR_IO, "cannot write %s", path); }
  fprintf(f, "# Warm-up comparison: %s\n\n", s->out);
  fprintf(f, "%d variant(s), %d seed(s) each. ", s->nv, s->seeds);
  if (isfinite(entropy)) fprintf(f, "Unigram entropy of the training text: %.3f nats/byte. ", entropy);
  if (isfinite(s->target_loss)) fprintf(f, "Target validation loss: %.3f. ", s->target_loss);
  if (s->seeds > 1) fprintf(f, "Losses are mean ± standard deviation [min, max] over the seeds' runs that did not diverge. ");
  if (translation(s)) {
    fprintf(f, "The validation loss is the mean over every target token of the validation pairs (label-smoothed); BLEU "
               "is sacreBLEU's (13a tokenization, exp smoothing) of greedy translations of ");
    if (s->bleu_lines) fprintf(f, "the first %d test sentences", s->bleu_lines);
    else fprintf(f, "every test sentence");
    fprintf(f, " at each evaluation; a final BLEU is over the runs that did not diverge. A run is *diverged* when its "
               "loss or gradient became non-finite or exceeded 3 ln V.\n\n");
  } else {
    fprintf(f, "Validation is on the same evenly spaced windows of the validation text for every variant and seed. ");
    fprintf(f, "A run is *plateaued* when its final validation loss is within 0.05 of the unigram entropy (or above) "
               "after at least %d steps, *diverged* when its loss or gradient became non-finite or exceeded 3 ln 256.\n\n",
            s->plateau_after);
  }
  fprintf(f, "| variant | placement | lr | warm-up | final valid | best valid | final BLEU | step to target | result | "
             "wall time | tokens/s |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < s->nv; i++) {
    const cf_config *c = &s->v[i].cfg;
    char fv[64], bv[64], bl[64], tg[64], res[160];
    pm(fv, sizeof fv, a[i].final_mean, a[i].final_sd, a[i].final_min, a[i].final_max, a[i].runs);
    pm(bl, sizeof bl, a[i].bleu_mean, a[i].bleu_sd, a[i].bleu_min, a[i].bleu_max, a[i].bleu_runs);
    pm(bv, sizeof bv, a[i].best_mean, a[i].best_sd, a[i].best_min, a[i].best_max, a[i].runs);
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
    fprintf(f, "| %s | %s-LN | %g | %d | %s | %s | %s | %s | %s | %s | %s |\n", s->v[i].name,
            c->model.norm == CF_NORM_PRE ? "Pre" : "Post", c->optim.lr, c->schedule.warmup, fv, bv, bl, tg, res, wall,
            tps);
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
