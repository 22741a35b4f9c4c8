/* Checkpoints as safetensors: weights by name (readable by PyTorch), the optimizer's flat moment
 * buffers, and the config and training state in the metadata. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/train.h"
#include "runtime/runtime.h"

#define FORMAT "clformer-checkpoint-1"

/* The parameters and the optimizer's moments for a checkpoint: mapped where the context maps (the
 * file is written straight from device memory the host shares), else read into host memory. A
 * moment the optimizer does not keep is zeros. */
typedef struct saved_state {
  const float *part[3];  /* parameters, m1, m2 */
  int mapped[3];
  float *host;           /* the copies, or the zeros */
} saved_state;

static const int SAVED_FLATS[3] = {0, 2, 3};  /* cf_model_read's `which` of each part */

static cf_status state_get(cf_model *m, saved_state *s) {
  size_t P = cf_model_flat_floats(m);
  memset(s, 0, sizeof *s);
  int copy = !cf_context_zero_copy(cf_model_context(m));
  if (!(s->host = calloc(copy ? 3 * P : P, sizeof *s->host))) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int k = 0; k < 3; k++) {
    if (copy) {
      CF_TRY(cf_model_read(m, SAVED_FLATS[k], s->host + k * P));
      s->part[k] = s->host + k * P;
      continue;
    }
    CF_TRY(cf_model_map(m, SAVED_FLATS[k], &s->part[k]));
    s->mapped[k] = s->part[k] != NULL;
    if (!s->part[k]) s->part[k] = s->host;  /* not kept: zeros */
  }
  return CF_OK;
}

static cf_status state_put_back(cf_model *m, saved_state *s) {
  cf_status st = CF_OK;
  for (int k = 0; k < 3; k++)
    if (s->mapped[k]) {
      cf_status u = cf_model_unmap(m, SAVED_FLATS[k], s->part[k]);
      if (st == CF_OK) st = u;
    }
  free(s->host);
  return st;
}

cf_status cf_checkpoint_save(cf_model *m, const cf_config *cfg, const cf_train_state *st, const char *path) {
  size_t P = cf_model_flat_floats(m);
  int nv = cf_model_num_views(m);
  saved_state state;
  cf_st_tensor *t = calloc((size_t)nv + 2, sizeof *t);
  char *yaml = NULL;
  size_t yaml_len = 0;
  cf_status s = state_get(m, &state);
  if (s == CF_OK && !t) s = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  if (s != CF_OK) goto done;
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    t[i].name = v->name;
    t[i].data = state.part[0] + v->off;
    t[i].ndim = v->ndim;
    t[i].shape[0] = v->shape[0];
    t[i].shape[1] = v->shape[1];
  }
  t[nv] = (cf_st_tensor){"optimizer.m1", state.part[1], 1, {(int64_t)P}};
  t[nv + 1] = (cf_st_tensor){"optimizer.m2", state.part[2], 1, {(int64_t)P}};
  FILE *f = open_memstream(&yaml, &yaml_len);
  if (!f) { s = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  cf_config_write(cfg, f);
  fclose(f);
  char step[32], best[64], best_step[32], wall[64], div[32], world[32];
  snprintf(step, sizeof step, "%d", st->step);
  snprintf(best, sizeof best, "%.17g", st->best_valid);
  snprintf(best_step, sizeof best_step, "%d", st->best_step);
  snprintf(wall, sizeof wall, "%.3f", st->wall_s);
  snprintf(div, sizeof div, "%d", st->diverged_step);
  snprintf(world, sizeof world, "%d", st->world_size > 0 ? st->world_size : 1);
  char vocab[32];
  snprintf(vocab, sizeof vocab, "%016llx", st->vocab);
  const char *meta[][2] = {{"format", FORMAT}, {"clformer_version", CLFORMER_VERSION}, {"config", yaml},
                           {"step", step}, {"best_valid", best}, {"best_step", best_step}, {"wall_s", wall},
                           {"diverged_step", div}, {"world_size", world}, {"vocab_checksum", vocab}};
  int n_meta = (int)(sizeof meta / sizeof meta[0]) - (st->vocab ? 0 : 1);  /* a language model has none */
  s = cf_safetensors_write(path, t, nv + 2, meta, n_meta);
done:;
  cf_status back = state_put_back(m, &state);
  free(yaml);
  free(t);
  return s != CF_OK ? s : back;
}

