/* Inside the BLEU module: sacreBLEU's tokenizers, compiled once per accumulator (bleu_tokenize.c). */
#ifndef CLFORMER_EXPERIMENTS_BLEU_H
#define CLFORMER_EXPERIMENTS_BLEU_H

#include "clformer/experiments.h"

typedef struct cf_bleu_tokenizer {
  cf_bleu_tok tok;
  void *re[4];           /* pcre2_code *, applied in order */
  const char *repl[4];   /* each one's replacement */
  int nre;
} cf_bleu_tokenizer;

cf_status cf_bleu_tokenizer_init(cf_bleu_tokenizer *t, cf_bleu_tok tok);
void cf_bleu_tokenizer_free(cf_bleu_tokenizer *t);
/* text rstripped, tokenized and its tokens joined by one space (malloc'd into *out). */
cf_status cf_bleu_tokenizer_run(const cf_bleu_tokenizer *t, const char *text, char **out);

#endif
