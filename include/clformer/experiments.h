/* The paper's experiments as library calls: `compare` (the warm-up comparison, Section 3.2 /
 * Figure 2) and `gradnorm` (gradient norms at initialization, Theorem 1 / Figure 3). Each reads its
 * YAML file, runs, and writes its report files; what a person should see goes to the caller's
 * stream and progress callback, never straight to the terminal. */
#ifndef CLFORMER_EXPERIMENTS_H
#define CLFORMER_EXPERIMENTS_H

#include <stdio.h>
#include "clformer/base.h"
#include "clformer/train.h"

/* Called after each unit of work: done of total finished, `what` the one just finished. */
typedef void (*cf_progress_fn)(void *user, int done, int total, const char *what, double elapsed_s, double eta_s);

typedef struct cf_compare_options {
  const char *path;            /* the comparison file */
  char **sets;                 /* KEY=VALUE overrides of its base */
  int nsets;
  int seeds;                   /* 0: the file's own */
  const char *device, *out;    /* NULL: the file's own */
  const char *only;            /* run just this variant; NULL: all */
  int log_steps;               /* log-scaled step axis in curves.svg */
  int report_only;             /* train nothing; rewrite the summary from the runs present */
  FILE *report;                /* one line per skipped or diverged run and the files written; NULL: none */
  cf_train_hooks hooks;        /* every run's progress; a stop request ends the comparison after that run */
  /* The device of this process (under mpirun: of this rank; the app's choice, which says so); NULL:
   * cf_context_create of the spec */
  cf_status (*make_context)(const char *spec, cf_context **ctx);
} cf_compare_options;
/* Runs the comparison's variants in turn (each a training run that reports its own progress) and
 * writes OUT/summary.md, summary.json and curves.svg. *interrupted is set when a run stopped on a
 * signal (its checkpoint saved); the report is still written. Under mpirun (clformer/dist.h) every
 * rank runs each variant in turn, data-parallel (cf_train); rank 0 alone looks into OUT (what to
 * skip or resume is its decision, sent to the others) and writes the runs and the report. */
cf_status cf_compare(const cf_compare_options *opts, int *interrupted);

/* Checks a comparison file as cf_compare reads it, the --set overrides on its base, without training:
 * every variant resolved and validated, and the data of the base and of every variant opened as
 * training opens it (cf_data_check). On success writes a summary line and each variant's resolved
 * config (a YAML document each) to report (NULL: nothing). CF_ERR_CONFIG or CF_ERR_DATA, reported,
 * otherwise. */
cf_status cf_compare_check(const char *path, char **sets, int nsets, FILE *report);

typedef struct cf_gradnorm_options {
  const char *path;
  char **sets;
  int nsets;
  int seeds;                   /* 0: the file's own */
  const char *device, *out;    /* NULL: the file's own */
  FILE *report;                /* the fitted exponents and the files written; NULL: none */
  cf_progress_fn progress;     /* after each (placement, depth, seed); NULL: none */
  void *user;
} cf_gradnorm_options;
/* Writes OUT/gradnorm.md, gradnorm.json and gradnorm.svg: a language model's blocks, or an
 * encoder-decoder's decoder and encoder blocks as two series (each depth both stacks' layer count; the
 * BPE learned into OUT/bpe.merges). */
cf_status cf_gradnorm(const cf_gradnorm_options *opts);
/* Checks a gradnorm file as cf_gradnorm reads it, the --set overrides on its base, without a device:
 * the model of every placement and depth validated, the base's data opened. On success writes a
 * summary line and the resolved base config to report (NULL: nothing). */
cf_status cf_gradnorm_check(const char *path, char **sets, int nsets, FILE *report);

/* Corpus BLEU exactly as sacreBLEU 2.x computes it by default (BLEU(): 13a tokenization, 4-grams,
 * brevity penalty against the closest reference length, 'exp' smoothing, mixed case), also with
 * tokenize none and intl and smoothing none. Add sentence pairs, then score (bleu.c, bleu_tokenize.c). */
