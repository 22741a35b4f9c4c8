/* The training configuration: one table of keys (type, default, range, help) drives defaults,
 * YAML loading (libyaml), --set overrides, validation messages, the resolved-config dump and the
 * README's key reference. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "clformer/config.h"
#include "config/config_yaml.h"
#include "runtime/runtime.h"

typedef enum { K_INT, K_U64, K_DOUBLE, K_BOOL, K_STRING, K_ENUM, K_PAIR } key_kind;
enum { MIN_EXCL = 1, MAX_EXCL = 2, NO_MAX = 4 };

typedef struct key_spec {
  const char *key;
  key_kind kind;
  size_t offset, size;  /* size: strings' capacity */
  double min, max;
  int flags;
  const char *choices;  /* K_ENUM: "a|b|c", value = index */
  const char *def;      /* default, as YAML text */
  const char *help;
} key_spec;

#define OFF(field) offsetof(cf_config, field)
#define STR(field) OFF(field), sizeof(((cf_config *)0)->field)
/* An enum key's field, read and written as an int: a field of another size fails to compile. */
#define ENUM_OFF(field) (OFF(field) + 0 * sizeof(char[sizeof(((cf_config *)0)->field) == sizeof(int) ? 1 : -1]))
static const key_spec keys[] = {
  {"device", K_STRING, STR(device), 0, 0, 0, NULL, "auto", "device spec: auto, P:D, gpu, cpu, accelerator or part of a name (--device and $CLFORMER_DEVICE take precedence)"},
  {"seed", K_U64, OFF(seed), 0, 0, 0, 0, NULL, "1234", "seeds initialisation, data order and dropout"},
  {"data.train", K_STRING, STR(data.train), 0, 0, 0, NULL, "", "training text (UTF-8 or any bytes); relative paths are relative to the config file (required)"},
  {"data.valid", K_STRING, STR(data.valid), 0, 0, 0, NULL, "", "validation text; empty: the last valid_fraction of data.train"},
  {"data.valid_fraction", K_DOUBLE, OFF(data.valid_fraction), 0, 0, 0.5, MIN_EXCL, NULL, "0.05", "share of data.train held out for validation when data.valid is empty"},
  {"data.test", K_STRING, STR(data.test), 0, 0, 0, NULL, "", "encoder_decoder: the test sentences' prefix (BLEU); like data.train"},
  {"data.source_lang", K_STRING, STR(data.source_lang), 0, 0, 0, NULL, "", "encoder_decoder: the source side's file suffix: data.train is a prefix, PREFIX.SOURCE_LANG and PREFIX.TARGET_LANG two aligned files of a sentence a line (so are data.valid and data.test)"},
  {"data.target_lang", K_STRING, STR(data.target_lang), 0, 0, 0, NULL, "", "encoder_decoder: the target side's file suffix"},
  {"data.tokenizer", K_ENUM, ENUM_OFF(data.tokenizer), 0, 0, 0, 0, "byte|bpe", "byte", "tokenizer: byte (V = 256) or bpe (byte-pair encoding learned from the training text, V = data.vocab_size)"},
  {"data.vocab_size", K_INT, OFF(data.vocab_size), 0, 260, 1 << 20, 0, NULL, "8000", "bpe: vocabulary size (3 special ids, 256 bytes, then merges), shared by both languages"},
  {"data.max_tokens", K_INT, OFF(data.max_tokens), 0, 1, 1 << 20, 0, NULL, "4096", "encoder_decoder: tokens a side per batch, padding included (batches of similar-length pairs)"},
  {"data.max_len", K_INT, OFF(data.max_len), 0, 2, 65536, 0, NULL, "128", "encoder_decoder: longest sentence in tokens (eos included); longer pairs are left out"},
  {"data.seq_len", K_INT, OFF(data.seq_len), 0, 1, 65536, 0, NULL, "64", "tokens per sequence (T)"},
  {"data.batch_size", K_INT, OFF(data.batch_size), 0, 1, 65536, 0, NULL, "16", "sequences per batch (B); with train.accumulate, per micro-batch"},
  {"model.arch", K_ENUM, ENUM_OFF(model.arch), 0, 0, 0, 0, "decoder|encoder_decoder", "decoder", "decoder (the byte-level language model) or encoder_decoder (translation)"},
  {"model.norm", K_ENUM, ENUM_OFF(model.norm), 0, 0, 0, 0, "post|pre", "pre", "layer-norm placement: post (x = LN(x + F(x))) or pre (x = x + F(LN(x)))"},
  {"model.layers", K_INT, OFF(model.layers), 0, 1, 1000, 0, NULL, "6", "number of Transformer blocks (L)"},
  {"model.encoder_layers", K_INT, OFF(model.encoder_layers), 0, 0, 1000, 0, NULL, "0", "encoder_decoder: encoder blocks (model.layers: decoder blocks); 0 = as many as model.layers"},
  {"model.d_model", K_INT, OFF(model.d_model), 0, 1, 65536, 0, NULL, "256", "model width (C)"},
  {"model.heads", K_INT, OFF(model.heads), 0, 1, 4096, 0, NULL, "4", "attention heads (NH); must divide d_model"},
  {"model.d_ff", K_INT, OFF(model.d_ff), 0, 1, 1 << 20, 0, NULL, "1024", "feed-forward width"},
  {"model.activation", K_ENUM, ENUM_OFF(model.activation), 0, 0, 0, 0, "relu|gelu|gelu_erf", "relu", "feed-forward activation: relu (the paper), gelu (tanh approximation) or gelu_erf"},
  {"model.dropout", K_DOUBLE, OFF(model.dropout), 0, 0, 1, MAX_EXCL, NULL, "0", "dropout on residual branches and FFN activations, in [0, 1)"},
  {"model.attn_dropout", K_DOUBLE, OFF(model.attn_dropout), 0, 0, 1, MAX_EXCL, NULL, "0", "dropout on attention probabilities, in [0, 1)"},
  {"model.attention", K_ENUM, ENUM_OFF(model.attention), 0, 0, 0, 0, "fused|materialized|auto", "auto", "attention kernels: materialized (the T x T scores through batched GEMMs), fused (tiled, online softmax: memory linear in seq_len; needed by encoder_decoder) or auto (fused for encoder_decoder, else materialized)"},
  {"model.final_norm", K_ENUM, ENUM_OFF(model.final_norm), 0, 0, 0, 0, "auto|false|true", "auto", "LN before the output projection: auto = on for pre, off for post"},
  {"model.tie_embeddings", K_BOOL, OFF(model.tie_embeddings), 0, 0, 0, 0, NULL, "false", "output projection shares the token embedding"},
  {"model.positions", K_ENUM, ENUM_OFF(model.positions), 0, 0, 0, 0, "sinusoidal|learned", "sinusoidal", "absolute position encoding"},
  {"model.init", K_ENUM, ENUM_OFF(model.init), 0, 0, 0, 0, "xavier|fairseq", "xavier", "initialisation: xavier (Xavier-uniform for every matrix) or fairseq (normal(0, d_model^-1/2) for the embeddings and the output projection, as fairseq's Transformer; Xavier for the rest)"},
  {"model.scale_embeddings", K_BOOL, OFF(model.scale_embeddings), 0, 0, 0, 0, NULL, "false", "multiply token embeddings by sqrt(d_model)"},
  {"model.ln_eps", K_DOUBLE, OFF(model.ln_eps), 0, 0, 1, MIN_EXCL, NULL, "1e-5", "LayerNorm epsilon"},
  {"model.label_smoothing", K_DOUBLE, OFF(model.label_smoothing), 0, 0, 1, MAX_EXCL, NULL, "0", "label smoothing of the loss (the paper's translation runs use 0.1)"},
  {"optim.name", K_ENUM, ENUM_OFF(optim.name), 0, 0, 0, 0, "adam|adamw|sgd", "adam", "optimizer"},
  {"optim.lr", K_DOUBLE, OFF(optim.lr), 0, 0, 10, MIN_EXCL, NULL, "1e-3", "peak learning rate (> 0)"},
  {"optim.betas", K_PAIR, OFF(optim.beta1), 0, 0, 1, MAX_EXCL, NULL, "[0.9, 0.98]", "Adam betas [beta1, beta2], each in [0, 1)"},
  {"optim.eps", K_DOUBLE, OFF(optim.eps), 0, 0, 1, MIN_EXCL, NULL, "1e-8", "Adam epsilon"},
  {"optim.weight_decay", K_DOUBLE, OFF(optim.weight_decay), 0, 0, 1, 0, NULL, "0", "weight decay (L2 for adam and sgd, decoupled for adamw)"},
  {"optim.momentum", K_DOUBLE, OFF(optim.momentum), 0, 0, 1, MAX_EXCL, NULL, "0.9", "SGD momentum"},
  {"optim.clip_norm", K_DOUBLE, OFF(optim.clip_norm), 0, 0, 0, NO_MAX, NULL, "0", "clip gradients to this global L2 norm; 0 = no clipping"},
  {"schedule.warmup", K_INT, OFF(schedule.warmup), 0, 0, 100000000, 0, NULL, "0", "linear warm-up steps from 0 to lr; 0 starts at full lr"},
  {"schedule.decay", K_ENUM, ENUM_OFF(schedule.decay), 0, 0, 0, 0, "inverse_sqrt|linear|cosine|constant", "inverse_sqrt", "decay after warm-up"},
  {"schedule.min_lr", K_DOUBLE, OFF(schedule.min_lr), 0, 0, 10, 0, NULL, "0", "floor of the linear and cosine decays"},
  {"schedule.total_steps", K_INT, OFF(schedule.total_steps), 0, 0, 100000000, 0, NULL, "0", "end of the linear/cosine decay; 0 = train.steps"},
  {"train.steps", K_INT, OFF(train.steps), 0, 1, CF_CONFIG_MAX_STEPS, 0, NULL, "1000", "optimizer steps"},
  {"train.accumulate", K_INT, OFF(train.accumulate), 0, 1, 65535, 0, NULL, "1", "micro-batches of data.batch_size sequences per optimizer step (gradient accumulation): the update of one batch N times larger, in the memory of one micro-batch"},
  {"train.eval_every", K_INT, OFF(train.eval_every), 0, 0, 100000000, 0, NULL, "100", "validate every N steps (0 = only at the end)"},
  {"train.eval_batches", K_INT, OFF(train.eval_batches), 0, 1, 100000, 0, NULL, "8", "fixed validation batches per evaluation"},
  {"train.log_every", K_INT, OFF(train.log_every), 0, 1, 100000000, 0, NULL, "10", "print a progress line every N steps"},
  {"train.checkpoint_every", K_INT, OFF(train.checkpoint_every), 0, 0, 100000000, 0, NULL, "500", "checkpoint every N steps (0 = only at the end)"},
  {"train.out", K_STRING, STR(train.out), 0, 0, 0, NULL, "runs/default", "run directory (metrics, checkpoints, resolved config); relative to the working directory"},
};
#define NKEYS (sizeof keys / sizeof keys[0])
_Static_assert(NKEYS <= sizeof(((cf_config *)0)->where) / sizeof(((cf_config *)0)->where[0]), "cf_config.where is too small");