/* ---------- loading: everything is checked before the model or the state is touched ---------- */

#define MAX_STEP CF_CONFIG_MAX_STEPS

/* An integer metadata value, written as digits with an optional '-' and nothing else, in
 * [lo, hi]; `range` explains the bound in the message. */
static cf_status meta_int(const cf_st_file *f, const char *path, const char *key, long long lo, long long hi,
                          const char *range, long long *out) {
  const char *v = cf_safetensors_meta(f, key);
  if (!v) return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata '%s' is missing: the training state is incomplete", path, key);
  const char *digits = v + (*v == '-');
  int well_formed = *digits && strspn(digits, "0123456789") == strlen(digits) && strlen(digits) <= 18;
  *out = well_formed ? strtoll(v, NULL, 10) : 0;
  if ((!well_formed || *out < lo || *out > hi) && lo == hi)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata '%s' is '%.40s', not %lld%s", path, key, v, lo, range);
  if (!well_formed || *out < lo || *out > hi)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata '%s' is '%.40s', not an integer in [%lld, %lld]%s", path, key, v, lo,
                   hi, range);
  return CF_OK;
}

/* A number metadata value: all of it read by strtod (which reads "inf" and "nan" too), no spaces. */
static cf_status meta_double(const cf_st_file *f, const char *path, const char *key, double *out) {
  const char *v = cf_safetensors_meta(f, key);
  char *end = NULL;
  if (!v) return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata '%s' is missing: the training state is incomplete", path, key);
  *out = *v && !strchr(" \t\n\v\f\r", *v) ? strtod(v, &end) : NAN;
  if (!end || end == v || *end)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata '%s' is '%.40s', not a number", path, key, v);
  return CF_OK;
}

/* train.steps of the config stored in the checkpoint (no checkpoint of a run is beyond it), or -1
 * when that config cannot be read (a resume refuses such a file; sampling does not need it). */
static long long stored_steps(const cf_st_file *f) {
  const char *yaml = cf_safetensors_meta(f, "config");
  cf_config c;
  cf_config_defaults(&c);
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status s = yaml ? cf_config_load_string(&c, yaml, "the checkpoint's config") : CF_ERR_CHECKPOINT;
  cf_set_verbosity(v);
  cf_clear_error();
  return s == CF_OK && c.train.steps >= 0 && c.train.steps <= MAX_STEP ? c.train.steps : -1;
}

/* The training state in the metadata, every value checked for its type and range. */
static cf_status read_state(const cf_st_file *f, const char *path, cf_train_state *st) {
  long long step, best_step, div, world = 1;
  double best, wall;
  long long max_step = stored_steps(f);
  CF_TRY(meta_int(f, path, "step", 0, max_step >= 0 ? max_step : MAX_STEP,
                  max_step >= 0 ? " (the stored config's train.steps)" : " (train.steps' largest value)", &step));
  CF_TRY(meta_int(f, path, "best_step", 0, step, " (the step)", &best_step));
  CF_TRY(meta_int(f, path, "diverged_step", 0, 0, ": checkpoints are written only at healthy steps", &div));
  /* absent from checkpoints written before data parallelism: one process wrote them */
  if (cf_safetensors_meta(f, "world_size")) CF_TRY(meta_int(f, path, "world_size", 1, 65535, "", &world));
  CF_TRY(meta_double(f, path, "best_valid", &best));
  if (isnan(best) || best == -INFINITY)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata 'best_valid' is '%.40s', not a loss (a finite number, or inf for "
                   "none yet)", path, cf_safetensors_meta(f, "best_valid"));
  CF_TRY(meta_double(f, path, "wall_s", &wall));
  if (!isfinite(wall) || wall < 0)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata 'wall_s' is '%.40s', not a finite number of seconds >= 0", path,
                   cf_safetensors_meta(f, "wall_s"));
  unsigned long long vocab = 0;  /* absent from language models' and older checkpoints: not checked */
  const char *v = cf_safetensors_meta(f, "vocab_checksum");
  if (v && (strlen(v) != 16 || strspn(v, "0123456789abcdef") != 16 || !(vocab = strtoull(v, NULL, 16))))
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: metadata 'vocab_checksum' is '%.40s', not 16 hex digits", path, v);
  *st = (cf_train_state){.step = (int)step, .best_valid = best, .best_step = (int)best_step, .wall_s = wall,
                         .diverged_step = 0, .world_size = (int)world, .vocab = vocab};
  return CF_OK;
}

