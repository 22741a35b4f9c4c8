/* Every run of a comparison is validated on the same text: cf_evaluate (what train and compare
 * report as the validation loss) reads the evenly spaced windows of cf_data_valid_batch, whatever
 * the run's seed, so seeds and variants differ by their weights only. Checked: one model's loss
 * under two seeds is the same number, and is the mean of the losses of those windows' batches. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include "clformer/clformer.h"
#include "clformer/train.h"
#include "testutil.h"

int main(void) {
  char path[] = "/tmp/clformer-valid-XXXXXX";
  int fd = mkstemp(path);
  size_t n = 20000;
  char *text = malloc(n);
  test_rng r = test_rng_seed(3);
  for (size_t i = 0; i < n; i++) text[i] = (char)('a' + (int)(test_uniform(&r) * 26));  /* no two windows alike */
  TEST_ASSERT(write(fd, text, n) == (ssize_t)n, "write");
  close(fd);
  cf_context *ctx = test_context();
  cf_config c;
  test_model_config(&c, 1, 16, 2, 32);
  snprintf(c.data.train, sizeof c.data.train, "%s", path);
  c.data.seq_len = 12;
  c.data.batch_size = 3;
  c.train.eval_batches = 5;
  test_validate(&c);
  cf_data d;
  TEST_OK(cf_data_open(&d, &c));
  cf_model *m;
  TEST_OK(cf_model_create(ctx, &c.model, &c.optim, c.seed, 3, 12, &m));
  TEST_OK(cf_model_init(m, 5));
  double l1, l2, l3;
  c.seed = 1;
  TEST_OK(cf_evaluate(m, &d, &c, &l1));
  c.seed = 2;
  TEST_OK(cf_evaluate(m, &d, &c, &l2));
  TEST_ASSERT(isfinite(l1) && l1 == l2, "the validation loss depends on the seed: %.9g (seed 1), %.9g (seed 2)", l1, l2);
  /* the same windows by hand */
  int in[36], tg[36];
  double sum = 0;
  for (int i = 0; i < 5; i++) {
    float l;
    cf_data_valid_batch(&d, 5, i, 3, 12, in, tg);
    TEST_OK(cf_model_forward(m, in, tg, 0, 0));
    TEST_OK(cf_model_loss(m, &l));
    sum += l;
  }
  TEST_ASSERT(fabs(sum / 5 - l1) <= 1e-6 * fabs(l1), "cf_evaluate %.9g, the windows' mean %.9g", l1, sum / 5);
  /* and another evaluation length reads other windows (so the equality above is about the windows) */
  c.train.eval_batches = 4;
  TEST_OK(cf_evaluate(m, &d, &c, &l3));
  TEST_ASSERT(l3 != l1, "4 and 5 batches gave the same loss %.9g", l3);
  cf_model_free(m);
  cf_data_close(&d);
  cf_context_free(ctx);
  unlink(path);
  free(text);
  return test_finish("test_validation");
}