static const key_spec *find_key(const char *key) {
  for (size_t i = 0; i < NKEYS; i++)
    if (!strcmp(keys[i].key, key)) return &keys[i];
  return NULL;
}

/* The first key of the section `name` ("model" -> model.norm); NULL when no key starts with "name.". */
static const key_spec *section_first(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < NKEYS; i++)
    if (!strncmp(keys[i].key, name, n) && keys[i].key[n] == '.') return &keys[i];
  return NULL;
}

/* Edit distance, for "did you mean". */
static int distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      int c = d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[n][m];
}

/* The known key (or section, into the caller's section buffer) nearest to a misspelled one; NULL
 * when none is near. */
static const char *suggest(const char *key, char section[32]) {
  /* a misspelled section ("trian:") is best answered with the section */
  if (!strchr(key, '.')) {
    int sd = 99;
    for (size_t i = 0; i < NKEYS; i++) {
      const char *dot = strchr(keys[i].key, '.');
      if (!dot || dot - keys[i].key >= 32) continue;
      char sec[32];
      snprintf(sec, sizeof sec, "%.*s", (int)(dot - keys[i].key), keys[i].key);
      int d = distance(key, sec);
      if (d < sd) { sd = d; snprintf(section, 32, "%s", sec); }
    }
    if (sd <= 2 && sd < (int)strlen(key)) return section;
  }
  const char *best = NULL;
  int bd = 99;
  for (size_t i = 0; i < NKEYS; i++) {
    int dd = distance(key, keys[i].key);
    /* also compare the last component, so "model.layer" and "layers" both find model.layers */
    const char *dot = strrchr(keys[i].key, '.'), *kdot = strrchr(key, '.');
    if (dot) {
      int d2 = distance(kdot ? kdot + 1 : key, dot + 1) + (kdot && strncmp(key, keys[i].key, (size_t)(dot - keys[i].key)) ? 1 : 0);
      if (d2 < dd) dd = d2;
    }
    if (dd < bd) { bd = dd; best = keys[i].key; }
  }
  return bd <= 2 || (bd == 3 && strlen(key) >= 9) ? best : NULL;
}

