/* `clformer compare`: the warm-up comparison of Xiong et al. (2020), Section 3.2 / Figure 2, on a
 * language model. One YAML file names a base config and variants (sets of key overrides); each
 * variant (times each seed) is an ordinary training run in OUT/<variant>[/seed<S>]; finished runs
 * are skipped and unfinished ones resumed. Then summary.md, summary.json and curves.svg. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/data.h"
#include "clformer/check.h"
#include "clformer/dist.h"
#include "clformer/experiments.h"
#include "clformer/train.h"
#include "runtime/runtime.h"
#include "experiments/compare.h"
#include "train/records.h"

static int exists(const char *dir, const char *file) {
  char p[2200];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", dir, file);
  return stat(p, &sb) == 0;
}

/* OUT/<variant> with one seed, OUT/<variant>/seed<s> with several. The base seed's run is found in
 * the other place when only that one holds it, so changing --seeds between 1 and N reuses the run
 * instead of training it again (the other seeds' directories then sit beside its files). */
void compare_run_dir(const spec *s, int vi, int seed_k, char *buf, size_t n) {
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
  r->bleu = malloc((size_t)(r->n + 1) * sizeof(double));
  r->final_bleu = NAN;
  if (!r->step || !r->lr || !r->train || !r->valid || !r->bleu) r->n = 0;
  for (int i = 0; i < r->n; i++) {
    const cf_metrics_row *w = &rows[i];
    r->step[i] = w->step;
    r->lr[i] = w->lr;
    r->train[i] = w->train_loss;
    r->valid[i] = w->valid_loss;
    r->bleu[i] = w->bleu;
    if (isfinite(w->bleu)) r->final_bleu = w->bleu;
    r->wall_s = w->wall_s;
    r->steps_done = w->step;
    if (isfinite(w->valid_loss)) {
      r->final_valid = w->valid_loss;
      if (!(w->valid_loss >= r->best_valid)) r->best_valid = w->valid_loss;
      if (r->step_to_target < 0 && isfinite(s->target_loss) && w->valid_loss <= s->target_loss) r->step_to_target = w->step;
    }
  }
  free(rows);
  /* the run's average speed (a resumed run's wall time spans its sessions), over all its ranks' tokens */
  cf_run_record rec;
  int have = cf_run_record_read(dir, &rec) == CF_OK, ranks = have ? rec.ranks : 1;
  double tokens = (double)r->steps_done * cfg->train.accumulate * cfg->data.batch_size * cfg->data.seq_len * ranks;
  r->tokens_per_s = r->wall_s > 0 ? tokens / r->wall_s : NAN;
  if (cfg->model.arch == CF_ARCH_ENCODER_DECODER) r->tokens_per_s = have ? rec.tokens_per_s : NAN;  /* batches vary */
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
  free(r->bleu);
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
      compare_run_dir(s, i, k, dir, sizeof dir);
      run_status(dir, status, sizeof status);
      if (!finished(status)) remaining += s->v[i].cfg.train.steps;
    }
  return remaining;
}

/* What to do with variant i, seed k: decided by rank 0, the one that sees the run directories (under
 * mpirun the others may be on hosts without them), and sent to every rank. */
typedef struct run_plan {
  char dir[1200];
  int skip, resume;
} run_plan;

static cf_status plan_run(const spec *s, const cf_compare_options *o, int i, int k, const char *label, run_plan *p) {
  memset(p, 0, sizeof *p);
  cf_status st = CF_OK;
  if (cf_dist_world()->rank == 0) {
    char status[32];
    int saved_steps = 0;
    compare_run_dir(s, i, k, p->dir, sizeof p->dir);
    run_status(p->dir, status, sizeof status);
    st = check_run(s, i, k, p->dir, &saved_steps);
    p->skip = !strcmp(status, "diverged") || (!strcmp(status, "finished") && saved_steps >= s->v[i].cfg.train.steps);
    if (st == CF_OK && p->skip && o->report) fprintf(o->report, "%s already %s: skipped\n", label, status);
    /* a run there (check_run found it of this variant) is resumed: from its checkpoint, or from step 0
     * when it stopped before the first one (cf_train decides that, holding the directory's lock) */
    p->resume = exists(p->dir, "checkpoint.safetensors") || exists(p->dir, "config.yaml");
  }
  CF_TRY(cf_dist_agree(st));
  return cf_dist_bcast(p, sizeof *p, 0);
}

