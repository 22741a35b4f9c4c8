/* Small file helpers: whole-file read, atomic write (temporary, fsync, rename), mkdir -p. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/base.h"

cf_status cf_read_file(const char *path, char **text, size_t *len) {
  *text = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return CF_FAIL(CF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      cap = (n + 65536 + 1) * 2;
      char *g = realloc(buf, cap);
      if (!g) { free(buf); fclose(f); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory reading %s", path); }
      buf = g;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) { free(buf); return CF_FAIL(CF_ERR_IO, "error reading %s", path); }
  buf[n] = 0;
  *text = buf;
  if (len) *len = n;
  return CF_OK;
}

cf_status cf_write_file_atomic(const char *path, const void *data, size_t len) {
  size_t plen = strlen(path) + 32;
  char *tmp = malloc(plen);
  if (!tmp) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  /* unique per process and per call, so two threads replacing one file never share a temporary; a
   * name a dead process with this pid left behind is skipped */
  static atomic_uint serial;
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 1000; tries++) {
    snprintf(tmp, plen, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&serial, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    cf_status st = CF_FAIL(CF_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    free(tmp);
    return st;
  }
  const char *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      cf_status st = CF_FAIL(CF_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
      close(fd);
      unlink(tmp);
      free(tmp);
      return st;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    cf_status st = CF_FAIL(CF_ERR_IO, "cannot flush %s: %s", tmp, strerror(errno));
    unlink(tmp);
    free(tmp);
    return st;
  }
  if (rename(tmp, path) != 0) {
    cf_status st = CF_FAIL(CF_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return st;
  }
  free(tmp);
  return CF_OK;
}

cf_status cf_mkdirs(const char *path) {
  char buf[4096];
  if (!path[0]) return CF_FAIL(CF_ERR_IO, "an empty directory name");
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return CF_FAIL(CF_ERR_IO, "path too long: %s", path);
  for (char *p = buf + 1; ; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return CF_FAIL(CF_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return CF_FAIL(CF_ERR_IO, "%s is not a directory", path);
  return CF_OK;
}