static cf_status bad(const char *where, const char *key, const char *fmt, const char *a) {
  char msg[1024];
  snprintf(msg, sizeof msg, fmt, a);
  return CF_FAIL(CF_ERR_CONFIG, "%s: %s: %s", where, key, msg);
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  *out = strtod(s, &end);
  while (*end && isspace((unsigned char)*end)) end++;
  return end != s && !*end && !errno && isfinite(*out);
}

static cf_status check_range(const key_spec *k, double v, const char *where) {
  int lo_bad = (k->flags & MIN_EXCL) ? v <= k->min : v < k->min;
  int hi_bad = !(k->flags & NO_MAX) && ((k->flags & MAX_EXCL) ? v >= k->max : v > k->max);
  if (lo_bad || hi_bad) {
    char range[160], val[64];
    snprintf(range, sizeof range, "value %%s is out of range: must be %s %g%s%s%g", (k->flags & MIN_EXCL) ? ">" : ">=",
             k->min, (k->flags & NO_MAX) ? "" : " and ", (k->flags & NO_MAX) ? "" : ((k->flags & MAX_EXCL) ? "< " : "<= "),
             (k->flags & NO_MAX) ? 0.0 : k->max);
    if (k->flags & NO_MAX) { char *z = strrchr(range, '0'); if (z && z[1] == 0) *z = 0; }
    snprintf(val, sizeof val, "%g", v);
    return bad(where, k->key, range, val);
  }
  return CF_OK;
}

static cf_status set_value_raw(cf_config *c, const key_spec *k, const char *value, const char *where);

/* Set a key and remember where (line/col of the YAML, or -1 for --set) for later messages. */
static cf_status set_value_at(cf_config *c, const key_spec *k, const char *value, const char *where, int line, int col) {
  CF_TRY(set_value_raw(c, k, value, where));
  c->where[k - keys].line = line;
  c->where[k - keys].col = col;
  return CF_OK;
}
#define set_value(c, k, v, w) set_value_at(c, k, v, w, 0, 0)