/* The BLEU each evaluation of an encoder-decoder's run records: greedy, on data.test's first
 * bleu_lines lines, through the run's own vocabulary (its bpe.merges, read at the first). */
typedef struct bleu_hook {
  const cf_config *cfg;
  int lines;
  cf_bpe *bpe;
} bleu_hook;

static cf_status run_bleu(void *user, cf_model *m, const char *dir, double *bleu) {
  bleu_hook *h = user;
  char src[1100], ref[1100], merges[2200];
  if (!h->bpe) {
    snprintf(merges, sizeof merges, "%s/%s", dir, CF_TRAIN_MERGES_FILE);
    CF_TRY(cf_bpe_load(merges, &h->bpe));
  }
  CF_TRY(cf_translation_path(h->cfg->data.test, h->cfg->data.source_lang, src, sizeof src));
  CF_TRY(cf_translation_path(h->cfg->data.test, h->cfg->data.target_lang, ref, sizeof ref));
  cf_translate_options greedy = {1, 1.0};
  cf_bleu_score score;
  *bleu = NAN;
  cf_status st = cf_translate_bleu(m, h->bpe, src, ref, (size_t)h->lines, &greedy, &score);
  if (st == CF_ERR_DATA) {  /* the test files, not the run: it goes on, without BLEU */
    cf_log(0, "note: no BLEU for %s (%s and %s: %s); the run goes on", dir, src, ref, cf_last_error());
    cf_clear_error();
    return CF_OK;
  }
  CF_TRY(st);
  *bleu = score.bleu;
  return CF_OK;
}

/* Variant i, seed k: skipped when done, else trained or resumed into its directory (data-parallel
 * under mpirun: cf_train shares each step out, rank 0 writes the run). */
static cf_status train_one(cf_context *ctx, const spec *s, const cf_compare_options *o, int i, int k,
                           const char *label, long *remaining, int *interrupted) {
  run_plan p;
  CF_TRY(plan_run(s, o, i, k, label, &p));
  if (p.skip) return CF_OK;
  cf_config c = s->v[i].cfg;
  c.seed += (unsigned long long)k;
  if (strlen(p.dir) >= sizeof c.train.out) return CF_FAIL(CF_ERR_CONFIG, "run directory path too long: %s", p.dir);
  memcpy(c.train.out, p.dir, strlen(p.dir) + 1);
  *remaining -= c.train.steps;
  cf_train_options to = {.resume_dir = p.resume ? p.dir : NULL, .label = label, .eta_extra_steps = *remaining,
                         .hooks = o->hooks};
  bleu_hook bh = {&c, s->bleu_lines, NULL};
  if (c.model.arch == CF_ARCH_ENCODER_DECODER && c.data.test[0]) {
    to.bleu = run_bleu;
    to.bleu_user = &bh;
  }
  cf_train_result res;
  cf_status st = cf_train(ctx, &c, &to, &res);
  cf_bpe_free(bh.bpe);
  CF_TRY(st);
  *interrupted = res.interrupted;
  if (res.state.diverged_step && o->report) fprintf(o->report, "%s diverged at step %d\n", label, res.state.diverged_step);
  return CF_OK;
}

