/* Training configuration: the YAML schema (libyaml), defaults, validation and overrides.
 * Every key, its type, default and range is in one table in src/config/config.c; the README's
 * config reference is printed from the same table (`clformer check --keys`). */
#ifndef CLFORMER_CONFIG_H
#define CLFORMER_CONFIG_H

#include <stdio.h>
#include "clformer/base.h"
#include "clformer/ops.h"  /* cf_activation */

/* The largest train.steps a config may ask for (also what a checkpoint's step may be at most). */
#define CF_CONFIG_MAX_STEPS 100000000

/* The choices of the enum keys, in the order their YAML names are listed in src/config/config.c. */
typedef enum cf_norm_placement { CF_NORM_POST, CF_NORM_PRE } cf_norm_placement;
typedef enum cf_decay { CF_DECAY_INVERSE_SQRT, CF_DECAY_LINEAR, CF_DECAY_COSINE, CF_DECAY_CONSTANT } cf_decay;
typedef enum cf_optimizer { CF_OPTIM_ADAM, CF_OPTIM_ADAMW, CF_OPTIM_SGD } cf_optimizer;
typedef enum cf_positions { CF_POS_SINUSOIDAL, CF_POS_LEARNED } cf_positions;
typedef enum cf_final_norm { CF_FINAL_NORM_AUTO, CF_FINAL_NORM_OFF, CF_FINAL_NORM_ON } cf_final_norm;
/* data.tokenizer: bytes (V = 256), or byte-pair encoding learned from the training text (V =
 * data.vocab_size, src/data/bpe*.c). */
typedef enum cf_tokenizer { CF_TOKENIZER_BYTE, CF_TOKENIZER_BPE } cf_tokenizer;
/* model.arch: the decoder-only language model, or the encoder-decoder translation model (Vaswani
 * et al.; the paper's IWSLT experiment) over data.source_lang -> data.target_lang pairs. */
typedef enum cf_arch { CF_ARCH_DECODER, CF_ARCH_ENCODER_DECODER } cf_arch;
/* model.attention: fused kernels (cf_attention_fused_*) or the T x T scores through batched GEMMs;
 * auto (resolved by validation): materialized for the decoder-only model, fused for the
 * encoder-decoder (whose padding and cross-attention only the fused kernels do). */
typedef enum cf_attention_impl { CF_ATTENTION_FUSED, CF_ATTENTION_MATERIALIZED, CF_ATTENTION_AUTO } cf_attention_impl;
/* model.init: Xavier-uniform for every matrix, or fairseq's normal(0, d_model^-1/2) for the token
 * (and learned position) embeddings and the output projection, Xavier for the rest. */
typedef enum cf_weight_init { CF_WEIGHT_INIT_XAVIER, CF_WEIGHT_INIT_FAIRSEQ } cf_weight_init;
/* The byte tokenizer's vocabulary: every byte value is a token. */
#define CF_BYTE_VOCAB 256

/* The model's shape and regularisation: all cf_model_create needs besides the optimizer's. */
typedef struct cf_model_config {
  int vocab;                  /* from data.tokenizer (cf_config_vocab), not a key of its own */
  cf_arch arch;
  cf_norm_placement norm;
  int layers, d_model, heads, d_ff;
  int encoder_layers;         /* encoder_decoder: encoder blocks (validation resolves 0: as many as layers) */
  cf_activation activation;
  double dropout, attn_dropout, ln_eps, label_smoothing;
  cf_final_norm final_norm;   /* validation resolves AUTO (on for pre, off for post) */
  cf_positions positions;
  int tie_embeddings, scale_embeddings;
  cf_attention_impl attention;
  cf_weight_init init;
} cf_model_config;

typedef struct cf_optim_config {
  cf_optimizer name;
  double lr, beta1, beta2, eps, weight_decay, momentum, clip_norm;
} cf_optim_config;