static cf_status set_value_raw(cf_config *c, const key_spec *k, const char *value, const char *where) {
  char *base = (char *)c + k->offset;
  double d;
  switch (k->kind) {
    case K_INT:
      if (!parse_double(value, &d) || d != floor(d)) return bad(where, k->key, "expected an integer, got '%s'", value);
      CF_TRY(check_range(k, d, where));
      *(int *)base = (int)d;
      return CF_OK;
    case K_U64: {
      char *end;
      errno = 0;
      unsigned long long u = strtoull(value, &end, 10);
      if (end == value || *end || errno || value[0] == '-') return bad(where, k->key, "expected a non-negative integer, got '%s'", value);
      *(unsigned long long *)base = u;
      return CF_OK;
    }
    case K_DOUBLE:
      if (!parse_double(value, &d)) return bad(where, k->key, "expected a number, got '%s'", value);
      CF_TRY(check_range(k, d, where));
      *(double *)base = d;
      return CF_OK;
    case K_BOOL:
      if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "on")) *(int *)base = 1;
      else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off")) *(int *)base = 0;
      else return bad(where, k->key, "expected true or false, got '%s'", value);
      return CF_OK;
    case K_STRING:
      if (strlen(value) >= k->size) return bad(where, k->key, "value too long: '%s'", value);
      strcpy(base, value);
      return CF_OK;
    case K_ENUM: {
      int idx = 0;
      for (const char *p = k->choices; *p; idx++) {
        size_t n = strcspn(p, "|");
        if (strlen(value) == n && !strncmp(p, value, n)) { *(int *)base = idx; return CF_OK; }
        p += n + (p[n] == '|');
      }
      char fmt[256];
      snprintf(fmt, sizeof fmt, "expected one of %s, got '%%s'", k->choices);
      return bad(where, k->key, fmt, value);
    }
    case K_PAIR: {
      double a, b;
      char x[64], y[64], tail;
      if (sscanf(value, " [ %63[^, ] , %63[^] ] ] %c", x, y, &tail) != 2 || !parse_double(x, &a) || !parse_double(y, &b))
        return bad(where, k->key, "expected a pair [a, b], got '%s'", value);
      CF_TRY(check_range(k, a, where));
      CF_TRY(check_range(k, b, where));
      ((double *)base)[0] = a;
      ((double *)base)[1] = b;
      return CF_OK;
    }
  }
  return CF_ERR_INVALID_ARG;
}

/* The experiment a top-level key belongs to; CF_FILE_CONFIG for any other key. `base` alone does not
 * say which (CF_FILE_EXPERIMENT). */
static cf_file_kind experiment_key(const char *key) {
  if (!strcmp(key, "base")) return CF_FILE_EXPERIMENT;
  if (!strcmp(key, "variants") || !strcmp(key, "target_loss") || !strcmp(key, "plateau_after")) return CF_FILE_COMPARISON;
  if (!strcmp(key, "depths") || !strcmp(key, "placements")) return CF_FILE_GRADNORM;
  return CF_FILE_CONFIG;
}

/* "'key' belongs to ..." with the command that runs such a file. */
static cf_status belongs(const char *where, const char *key, cf_file_kind kind) {
  if (kind == CF_FILE_COMPARISON)
    return CF_FAIL(CF_ERR_CONFIG, "%s: '%s' belongs to a comparison file: run it with `clformer compare`", where, key);
  if (kind == CF_FILE_GRADNORM)
    return CF_FAIL(CF_ERR_CONFIG, "%s: '%s' belongs to a gradnorm file: run it with `clformer gradnorm`", where, key);
  return CF_FAIL(CF_ERR_CONFIG, "%s: '%s' belongs to an experiment file: one with variants: runs with `clformer "
                 "compare`, one with depths: with `clformer gradnorm`", where, key);
}

cf_status cf_config_set_key(cf_config *c, const char *key, const char *value, const char *where) {
  const key_spec *k = find_key(key);
  if (!k) {
    if (experiment_key(key) != CF_FILE_CONFIG) return belongs(where, key, experiment_key(key));
    const key_spec *first = section_first(key);
    if (first)
      return CF_FAIL(CF_ERR_CONFIG, "%s: '%s' is a section, not a key: set one of its keys, e.g. %s=%s", where, key,
                     first->key, first->def[0] ? first->def : "...");
    char section[32];
    const char *s = suggest(key, section);
    if (s) return CF_FAIL(CF_ERR_CONFIG, "%s: unknown key '%s' (did you mean '%s'?)", where, key, s);
    return CF_FAIL(CF_ERR_CONFIG, "%s: unknown key '%s' (clformer check --keys lists them all)", where, key);
  }
  return set_value_at(c, k, value, where, -1, 0);
}

int cf_config_vocab(const cf_config *c) {
  return c->data.tokenizer == CF_TOKENIZER_BPE ? c->data.vocab_size : CF_BYTE_VOCAB;
}

void cf_config_defaults(cf_config *c) {
  memset(c, 0, sizeof *c);
  for (size_t i = 0; i < NKEYS; i++) set_value(c, &keys[i], keys[i].def, "default");
  c->model.vocab = cf_config_vocab(c);
}

static cf_status absolute_data_path(char *field, size_t cap, const char *dir, int dirlen, const char *origin,
                                    int prefix);

cf_status cf_config_set(cf_config *c, const char *assignment) {
  const char *eq = strchr(assignment, '=');
  char where[1100];
  snprintf(where, sizeof where, "--set %s", assignment);
  if (!eq || eq == assignment) return CF_FAIL(CF_ERR_CONFIG, "%s: expected KEY=VALUE, e.g. --set model.norm=post", where);
  char key[256];
  snprintf(key, sizeof key, "%.*s", (int)(eq - assignment), assignment);
  CF_TRY(cf_config_set_key(c, key, eq + 1, where));
  /* a --set data path is relative to the working directory: made absolute now, or a resume (which
   * reads the run's config.yaml) would look for it beside that file */
  int pairs = c->model.arch == CF_ARCH_ENCODER_DECODER;
  if (!strcmp(key, "data.train")) return absolute_data_path(c->data.train, sizeof c->data.train, NULL, 0, where, pairs);
  if (!strcmp(key, "data.valid")) return absolute_data_path(c->data.valid, sizeof c->data.valid, NULL, 0, where, pairs);
  if (!strcmp(key, "data.test")) return absolute_data_path(c->data.test, sizeof c->data.test, NULL, 0, where, 1);
  return CF_OK;
}

/* ---------- YAML ---------- */