typedef enum cf_bleu_tok { CF_BLEU_13A, CF_BLEU_NONE, CF_BLEU_INTL } cf_bleu_tok;
typedef enum cf_bleu_smooth { CF_BLEU_SMOOTH_EXP, CF_BLEU_SMOOTH_NONE } cf_bleu_smooth;
typedef struct cf_bleu cf_bleu;
typedef struct cf_bleu_score {
  double bleu;                     /* 0..100 */
  double precisions[4];            /* 0..100, as sacreBLEU reports them (smoothed ones included) */
  double bp, ratio;                /* brevity penalty; hyp_len / ref_len (0 when ref_len is 0) */
  long long hyp_len, ref_len;      /* tokens; ref_len sums each sentence's closest reference length */
  long long counts[4], totals[4];  /* clipped n-gram matches and hypothesis n-grams, n = 1..4 */
} cf_bleu_score;

/* "13a", "none", "intl" <-> cf_bleu_tok; parse returns 0 for an unknown name. */
const char *cf_bleu_tok_name(cf_bleu_tok tok);
int cf_bleu_tok_parse(const char *name, cf_bleu_tok *tok);
cf_status cf_bleu_create(cf_bleu_tok tok, cf_bleu **out);
void cf_bleu_free(cf_bleu *b);
/* One hypothesis and its nrefs (>= 1) references, each one segment of UTF-8 text; text that is not
 * UTF-8 is CF_ERR_DATA, reported, and adds nothing. */
cf_status cf_bleu_add(cf_bleu *b, const char *hyp, const char *const *refs, int nrefs);
cf_bleu_score cf_bleu_result(const cf_bleu *b, cf_bleu_smooth smooth);
/* sacreBLEU's line "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)"
 * and its signature "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp" (without sacreBLEU's version). */
void cf_bleu_format(const cf_bleu_score *s, char *buf, size_t size);
void cf_bleu_signature(const cf_bleu *b, cf_bleu_smooth smooth, char *buf, size_t size);
/* The tokenized segment as sacreBLEU's tokenizer returns it (tokens joined by one space), malloc'd
 * into *out; CF_ERR_DATA for text that is not UTF-8. */
cf_status cf_bleu_tokenize(cf_bleu_tok tok, const char *text, char **out);

/* ---- Translating with a trained encoder-decoder (translate.c) ---- */
typedef struct cf_translate_options {
  int beam;            /* hypotheses a sentence; 1: greedy */
  double len_penalty;  /* fairseq's lenpen: scores divided by length^len_penalty (1: fairseq's default) */
} cf_translate_options;
/* Translations of lines[0..n) (malloc'd strings into out[0..n), free each): each line BPE-encoded
 * (at most data.max_len - 1 tokens, the rest cut and counted in *truncated, may be NULL), sorted by
 * length into batches the model holds (sentences x beam x the longest output at most its tokens a
 * side), beam-searched (cf_beam_search on the host over incremental decoding on the device,
 * cf_model_decode_next, the kept keys and values reordered as hypotheses change places), decoded
 * back to text (UTF-8: bytes that do not form it, and NUL, become U+FFFD, as Python's
 * errors='replace'). An output has at most min(data.max_len, 2 x its source's tokens + 10) tokens,
 * eos included, and no id the BPE does not have. progress (may be NULL): after each batch. */
cf_status cf_translate_lines(cf_model *m, const cf_bpe *bpe, const char *const *lines, size_t n,
                             const cf_translate_options *o, char **out, size_t *truncated, cf_progress_fn progress,
                             void *user);
/* Corpus BLEU (sacreBLEU's default: 13a, exp smoothing) of the translations of src_path's first
 * `limit` lines (0: all) against ref_path's, line by line; *score filled. */
cf_status cf_translate_bleu(cf_model *m, const cf_bpe *bpe, const char *src_path, const char *ref_path, size_t limit,
                            const cf_translate_options *o, cf_bleu_score *score);

#endif
