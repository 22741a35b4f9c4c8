/* Data: split sizes, batch determinism and shape, bounds, the evenly spaced validation windows, and
 * clear errors for bad files. */
#include <string.h>
#include <fcntl.h>
#include <math.h>
#include <unistd.h>
#include "clformer/data.h"
#include "testutil.h"

int main(void) {
  char path[] = "/tmp/clformer-data-XXXXXX";
  int fd = mkstemp(path);
  size_t n = 10000;
  char *text = malloc(n);
  for (size_t i = 0; i < n; i++) text[i] = (char)('a' + (i * 7 + i / 13) % 26);
  TEST_ASSERT(write(fd, text, n) == (ssize_t)n, "write");
  close(fd);
  cf_config c;
  cf_config_defaults(&c);
  snprintf(c.data.train, sizeof c.data.train, "%s", path);
  c.data.valid_fraction = 0.1;
  c.data.seq_len = 17;
  cf_data d;
  TEST_OK(cf_data_open(&d, &c));
  TEST_ASSERT(d.n_train == 9000 && d.n_valid == 1000, "split %zu/%zu", d.n_train, d.n_valid);
  TEST_ASSERT(d.unigram_entropy > 3.2 && d.unigram_entropy <= log(26.0) + 1e-9, "entropy %g", d.unigram_entropy);
  int B = 5, T = 17, in1[85], tg1[85], in2[85], tg2[85], in3[85], tg3[85];
  cf_data_batch(&d, CF_SPLIT_TRAIN, 1, 0, B, T, in1, tg1);
  cf_data_batch(&d, CF_SPLIT_TRAIN, 1, 0, B, T, in2, tg2);
  TEST_ASSERT(!memcmp(in1, in2, sizeof in1) && !memcmp(tg1, tg2, sizeof tg1), "same (seed, index) must give the same batch");
  cf_data_batch(&d, CF_SPLIT_TRAIN, 1, 1, B, T, in3, tg3);
  TEST_ASSERT(memcmp(in1, in3, sizeof in1), "a different index gives a different batch");
  cf_data_batch(&d, CF_SPLIT_TRAIN, 2, 0, B, T, in3, tg3);
  TEST_ASSERT(memcmp(in1, in3, sizeof in1), "a different seed gives a different batch");
  /* targets are the inputs shifted by one, and every window lies in its split */
  for (int idx = 0; idx < 200; idx++) {
    for (int split = 0; split < 2; split++) {
      cf_data_batch(&d, split, 7, (uint64_t)idx, B, T, in1, tg1);
      const uint8_t *base = split ? d.valid : d.train;
      size_t len = split ? d.n_valid : d.n_train;
      for (int b = 0; b < B; b++) {
        for (int t = 0; t + 1 < T; t++) TEST_ASSERT(tg1[b * T + t] == in1[b * T + t + 1], "shift");
        /* find the window: it must occur in the split */
        int found = 0;
        for (size_t o = 0; o + T < len && !found; o++) {
          int ok = 1;
          for (int t = 0; t < T && ok; t++) ok = base[o + t] == in1[b * T + t] && base[o + t + 1] == tg1[b * T + t];
          found = ok;
        }
        TEST_ASSERT(found, "window of batch %d row %d split %d not in its split", idx, b, split);
      }
    }
  }
  /* validation: batches x B windows spaced evenly over the split, whatever the seed (there is none) */
  int nb = 4, VB = 3, VT = 17, nw = nb * VB;
  size_t span = d.n_valid - (size_t)VT, prev = 0;
  for (int i = 0; i < nb; i++) {
    cf_data_valid_batch(&d, nb, i, VB, VT, in1, tg1);
    cf_data_valid_batch(&d, nb, i, VB, VT, in2, tg2);
    size_t bytes = (size_t)VB * VT * sizeof *in1;
    TEST_ASSERT(!memcmp(in1, in2, bytes) && !memcmp(tg1, tg2, bytes), "validation batch %d differs twice", i);
    for (int b = 0; b < VB; b++) {
      int j = i * VB + b;
      size_t off = (size_t)j * span / (size_t)nw;
      TEST_ASSERT(j == 0 ? off == 0 : off - prev >= span / nw && off - prev <= span / nw + 1, "window %d at %zu, %zu after "
                  "the one before (a stride of %zu)", j, off, off - prev, span / nw);
      prev = off;
      int same = 1;
      for (int t = 0; t < VT; t++)
        same &= in1[b * VT + t] == d.valid[off + t] && tg1[b * VT + t] == d.valid[off + t + 1];
      TEST_ASSERT(same, "validation window %d is not bytes %zu.. of the split", j, off);
    }
  }
  TEST_ASSERT(prev + (size_t)VT + 1 <= d.n_valid && prev + 2 * span / nw >= span, "the last window (at %zu) must end in "
              "the split and lie within a stride of its end", prev);
  /* a one-window evaluation reads the start of the split */
  cf_data_valid_batch(&d, 1, 0, 1, VT, in1, tg1);
  TEST_ASSERT(in1[0] == d.valid[0] && tg1[VT - 1] == d.valid[VT], "one window");
  cf_data_close(&d);

  /* errors */
  cf_set_verbosity(-1);
  c.data.seq_len = 2000;  /* the 1000-byte validation split is too small */
  TEST_ASSERT(cf_data_open(&d, &c) == CF_ERR_DATA && strstr(cf_last_error(), "validation"), "%s", cf_last_error());
  c.data.seq_len = 16;
  snprintf(c.data.train, sizeof c.data.train, "/nonexistent/file.txt");
  TEST_ASSERT(cf_data_open(&d, &c) == CF_ERR_DATA && strstr(cf_last_error(), "/nonexistent/file.txt"), "%s", cf_last_error());
  snprintf(c.data.train, sizeof c.data.train, "/tmp");
  TEST_ASSERT(cf_data_open(&d, &c) == CF_ERR_DATA, "a directory");
  fd = open(path, O_WRONLY | O_TRUNC);
  close(fd);
  snprintf(c.data.train, sizeof c.data.train, "%s", path);
  TEST_ASSERT(cf_data_open(&d, &c) == CF_ERR_DATA && strstr(cf_last_error(), "empty"), "empty file: %s", cf_last_error());
  cf_set_verbosity(1);
  int toks[8];
  TEST_ASSERT(cf_tokenize("h\xc3\xa9!", toks, 8) == 4 && toks[1] == 0xc3 && toks[3] == '!', "byte tokenizer");
  unlink(path);
  free(text);
  return test_finish("test_data");
}