static void mark_where(char *buf, size_t n, const char *origin, yaml_mark_t m) {
  snprintf(buf, n, "%s:%zu:%zu", origin, m.line + 1, m.column + 1);
}

static cf_status walk(cf_config *c, yaml_document_t *doc, yaml_node_t *node, const char *prefix, const char *origin) {
  char where[1200];
  for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(doc, p->key), *vn = yaml_document_get_node(doc, p->value);
    mark_where(where, sizeof where, origin, kn->start_mark);
    if (kn->type != YAML_SCALAR_NODE) return CF_FAIL(CF_ERR_CONFIG, "%s: keys must be plain names", where);
    for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++) {
      yaml_node_t *qk = yaml_document_get_node(doc, q->key);
      if (qk->type == YAML_SCALAR_NODE && !strcmp((const char *)qk->data.scalar.value, (const char *)kn->data.scalar.value))
        return CF_FAIL(CF_ERR_CONFIG, "%s: '%s' appears twice (first at line %zu)", where,
                       (const char *)kn->data.scalar.value, qk->start_mark.line + 1);
    }
    char key[256];
    snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", (const char *)kn->data.scalar.value);
    const key_spec *k = find_key(key);
    const key_spec *first = k ? NULL : section_first(key);
    if (first && vn->type != YAML_MAPPING_NODE)
      return CF_FAIL(CF_ERR_CONFIG, "%s: %s: expected a mapping of %s.* keys (e.g. %s: {%s: %s}), not a %s", where, key,
                     key, key, first->key + strlen(key) + 1, first->def[0] ? first->def : "...",
                     vn->type == YAML_SEQUENCE_NODE ? "list" : "single value");
    if (first) {
      CF_TRY(walk(c, doc, vn, key, origin));
      continue;
    }
    if (!k) return cf_config_set_key(c, key, "", where);  /* reports the unknown key */
    mark_where(where, sizeof where, origin, vn->start_mark);
    if (k->kind == K_PAIR) {
      if (vn->type != YAML_SEQUENCE_NODE || vn->data.sequence.items.top - vn->data.sequence.items.start != 2)
        return bad(where, key, "expected a pair [a, b]%s", "");
      yaml_node_t *a = yaml_document_get_node(doc, vn->data.sequence.items.start[0]);
      yaml_node_t *b = yaml_document_get_node(doc, vn->data.sequence.items.start[1]);
      if (a->type != YAML_SCALAR_NODE || b->type != YAML_SCALAR_NODE) return bad(where, key, "expected a pair [a, b]%s", "");
      char pair[160];
      snprintf(pair, sizeof pair, "[%s, %s]", (const char *)a->data.scalar.value, (const char *)b->data.scalar.value);
      CF_TRY(set_value_at(c, k, pair, where, (int)vn->start_mark.line + 1, (int)vn->start_mark.column + 1));
      continue;
    }
    if (vn->type != YAML_SCALAR_NODE)
      return bad(where, key, "expected a single value, not a %s", vn->type == YAML_MAPPING_NODE ? "mapping" : "list");
    CF_TRY(set_value_at(c, k, (const char *)vn->data.scalar.value, where, (int)vn->start_mark.line + 1,
                        (int)vn->start_mark.column + 1));
  }
  return CF_OK;
}

cf_status cf_config_apply_node(cf_config *c, yaml_document_t *doc, yaml_node_t *mapping, const char *origin) {
  if (mapping->type != YAML_MAPPING_NODE)
    return CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: expected a mapping of config keys", origin, mapping->start_mark.line + 1,
                   mapping->start_mark.column + 1);
  if (!c->source[0]) snprintf(c->source, sizeof c->source, "%s", origin);
  return walk(c, doc, mapping, "", origin);
}

static cf_status parse_document(const char *text, const char *origin, yaml_document_t *doc) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return CF_FAIL(CF_ERR_NO_MEMORY, "cannot initialise the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
  cf_status st = CF_OK;
  if (!yaml_parser_load(&parser, doc))
    st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: malformed YAML: %s%s%s", origin, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1, parser.problem ? parser.problem : "syntax error",
                 parser.context ? " " : "", parser.context ? parser.context : "");
  yaml_parser_delete(&parser);
  return st;
}

/* A config or experiment file's text: a regular file (never a FIFO or device, which could block or
 * never end) of at most CF_CONFIG_MAX_BYTES, without NUL bytes. */
static cf_status read_config_file(const char *path, char **text) {
  size_t len;
  CF_TRY(cf_read_regular_file(path, CF_CONFIG_MAX_BYTES, "config file", CF_ERR_CONFIG, text, &len));
  if (strlen(*text) == len) return CF_OK;
  free(*text);
  *text = NULL;
  return CF_FAIL(CF_ERR_CONFIG, "%s: not a text file (contains NUL bytes)", path);
}

cf_status cf_yaml_load_file(const char *path, yaml_document_t *doc) {
  char *text;
  CF_TRY(read_config_file(path, &text));
  cf_status st = parse_document(text, path, doc);
  free(text);
  return st;
}

cf_file_kind cf_yaml_file_kind(yaml_document_t *doc, yaml_node_t **first_key) {
  yaml_node_t *root = yaml_document_get_root_node(doc);
  int seen[4] = {0};
  if (first_key) *first_key = NULL;
  if (!root || root->type != YAML_MAPPING_NODE) return CF_FILE_CONFIG;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(doc, p->key);
    cf_file_kind kind = k->type == YAML_SCALAR_NODE ? experiment_key((const char *)k->data.scalar.value) : CF_FILE_CONFIG;
    if (kind != CF_FILE_CONFIG && first_key && !*first_key) *first_key = k;
    seen[kind] = 1;
  }
  return seen[CF_FILE_GRADNORM] ? CF_FILE_GRADNORM : seen[CF_FILE_COMPARISON] ? CF_FILE_COMPARISON
         : seen[CF_FILE_EXPERIMENT] ? CF_FILE_EXPERIMENT : CF_FILE_CONFIG;
}

