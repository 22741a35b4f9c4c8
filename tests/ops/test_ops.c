/* Every row of the op table (src/check/op_table.c) at its larger test case: sizes off every
 * work-group grid, tensors at odd offsets of their own buffers, outputs poisoned with NaN first,
 * against the double reference under the row's tolerance; then run again from the same inputs,
 * which must give the same bits. And the table itself: unique names, every row with a run and a
 * reference, every compared tensor sized. The families' own tests add their special cases (finite
 * differences, masks, edge shapes). */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

static void check_rerun(cf_context *ctx, const cf_op *op) {
  cf_op_case *c;
  TEST_OK(cf_op_case_create(ctx, op, &op->test_dims, 5, 0x5eed, &c));
  float *first = NULL, *second = NULL;
  size_t n1 = 0, n2 = 0;
  TEST_OK(cf_op_case_run(c, NULL));
  TEST_OK(cf_op_case_read(c, &first, &n1));
  TEST_OK(cf_op_case_reset(c));
  TEST_OK(cf_op_case_run(c, NULL));
  TEST_OK(cf_op_case_read(c, &second, &n2));
  TEST_ASSERT(n1 == n2 && n1 > 0 && first && second && !memcmp(first, second, n1 * sizeof *first),
              "%s: a second run from the same inputs gives other bits", op->name);
  free(first);
  free(second);
  cf_op_case_free(c);
}

static void check_table(void) {
  TEST_ASSERT(cf_op_count() >= 30, "the op table has %d rows", cf_op_count());
  for (int i = 0; i < cf_op_count(); i++) {
    const cf_op *op = cf_op_get(i);
    TEST_ASSERT(op->run && op->reference && op->atol > 0 && op->rtol > 0, "%s: row incomplete", op->name);
    TEST_ASSERT(cf_op_find(op->name) == op, "%s: two rows share the name", op->name);
    int compared = 0;
    for (int k = 0; k < CF_OP_MAX_TENSORS && op->t[k].name; k++)
      compared += op->t[k].role == CF_OP_OUT || op->t[k].role == CF_OP_ACC || op->t[k].role == CF_OP_INOUT;
    TEST_ASSERT(compared > 0, "%s: compares nothing", op->name);
  }
  TEST_ASSERT(cf_op_get(cf_op_count()) == NULL && cf_op_get(-1) == NULL, "rows outside the table");
  TEST_ASSERT(cf_op_find("no_such_op") == NULL, "an unknown name was found");
}

int main(void) {
  cf_context *ctx = test_context();
  check_table();
  cf_selftest t = {0};
  for (int i = 0; i < cf_op_count(); i++) {
    const cf_op *op = cf_op_get(i);
    TEST_OK(cf_op_check(ctx, op, &op->test_dims, 5, 0x7e57 + (unsigned long long)i, &t));
    const cf_selftest_row *r = &t.rows[t.n - 1];
    printf("   %-38s max err %.3g (worst %.3g of its tolerance)\n", r->op, r->max_err, r->worst);
    TEST_ASSERT(t.n == i + 1 && r->pass, "%s: max error %g, %.3g times its tolerance", op->name, r->max_err, r->worst);
    check_rerun(ctx, op);
  }
  cf_context_free(ctx);
  return test_finish("test_ops");
}