/* Every run this command covers, in turn, until one fails or a stop is asked for. */
static cf_status train_all(const spec *s, const cf_compare_options *o, int only_i, int *interrupted) {
  cf_context_options co = {.device_spec = cf_device_spec_resolve(o->device, s->base.device)};
  cf_context *ctx;
  CF_TRY(o->make_context ? o->make_context(co.device_spec, &ctx) : cf_context_create(&co, &ctx));
  cf_status st = cf_dist_agree(cf_selftest_ensure(ctx));
  long remaining = steps_remaining(s, only_i);
  int total = (only_i >= 0 ? 1 : s->nv) * s->seeds, idx = 0;
  for (int i = 0; i < s->nv && st == CF_OK && !*interrupted; i++) {
    if (only_i >= 0 && i != only_i) continue;
    for (int k = 0; k < s->seeds && st == CF_OK && !*interrupted; k++) {
      int stop = o->hooks.should_stop && o->hooks.should_stop(o->hooks.user);
      if ((st = cf_dist_any(&stop)) != CF_OK) break;  /* every rank stops, or none */
      if (stop) {
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
      compare_run_dir(s, i, k, dir, sizeof dir);
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
      compare_run_dir(s, i, k, dir, sizeof dir);
      read_run(s, &s->v[i].cfg, dir, entropy, &runs[i][k]);
    }
  }
  if (st == CF_OK) st = compare_write_report(s, runs, entropy, o->log_steps);
  if (st == CF_OK && o->report) fprintf(o->report, "wrote %s/summary.md, summary.json and curves.svg\n", s->out);
  for (int i = 0; runs && i < s->nv; i++) {
    for (int k = 0; runs[i] && k < s->seeds; k++) free_run(&runs[i][k]);
    free(runs[i]);
  }
  free(runs);
  return st;
}

/* Every variant this command trains opens its data, before the device or the first run: a missing
 * file of the last variant is said at once, not after the others have trained. */
static cf_status check_variants_data(const spec *s, int only_i) {
  for (int i = 0; i < s->nv; i++)
    if (only_i < 0 || i == only_i) CF_TRY(cf_data_check(&s->v[i].cfg));
  return CF_OK;
}

/* The comparison's setup (the file, the variant asked for, the corpus for its unigram entropy,
 * the output directory), then its runs, then the report. A setup that fails leaves the old report
 * alone. */
static cf_status compare(spec *s, const cf_compare_options *o, int *interrupted) {
  if (o->seeds) s->seeds = o->seeds;
  if (o->out) snprintf(s->out, sizeof s->out, "%s", o->out);
  int only_i;
  CF_TRY(find_variant(s, o->only, &only_i));
  cf_data data;  /* for the unigram entropy (and to fail early on a missing corpus); pairs have none */
  int pairs = s->base.model.arch == CF_ARCH_ENCODER_DECODER;
  cf_status ds = pairs ? cf_data_check(&s->base) : cf_data_open(&data, &s->base);
  double entropy = ds == CF_OK && !pairs ? data.unigram_entropy : NAN;
  if (ds == CF_OK && !pairs) cf_data_close(&data);
  CF_TRY(cf_dist_agree(ds));
  if (!o->report_only) CF_TRY(cf_dist_agree(check_variants_data(s, only_i)));
  int writer = cf_dist_world()->rank == 0;  /* under mpirun, rank 0 alone writes */
  CF_TRY(cf_dist_agree(writer ? cf_mkdirs(s->out) : CF_OK));
  if (!o->report_only) CF_TRY(train_all(s, o, only_i, interrupted));
  cf_status st = writer ? check_all_runs(s) : CF_OK;
  if (st == CF_OK && writer) st = report(s, o, entropy);
  return cf_dist_agree(st);
}

cf_status cf_compare(const cf_compare_options *o, int *interrupted) {
  *interrupted = 0;
  spec s;
  cf_status st = compare_parse_spec(&s, o->path, o->sets, o->nsets);
  if (st == CF_OK) st = compare(&s, o, interrupted);
  free(s.v);
  return st;
}