cf_status cf_config_file_kind(const char *path, cf_file_kind *kind) {
  yaml_document_t doc;
  *kind = CF_FILE_CONFIG;
  CF_TRY(cf_yaml_load_file(path, &doc));
  *kind = cf_yaml_file_kind(&doc, NULL);
  yaml_document_delete(&doc);
  return CF_OK;
}

cf_status cf_config_load_string(cf_config *c, const char *text, const char *origin) {
  yaml_document_t doc;
  CF_TRY(parse_document(text, origin, &doc));
  cf_status st = CF_OK;
  yaml_node_t *root = yaml_document_get_root_node(&doc), *ek;
  cf_file_kind kind = cf_yaml_file_kind(&doc, &ek);
  if (kind != CF_FILE_CONFIG) {  /* an experiment file: say which command runs it */
    char where[1200];
    mark_where(where, sizeof where, origin, ek->start_mark);
    st = belongs(where, (const char *)ek->data.scalar.value, kind);
  } else if (root && root->type == YAML_MAPPING_NODE) st = walk(c, &doc, root, "", origin);
  else if (root && !(root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0))
    st = CF_FAIL(CF_ERR_CONFIG, "%s:%zu:%zu: the top level must be a mapping of keys", origin, root->start_mark.line + 1,
                 root->start_mark.column + 1);
  yaml_document_delete(&doc);
  return st;
}

cf_status cf_config_load(cf_config *c, const char *path) {
  char *text;
  CF_TRY(read_config_file(path, &text));
  cf_status st = cf_config_load_string(c, text, path);
  free(text);
  snprintf(c->source, sizeof c->source, "%s", path);
  if (st != CF_OK) return st;
  return cf_config_resolve_paths(c, path);
}

/* A relative data path made absolute against the directory `dir` (its first dirlen bytes; NULL: the
 * working directory), so a run's saved config.yaml finds its data from anywhere, a resume included. A path
 * that does not resolve (a missing file) stays as written, for the error that names it; a prefix (an
 * encoder-decoder's data.train names PREFIX.LANG files) is no file, so its directory is resolved. */
static cf_status absolute_data_path(char *field, size_t cap, const char *dir, int dirlen, const char *origin,
                                    int prefix) {
  if (!field[0]) return CF_OK;
  char joined[2200], real[PATH_MAX];
  if (dir && field[0] != '/') snprintf(joined, sizeof joined, "%.*s/%s", dirlen, dir, field);
  else snprintf(joined, sizeof joined, "%s", field);
  const char *use = realpath(joined, real) ? real : joined;
  /* resolving a prefix's directory makes resolving again (a comparison's variants) change nothing */
  char *slash = strrchr(joined, '/'), dir_real[PATH_MAX];
  if (prefix && use == joined && slash != joined) {
    const char *base = slash ? slash + 1 : joined;
    if (slash) *slash = 0;
    size_t a = 0, b = strlen(base);
    if (realpath(slash ? joined : ".", dir_real) && (a = strlen(dir_real)) + b + 2 <= sizeof real) {
      memcpy(real, dir_real, a);
      real[a] = '/';
      memmove(real + a + 1, base, b + 1);
      use = real;
    } else if (slash) {
      *slash = '/';
    }
  }
  if (strlen(use) >= cap) return CF_FAIL(CF_ERR_CONFIG, "%s: data path too long", origin);
  strcpy(field, use);
  return CF_OK;
}

cf_status cf_config_resolve_paths(cf_config *c, const char *path) {
  const char *slash = strrchr(path, '/'), *dir = slash ? path : NULL;  /* no slash: the working directory */
  int dirlen = slash ? (int)(slash - path) : 0;
  int pairs = c->model.arch == CF_ARCH_ENCODER_DECODER;
  CF_TRY(absolute_data_path(c->data.train, sizeof c->data.train, dir, dirlen, path, pairs));
  CF_TRY(absolute_data_path(c->data.test, sizeof c->data.test, dir, dirlen, path, 1));
  return absolute_data_path(c->data.valid, sizeof c->data.valid, dir, dirlen, path, pairs);
}

/* "file:line:col: key" (or "--set key", or just "key" for a default) for cross-key messages. */
static const char *key_where(const cf_config *c, const char *key, char *buf, size_t n) {
  const key_spec *k = find_key(key);
  int line = k ? c->where[k - keys].line : 0, col = k ? c->where[k - keys].col : 0;
  if (line > 0) snprintf(buf, n, "%s:%d:%d: %s", c->source[0] ? c->source : "config", line, col, key);
  else if (line < 0) snprintf(buf, n, "--set %s", key);
  else snprintf(buf, n, "%s", key);
  return buf;
}

const char *cf_config_key_where(const cf_config *c, const char *key, char *buf, size_t n) {
  return key_where(c, key, buf, n);
}

/* The keys model.arch ties together: the encoder-decoder reads pairs of files through BPE with the
 * fused attention kernels; the language model reads bytes. Resolves attention auto and
 * encoder_layers 0. */
