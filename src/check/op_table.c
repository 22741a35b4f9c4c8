/* The op table: the families' rows in the self-test's order. */
#include <string.h>
#include "check/op_table.h"

static const struct family { const cf_op *rows; const int *n; } families[] = {
    {cf_ops_layernorm, &cf_nops_layernorm},     {cf_ops_elementwise, &cf_nops_elementwise},
    {cf_ops_attention, &cf_nops_attention},     {cf_ops_embedding, &cf_nops_embedding},
    {cf_ops_crossentropy, &cf_nops_crossentropy}, {cf_ops_optimizer, &cf_nops_optimizer},
};

int cf_op_count(void) {
  int n = 0;
  for (size_t f = 0; f < sizeof families / sizeof *families; f++) n += *families[f].n;
  return n;
}

const cf_op *cf_op_get(int i) {
  for (size_t f = 0; i >= 0 && f < sizeof families / sizeof *families; f++) {
    if (i < *families[f].n) return &families[f].rows[i];
    i -= *families[f].n;
  }
  return NULL;
}

const cf_op *cf_op_find(const char *name) {
  for (int i = 0; i < cf_op_count(); i++)
    if (!strcmp(cf_op_get(i)->name, name)) return cf_op_get(i);
  return NULL;
}
