/* Beam search for the encoder-decoder (fairseq's sequence generator, on the host): it asks a
 * caller's scorer for next-token log-probabilities and keeps the hypotheses. It knows nothing of
 * models or devices (cf_model_next_logprobs is one such scorer); it does not sample (sample.c), and
 * has no n-best lists, min_len, prefix constraints or n-gram blocking. */
#ifndef CLFORMER_MODEL_BEAM_H
#define CLFORMER_MODEL_BEAM_H

#include "clformer/base.h"

/* The scorer, called once per step: log-probabilities logprobs (n, V) of the next token after each
 * of n prefixes (n, len), row-major ids each starting with bos. n is always n_sentences * beam: row
 * s*beam + k is hypothesis k of sentence s, and rows holding no live hypothesis (unused, or of a
 * finished sentence) are still passed, filled with pad after their tokens; their values are
 * ignored. A status other than CF_OK (reported by the scorer) stops the search with it. */
typedef cf_status (*cf_next_logprobs_fn)(void *user, const int *prefix, int n, int len, float *logprobs);

typedef struct cf_beam_options {
  int beam;            /* hypotheses kept per sentence, >= 1; 1 is greedy (argmax) decoding */
  double len_penalty;  /* fairseq's lenpen: a finished hypothesis scores sum(logp) / len^len_penalty,
                          len counting its eos; 0 ranks by the plain sum */
  int max_len;         /* tokens generated at most per sentence, eos included (>= 1); at the last
                          step eos is forced, so an output holds at most max_len - 1 ids */
  int bos, eos, pad;   /* distinct ids in [0, V); pad and bos are never generated */
  int V;               /* vocabulary size, >= 3 */
  const int *max_lens; /* sentence s's own limit, in [1, max_len], as max_len is for all; NULL: max_len */
} cf_beam_options;

/* Decode n_sentences at once. Each step takes, per sentence, the 2*beam best (cumulative log-
 * probability) candidates over its live hypotheses x V; an eos among the first beam of them
 * finishes its hypothesis, and the first beam that are not eos go on. At step 1 only hypothesis 0
 * is live (the others would repeat it). A sentence is done with beam finished hypotheses, with none
 * left to extend, or at max_len. Ties go to the lower token id, then the lower hypothesis index;
 * between finished hypotheses of equal score, the one finished first.
 * Out: ids (n_sentences, max_len): row s holds the best finished hypothesis by normalized score,
 * without bos and eos, lens[s] ids then pad; scores (n_sentences, may be NULL): its normalized
 * score. Errors: CF_ERR_INVALID_ARG for bad options, CF_ERR_NO_MEMORY, CF_ERR_NONFINITE when the
 * scorer gives NaN or +inf for a live hypothesis (naming sentence, hypothesis, token and step) or a
 * sentence ends with no finite-scoring hypothesis, and the scorer's own status. On error the
 * outputs are unspecified. */
cf_status cf_beam_search(const cf_beam_options *o, int n_sentences, cf_next_logprobs_fn fn, void *user, int *ids,
                         int *lens, double *scores);

#endif