static cf_status validate_arch(cf_config *c) {
  char w[1200];
  if (c->model.arch == CF_ARCH_DECODER) {
    if (c->data.tokenizer == CF_TOKENIZER_BPE)
      return CF_FAIL(CF_ERR_CONFIG, "%s: bpe is for model.arch encoder_decoder (translation); the language model "
                     "reads bytes", key_where(c, "data.tokenizer", w, sizeof w));
    if (c->model.attention == CF_ATTENTION_AUTO) c->model.attention = CF_ATTENTION_MATERIALIZED;
    return CF_OK;
  }
  if (c->data.tokenizer != CF_TOKENIZER_BPE)
    return CF_FAIL(CF_ERR_CONFIG, "%s: model.arch encoder_decoder needs data.tokenizer: bpe",
                   key_where(c, "data.tokenizer", w, sizeof w));
  if (!c->data.source_lang[0] || !c->data.target_lang[0])
    return CF_FAIL(CF_ERR_CONFIG, "%s: model.arch encoder_decoder needs data.source_lang and data.target_lang (the "
                   "suffixes of the two aligned files, e.g. es and en)",
                   key_where(c, c->data.source_lang[0] ? "data.target_lang" : "data.source_lang", w, sizeof w));
  if (c->model.attention == CF_ATTENTION_MATERIALIZED)
    return CF_FAIL(CF_ERR_CONFIG, "%s: model.arch encoder_decoder needs fused attention (padding masks and "
                   "cross-attention): set fused or auto", key_where(c, "model.attention", w, sizeof w));
  c->model.attention = CF_ATTENTION_FUSED;
  if (!c->data.valid[0])
    return CF_FAIL(CF_ERR_CONFIG, "%s: model.arch encoder_decoder needs validation files (their prefix, like "
                   "data.train's)", key_where(c, "data.valid", w, sizeof w));
  if (c->train.accumulate != 1)
    return CF_FAIL(CF_ERR_CONFIG, "%s: model.arch encoder_decoder does not accumulate micro-batches yet: raise "
                   "data.max_tokens instead", key_where(c, "train.accumulate", w, sizeof w));
  if (c->data.max_tokens < c->data.max_len)
    return CF_FAIL(CF_ERR_CONFIG, "%s: %d tokens cannot hold one sentence of data.max_len = %d",
                   key_where(c, "data.max_tokens", w, sizeof w), c->data.max_tokens, c->data.max_len);
  if (c->model.encoder_layers == 0) c->model.encoder_layers = c->model.layers;
  return CF_OK;
}

void cf_config_model_shape(const cf_config *c, int *B, int *T) {
  if (c->model.arch != CF_ARCH_ENCODER_DECODER) {
    *B = c->data.batch_size;
    *T = c->data.seq_len;
    return;
  }
  *T = c->data.max_len;
  *B = (c->data.max_tokens + c->data.max_len - 1) / c->data.max_len;
}

/* Every tensor's element count must fit the kernels' 32-bit indexing: the widest activation of the
 * rows laid out, the attention probabilities (materialized), the parameters. */
static cf_status validate_sizes(const cf_config *c) {
  char w[1200];
  int B, T, seq2seq = c->model.arch == CF_ARCH_ENCODER_DECODER;
  cf_config_model_shape(c, &B, &T);
  double N = (double)B * T, C = c->model.d_model;
  double widest = fmax(fmax(3 * C, (double)c->model.d_ff), (double)cf_config_vocab(c));
  double att = seq2seq ? 0 : (double)B * c->model.heads * T * T;
  double params = 12.0 * C * C * (c->model.layers + (seq2seq ? c->model.encoder_layers : 0)) +
                  (seq2seq ? 4.0 * C * C * c->model.layers : 0);  /* blocks, and the decoder's cross-attention */
  if (N * widest < 2147483648.0 && att < 2147483648.0 && params < 2147483648.0) return CF_OK;
  if (seq2seq)
    return CF_FAIL(CF_ERR_CONFIG, "%s: %d tokens a batch (data.max_tokens, in sequences of data.max_len = %d) with "
                   "d_model %d, d_ff %d, %d + %d layers is too large: a tensor would exceed 2^31 elements",
                   key_where(c, "data.max_tokens", w, sizeof w), B * T, T, c->model.d_model, c->model.d_ff,
                   c->model.encoder_layers, c->model.layers);
  return CF_FAIL(CF_ERR_CONFIG, "%s: batch %d x seq_len %d with d_model %d, d_ff %d, %d layers is too large: a "
                 "tensor would exceed 2^31 elements", key_where(c, "data.batch_size", w, sizeof w), B, T,
                 c->model.d_model, c->model.d_ff, c->model.layers);
}

