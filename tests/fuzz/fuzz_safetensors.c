/* libFuzzer target: the safetensors reader (cf_safetensors_read: header length, JSON, dtypes, shapes,
 * offsets, metadata limits). The reader takes a path, so each input is written to a memfd and read
 * through /proc/self/fd/N (no file system traffic). For a file it accepts, every entry's first and
 * last float and every metadata string are touched, so a pointer outside the loaded file is caught
 * by AddressSanitizer, and each entry's data must lie inside the file. Built by tests/fuzz/CMakeLists.txt; run by the ctest test fuzz_safetensors. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clformer/train.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (fd < 0) {
    fd = memfd_create("fuzz_safetensors", 0);
    if (fd < 0) { perror("memfd_create"); abort(); }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) { perror("memfd write"); abort(); }
  cf_st_file f;
  if (cf_safetensors_read(path, &f) != CF_OK) return 0;
  volatile float sink = 0;
  volatile size_t chars = 0;
  for (int i = 0; i < f.n; i++) {
    const cf_st_entry *e = &f.entries[i];
    if (cf_safetensors_find(&f, e->name) == NULL) abort();  /* every entry can be found by its name */
    /* cf_read_file's buffer is larger than the file, so ASan alone would miss a read just past its
     * end: the data must lie inside the file's bytes. */
    const char *lo = (const char *)e->data, *hi = lo + 4 * e->numel;
    if (lo < f.buf + 8 || hi > f.buf + f.len || hi < lo) {
      fprintf(stderr, "fuzz_safetensors: entry '%s' [%td, %td) outside the %zu-byte file\n", e->name, lo - f.buf,
              hi - f.buf, f.len);
      abort();
    }
    if (e->numel) {
      float x;
      memcpy(&x, e->data, sizeof x);
      sink += x;
      memcpy(&x, e->data + (e->numel - 1), sizeof x);
      sink += x;
    }
  }
  for (int i = 0; i < f.n_meta; i++) {
    chars += strlen(f.meta[i].key) + strlen(f.meta[i].value);
    if (cf_safetensors_meta(&f, f.meta[i].key) == NULL) abort();
  }
  (void)sink;
  (void)chars;
  cf_safetensors_free(&f);
  return 0;
}
