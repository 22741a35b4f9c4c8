/* Checkpoints as safetensors: weights by name (readable by PyTorch), the optimizer's flat moment
 * buffers, and the config and training state in the metadata. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/train.h"
#include "runtime/runtime.h"

#define FORMAT "clformer-checkpoint-1"

cf_status cf_checkpoint_save(cf_model *m, const cf_config *cfg, const cf_train_state *st, const char *path) {
  size_t P = cf_model_flat_floats(m);
  int nv = cf_model_num_views(m);
  float *host = malloc(3 * P * sizeof *host);
  cf_st_tensor *t = calloc((size_t)nv + 2, sizeof *t);
  char *yaml = NULL;
  size_t yaml_len = 0;
  cf_status s = CF_OK;
  if (!host || !t) { s = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  if ((s = cf_model_read(m, 0, host)) != CF_OK) goto done;
  if ((s = cf_model_read(m, 2, host + P)) != CF_OK) goto done;
  if ((s = cf_model_read(m, 3, host + 2 * P)) != CF_OK) goto done;
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    t[i].name = v->name;
    t[i].data = host + v->off;
    t[i].ndim = v->ndim;
    t[i].shape[0] = v->shape[0];
    t[i].shape[1] = v->shape[1];
  }
  t[nv] = (cf_st_tensor){"optimizer.m1", host + P, 1, {(int64_t)P}};
  t[nv + 1] = (cf_st_tensor){"optimizer.m2", host + 2 * P, 1, {(int64_t)P}};
  FILE *f = open_memstream(&yaml, &yaml_len);
  if (!f) { s = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  cf_config_write(cfg, f);
  fclose(f);
  char step[32], best[64], best_step[32], wall[64], div[32];
  snprintf(step, sizeof step, "%d", st->step);
  snprintf(best, sizeof best, "%.17g", st->best_valid);
  snprintf(best_step, sizeof best_step, "%d", st->best_step);
  snprintf(wall, sizeof wall, "%.3f", st->wall_s);
  snprintf(div, sizeof div, "%d", st->diverged_step);
  const char *meta[][2] = {{"format", FORMAT}, {"clformer_version", CLFORMER_VERSION}, {"config", yaml},
                           {"step", step}, {"best_valid", best}, {"best_step", best_step}, {"wall_s", wall},
                           {"diverged_step", div}};
  s = cf_safetensors_write(path, t, nv + 2, meta, (int)(sizeof meta / sizeof meta[0]));
done:
  free(yaml);
  free(host);
  free(t);
  return s;
}

static int parse_int_meta(const cf_st_file *f, const char *key, long long *out) {
  const char *v = cf_safetensors_meta(f, key);
  char *end;
  if (!v) return 0;
  *out = strtoll(v, &end, 10);
  return end != v && !*end;
}

cf_status cf_checkpoint_load(cf_model *m, const char *path, cf_train_state *st, char **cfg_yaml) {
  cf_st_file f;
  if (cfg_yaml) *cfg_yaml = NULL;
  CF_TRY(cf_safetensors_read(path, &f));
  cf_status s = CF_OK;
  size_t P = cf_model_flat_floats(m);
  float *host = NULL;
  const char *fmt = cf_safetensors_meta(&f, "format");
  if (!fmt || strcmp(fmt, FORMAT)) {
    s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: not a clformer checkpoint (format '%s', expected '%s')", path, fmt ? fmt : "none", FORMAT);
    goto done;
  }
  int nv = cf_model_num_views(m);
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    const cf_st_entry *e = cf_safetensors_find(&f, v->name);
    if (!e) { s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: has no tensor '%s': it was made for another architecture", path, v->name); goto done; }
    if (e->ndim != v->ndim || e->shape[0] != v->shape[0] || (v->ndim == 2 && e->shape[1] != v->shape[1])) {
      s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: tensor '%s' has shape [%lld, %lld], the model expects [%d, %d]", path, v->name,
                  (long long)e->shape[0], (long long)(e->ndim > 1 ? e->shape[1] : 0), v->shape[0], v->ndim > 1 ? v->shape[1] : 0);
      goto done;
    }
  }
  if (f.n != nv + 2) {
    s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: holds %d tensors, the model has %d (+2 optimizer buffers): another architecture", path, f.n, nv);
    goto done;
  }
  const cf_st_entry *m1 = cf_safetensors_find(&f, "optimizer.m1"), *m2 = cf_safetensors_find(&f, "optimizer.m2");
  if (!m1 || !m2 || m1->numel != P || m2->numel != P) {
    s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: optimizer state missing or of the wrong size", path);
    goto done;
  }
  long long step, best_step, div;
  const char *best = cf_safetensors_meta(&f, "best_valid"), *wall = cf_safetensors_meta(&f, "wall_s");
  if (!parse_int_meta(&f, "step", &step) || !parse_int_meta(&f, "best_step", &best_step) ||
      !parse_int_meta(&f, "diverged_step", &div) || !best || !wall || step < 0) {
    s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: training state missing from the metadata", path);
    goto done;
  }
  host = malloc(P * sizeof *host);
  if (!host) { s = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  memset(host, 0, P * sizeof *host);
  for (int i = 0; i < nv; i++) {
    const cf_tensor_view *v = cf_model_view(m, i);
    memcpy(host + v->off, cf_safetensors_find(&f, v->name)->data, v->numel * sizeof *host);
  }
  for (size_t i = 0; i < P; i++)
    if (!isfinite(host[i])) { s = CF_FAIL(CF_ERR_CHECKPOINT, "%s: weights contain NaN or Inf", path); goto done; }
  if ((s = cf_model_write(m, 0, host)) != CF_OK) goto done;
  memcpy(host, m1->data, P * sizeof *host);
  if ((s = cf_model_write(m, 2, host)) != CF_OK) goto done;
  memcpy(host, m2->data, P * sizeof *host);
  if ((s = cf_model_write(m, 3, host)) != CF_OK) goto done;
  st->step = (int)step;
  st->best_valid = strtod(best, NULL);
  st->best_step = (int)best_step;
  st->wall_s = strtod(wall, NULL);
  st->diverged_step = (int)div;
  if (cfg_yaml) {
    const char *c = cf_safetensors_meta(&f, "config");
    *cfg_yaml = c ? strdup(c) : NULL;
  }
done:
  free(host);
  cf_safetensors_free(&f);
  return s;
}