cf_status cf_config_validate(cf_config *c) {
  char w[1200];
  if (!c->data.train[0])
    return CF_FAIL(CF_ERR_CONFIG, "%s%sdata.train: missing required value (the training text file)", c->source,
                   c->source[0] ? ": " : "");
  if (!c->train.out[0]) return CF_FAIL(CF_ERR_CONFIG, "%s: must name a directory", key_where(c, "train.out", w, sizeof w));
  CF_TRY(validate_arch(c));
  CF_TRY(validate_sizes(c));
  if ((double)c->train.accumulate * c->data.batch_size * c->data.seq_len >= 2147483648.0)
    return CF_FAIL(CF_ERR_CONFIG, "%s: %d micro-batches of %d x %d tokens are too many for one step (2^31 tokens)",
                   key_where(c, "train.accumulate", w, sizeof w), c->train.accumulate, c->data.batch_size,
                   c->data.seq_len);
  if (c->model.d_model % c->model.heads)
    return CF_FAIL(CF_ERR_CONFIG, "%s: %d heads do not divide model.d_model = %d", key_where(c, "model.heads", w, sizeof w),
                   c->model.heads, c->model.d_model);
  if (c->schedule.total_steps && c->schedule.total_steps < c->schedule.warmup &&
      (c->schedule.decay == CF_DECAY_LINEAR || c->schedule.decay == CF_DECAY_COSINE))
    return CF_FAIL(CF_ERR_CONFIG, "%s: %d is shorter than schedule.warmup = %d",
                   key_where(c, "schedule.total_steps", w, sizeof w), c->schedule.total_steps, c->schedule.warmup);
  if (c->schedule.min_lr > c->optim.lr)
    return CF_FAIL(CF_ERR_CONFIG, "%s: %g is above optim.lr = %g", key_where(c, "schedule.min_lr", w, sizeof w),
                   c->schedule.min_lr, c->optim.lr);
  if (c->model.final_norm == CF_FINAL_NORM_AUTO)
    c->model.final_norm = c->model.norm == CF_NORM_PRE ? CF_FINAL_NORM_ON : CF_FINAL_NORM_OFF;
  c->model.vocab = cf_config_vocab(c);
  return CF_OK;
}

double cf_config_lr(const cf_config *c, int step) {
  double lr = c->optim.lr;
  int w = c->schedule.warmup;
  if (w > 0 && step <= w) return lr * step / w;
  int total = c->schedule.total_steps ? c->schedule.total_steps : c->train.steps;
  double frac = total > w ? (double)(step - w) / (double)(total - w) : 1.0;
  if (frac > 1) frac = 1;
  switch (c->schedule.decay) {
    case CF_DECAY_INVERSE_SQRT: return w > 0 ? lr * sqrt((double)w / step) : lr;  /* flat when there is no warm-up */
    case CF_DECAY_LINEAR: return c->schedule.min_lr + (lr - c->schedule.min_lr) * (1 - frac);
    case CF_DECAY_COSINE: return c->schedule.min_lr + (lr - c->schedule.min_lr) * 0.5 * (1 + cos(3.14159265358979323846 * frac));
    default: return lr;
  }
}

/* ---------- output ---------- */

static void format_value(const cf_config *c, const key_spec *k, char *buf, size_t n) {
  const char *base = (const char *)c + k->offset;
  switch (k->kind) {
    case K_INT: snprintf(buf, n, "%d", *(const int *)base); break;
    case K_U64: snprintf(buf, n, "%llu", *(const unsigned long long *)base); break;
    case K_DOUBLE: snprintf(buf, n, "%.10g", *(const double *)base); break;
    case K_BOOL: snprintf(buf, n, "%s", *(const int *)base ? "true" : "false"); break;
    case K_STRING: {  /* double-quoted YAML: escape what would end or bend the scalar */
      size_t o = 0;
      buf[o++] = '"';
      for (const unsigned char *p = (const unsigned char *)base; *p && o + 6 < n; p++) {
        if (*p == '"' || *p == '\\') { buf[o++] = '\\'; buf[o++] = (char)*p; }
        else if (*p < 0x20) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", *p);
        else buf[o++] = (char)*p;
      }
      buf[o++] = '"';
      buf[o] = 0;
      break;
    }
    case K_PAIR: snprintf(buf, n, "[%.10g, %.10g]", ((const double *)base)[0], ((const double *)base)[1]); break;
    case K_ENUM: {
      int v = *(const int *)base, i = 0;
      const char *p = k->choices;
      while (i < v && strchr(p, '|')) { p = strchr(p, '|') + 1; i++; }
      snprintf(buf, n, "%.*s", (int)strcspn(p, "|"), p);
      break;
    }
  }
}

int cf_config_first_difference(const cf_config *a, const cf_config *b, char key[64], char was[1100], char now[1100]) {
  for (size_t i = 0; i < NKEYS; i++) {
    const char *k = keys[i].key;
    if (!strcmp(k, "device") || !strcmp(k, "train.steps") || !strcmp(k, "train.out") || !strcmp(k, "train.eval_batches") ||
        (!strncmp(k, "train.", 6) && strstr(k, "_every")))
      continue;
    format_value(a, &keys[i], was, 1100);
    format_value(b, &keys[i], now, 1100);
    if (strcmp(was, now)) {
      snprintf(key, 64, "%s", k);
      return 1;
    }
  }
  return 0;
}

void cf_config_write(const cf_config *c, FILE *f) {
  char section[64] = "";
  for (size_t i = 0; i < NKEYS; i++) {
    const char *dot = strchr(keys[i].key, '.');
    char val[1100];
    format_value(c, &keys[i], val, sizeof val);
    if (!dot) { fprintf(f, "%s: %s\n", keys[i].key, val); section[0] = 0; continue; }
    if (strncmp(section, keys[i].key, (size_t)(dot - keys[i].key)) || section[dot - keys[i].key]) {
      snprintf(section, sizeof section, "%.*s", (int)(dot - keys[i].key), keys[i].key);
      fprintf(f, "%s:\n", section);
    }
    fprintf(f, "  %s: %s\n", dot + 1, val);
  }
}

void cf_config_print_keys(FILE *f) {
  fprintf(f, "| key | default | meaning |\n|---|---|---|\n");
  for (size_t i = 0; i < NKEYS; i++)
    fprintf(f, "| `%s` | `%s` | %s |\n", keys[i].key, keys[i].def[0] ? keys[i].def : "\"\"", keys[i].help);
}