typedef struct cf_config {
  char device[128];
  unsigned long long seed;
  struct {
    char train[1024], valid[1024];
    double valid_fraction;
    cf_tokenizer tokenizer;
    int vocab_size;             /* bpe: special ids, bytes and merges */
    char source_lang[16], target_lang[16];  /* encoder_decoder: file suffixes of the two sides */
    char test[1024];            /* encoder_decoder: the test files' prefix (BLEU) */
    int seq_len, batch_size;
    int max_tokens, max_len;    /* encoder_decoder: tokens a side per batch, longest sentence */
  } data;
  cf_model_config model;
  cf_optim_config optim;
  struct {
    int warmup, total_steps;
    cf_decay decay;
    double min_lr;
  } schedule;
  struct {
    int steps, eval_every, eval_batches, log_every, checkpoint_every;
    int accumulate;  /* micro-batches of data.batch_size per optimizer step */
    char out[1024];
  } train;
  /* where each key was last set, for messages: line 0 = default, -1 = --set */
  char source[1024];
  struct { int line, col; } where[64];
} cf_config;

/* The vocabulary size of a config's tokenizer (what the model's embedding and output layer are
 * sized by): 256 for bytes, data.vocab_size for BPE. */
int cf_config_vocab(const cf_config *c);

/* The defaults (the README documents them). */
void cf_config_defaults(cf_config *c);

/* Load a YAML file over the defaults: a regular file of at most CF_CONFIG_MAX_BYTES (a directory,
 * FIFO or device is refused without blocking). On bad input: a message with file:line:column and
 * the key (unknown keys get a "did you mean"; an experiment file's keys, the command that runs it),
 * and CF_ERR_CONFIG. */
cf_status cf_config_load(cf_config *c, const char *path);
/* Same from a string (`origin` names it in messages). */
cf_status cf_config_load_string(cf_config *c, const char *yaml, const char *origin);

/* The most bytes a config (or experiment) file may hold; larger files are refused unread. */
#define CF_CONFIG_MAX_BYTES ((size_t)1 << 20)

/* What a YAML file is, by its top-level keys: a training config, a comparison (`clformer compare`:
 * variants, target_loss or plateau_after), a gradnorm file (`clformer gradnorm`: depths or
 * placements), or an experiment file that says neither (base: alone). */
typedef enum cf_file_kind { CF_FILE_CONFIG, CF_FILE_COMPARISON, CF_FILE_GRADNORM, CF_FILE_EXPERIMENT } cf_file_kind;
/* Read path (as cf_config_load does: a regular file, bounded, well-formed YAML) and say which. */
cf_status cf_config_file_kind(const char *path, cf_file_kind *kind);

/* Make relative data paths relative to the directory of the file at `path`. */
cf_status cf_config_resolve_paths(cf_config *c, const char *path);

/* Apply one "section.key=value" override (as from --set), with the same checks. */
cf_status cf_config_set(cf_config *c, const char *assignment);
/* Set a dotted key from a string value; `where` names the origin in messages. */
cf_status cf_config_set_key(cf_config *c, const char *key, const char *value, const char *where);

/* Where key was last set, for messages: "file:line:col: key", "--set key", or just "key" (a
 * default); into buf, which is returned. */
const char *cf_config_key_where(const cf_config *c, const char *key, char *buf, size_t n);

/* Cross-key checks (heads divides d_model, ...) and derived defaults. Call after loading and
 * overrides, before any work. */
cf_status cf_config_validate(cf_config *c);

/* The first key (in schema order) whose value differs between a and b, ignoring the keys a run
 * may change when resumed (train.steps, train.*_every, train.eval_batches, train.out, device); its
 * name and both values as text. 0 when they agree. */
int cf_config_first_difference(const cf_config *a, const cf_config *b, char key[64], char was[1100], char now[1100]);

/* Write the fully resolved config as YAML (loadable by cf_config_load). */
void cf_config_write(const cf_config *c, FILE *f);
/* The schema as a Markdown table: key, type, default, meaning. */
void cf_config_print_keys(FILE *f);

/* The (B, T) a model of config c is laid out for: data.batch_size x data.seq_len, or for an
 * encoder-decoder ceil(data.max_tokens / data.max_len) x data.max_len (the tokens of a side a batch
 * holds, the longest sentence). Validated configs only (encoder_layers resolved). */
void cf_config_model_shape(const cf_config *c, int *B, int *T);

/* Learning rate at a 1-based step: linear warm-up from 0 to lr over `warmup` steps, then the decay. */
double cf_config_lr(const cf_config *c, int step);

#endif