/* "[256, 64, 1]" */
static const char *shape_text(char *out, size_t n, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(out, n, "[");
  for (int d = 0; d < ndim && at < n; d++)
    at += (size_t)snprintf(out + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < n) snprintf(out + at, n - at, "]");
  return out;
}

/* The file holds the model's tensors, each of its shape, and the optimizer's two moment buffers. */
static cf_status check_tensors(cf_model *m, const cf_st_file *f, const char *path) {
  size_t P = cf_model_flat_floats(m);
  int nv = cf_model_num_views(m);
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    const cf_st_entry *e = cf_safetensors_find(f, v->name);
    if (!e) return CF_FAIL(CF_ERR_CHECKPOINT, "%s: has no tensor '%s': it was made for another architecture", path, v->name);
    int64_t want[CF_ST_MAX_DIMS] = {v->shape[0], v->ndim > 1 ? v->shape[1] : 0};
    int same = e->ndim == v->ndim;
    for (int d = 0; same && d < v->ndim; d++) same = e->shape[d] == want[d];
    if (!same) {
      char has[128], expects[64];
      return CF_FAIL(CF_ERR_CHECKPOINT, "%s: tensor '%s' has shape %s, the model expects %s", path, v->name,
                     shape_text(has, sizeof has, e->ndim, e->shape), shape_text(expects, sizeof expects, v->ndim, want));
    }
  }
  if (f->n != nv + 2)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: holds %d tensors, the model has %d (+2 optimizer buffers): another architecture",
                   path, f->n, nv);
  const cf_st_entry *m1 = cf_safetensors_find(f, "optimizer.m1"), *m2 = cf_safetensors_find(f, "optimizer.m2");
  if (!m1 || !m2 || m1->numel != P || m2->numel != P)
    return CF_FAIL(CF_ERR_CHECKPOINT, "%s: optimizer state missing or of the wrong size", path);
  return CF_OK;
}

/* Weights (all finite) and moments from the file into the model. */
static cf_status load_tensors(cf_model *m, const cf_st_file *f, const char *path) {
  size_t P = cf_model_flat_floats(m);
  int nv = cf_model_num_views(m);
  float *host = calloc(P ? P : 1, sizeof *host);
  if (!host) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    memcpy(host + v->off, cf_safetensors_find(f, v->name)->data, v->numel * sizeof *host);
  }
  cf_status s = CF_OK;
  for (size_t i = 0; i < P && s == CF_OK; i++)
    if (!isfinite(host[i])) s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: weights contain NaN or Inf", path);
  if (s == CF_OK) s = cf_model_write(m, 0, host);
  /* the moments are one run each in the file: written from it as they are */
  if (s == CF_OK) s = cf_model_write(m, 2, cf_safetensors_find(f, "optimizer.m1")->data);
  if (s == CF_OK) s = cf_model_write(m, 3, cf_safetensors_find(f, "optimizer.m2")->data);
  free(host);
  return s;
}

cf_status cf_checkpoint_load(cf_model *m, const char *path, cf_train_state *st, char **cfg_yaml) {
  cf_st_file f;
  if (cfg_yaml) *cfg_yaml = NULL;
  CF_TRY(cf_safetensors_read(path, &f));
  cf_status s = CF_OK;
  cf_train_state ts = {0};
  const char *fmt = cf_safetensors_meta(&f, "format");
  if (!fmt || strcmp(fmt, FORMAT))
    s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: not a clformer checkpoint (format '%.40s', expected '%s')", path,
                fmt ? fmt : "none", FORMAT);
  if (s == CF_OK) s = check_tensors(m, &f, path);
  if (s == CF_OK) s = read_state(&f, path, &ts);
  if (s == CF_OK) s = load_tensors(m, &f, path);
  if (s == CF_OK) *st = ts;
  if (s == CF_OK && cfg_yaml) {
    const char *c = cf_safetensors_meta(&f, "config");
    *cfg_yaml = c ? strdup(c) : NULL;
  }
  cf_safetensors_free(&f);
  return s;
}
