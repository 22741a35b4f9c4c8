/* Small file helpers: whole-file read (bounded, regular files only, where the file is the user's
 * input), atomic write (temporary, fsync, rename), mkdir -p. */
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
  int bad = ferror(f), err = errno;
  fclose(f);
  if (bad) { free(buf); return CF_FAIL(CF_ERR_IO, "error reading %s: %s", path, strerror(err)); }
  buf[n] = 0;
  /* exactly n + 1 bytes, so a parser reading past the end meets AddressSanitizer, not slack */
  char *exact = realloc(buf, n + 1);
  *text = exact ? exact : buf;
  if (len) *len = n;
  return CF_OK;
}

/* Why a file of this mode is not one to read as text or data. */
static const char *not_regular(mode_t m) {
  if (S_ISDIR(m)) return "it is a directory, not a regular file";
  if (S_ISFIFO(m)) return "it is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(m)) return "it is a character device, not a regular file";
  if (S_ISBLK(m)) return "it is a block device, not a regular file";
  if (S_ISSOCK(m)) return "it is a socket, not a regular file";
  return "it is not a regular file";
}

int cf_open_regular(const char *path, size_t *size, const char **why) {
  struct stat sb;
  *size = 0;
  if (stat(path, &sb) != 0) { *why = strerror(errno); return -1; }
  if (!S_ISREG(sb.st_mode)) { *why = not_regular(sb.st_mode); return -1; }
  /* O_NONBLOCK: a FIFO swapped in after the stat opens at once (and is refused by the fstat) */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) { *why = strerror(errno); return -1; }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    *why = S_ISREG(sb.st_mode) ? strerror(errno) : not_regular(sb.st_mode);
    close(fd);
    return -1;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size = (size_t)sb.st_size;
  return fd;
}

cf_status cf_read_regular_file(const char *path, size_t max_bytes, const char *what, cf_status status, char **text,
                               size_t *len) {
  *text = NULL;
  if (len) *len = 0;
  const char *why = NULL;
  size_t size;
  int fd = cf_open_regular(path, &size, &why);
  if (fd < 0) return CF_FAIL(status, "cannot open %s: %s", path, why);
  if (size > max_bytes) {
    close(fd);
    return CF_FAIL(status, "%s: too large for a %s (%zu bytes; at most %zu)", path, what, size, max_bytes);
  }
  /* the size is a hint: a file may grow while read, and /proc's files say 0; the bound holds anyway */
  size_t cap = size + 1, n = 0;
  char *buf = malloc(cap + 1);
  int err = 0;
  while (buf && !err) {
    if (n == cap) {
      if (cap > max_bytes) break;
      size_t grown = cap > max_bytes / 2 ? max_bytes + 1 : cap * 2;
      char *g = realloc(buf, grown + 1);
      if (!g) { free(buf); buf = NULL; break; }
      buf = g;
      cap = grown;
    }
    ssize_t got = read(fd, buf + n, cap - n);
    if (got < 0 && errno != EINTR) err = errno;
    if (got == 0) break;
    if (got > 0) n += (size_t)got;
  }
  close(fd);
  cf_status st = CF_OK;
  if (!buf) st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory reading %s", path);
  else if (err) st = CF_FAIL(status, "error reading %s: %s", path, strerror(err));
  else if (n > max_bytes) st = CF_FAIL(status, "%s: too large for a %s (more than %zu bytes)", path, what, max_bytes);
  if (st != CF_OK) { free(buf); return st; }
  buf[n] = 0;
  /* exactly n + 1 bytes, so a parser reading past the end meets AddressSanitizer, not slack */
  char *exact = realloc(buf, n + 1);
  *text = exact ? exact : buf;
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

/* mkdir -p, the last directory created with last_mode (the ones above with 0755). */
static cf_status mkdirs(const char *path, mode_t last_mode) {
  char buf[4096];
  if (!path[0]) return CF_FAIL(CF_ERR_IO, "an empty directory name");
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return CF_FAIL(CF_ERR_IO, "path too long: %s", path);
  for (char *p = buf + 1; ; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, c ? 0755 : last_mode) != 0 && errno != EEXIST)
        return CF_FAIL(CF_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return CF_FAIL(CF_ERR_IO, "%s is not a directory", path);
  return CF_OK;
}

cf_status cf_mkdirs(const char *path) { return mkdirs(path, 0755); }
cf_status cf_mkdirs_private(const char *path) { return mkdirs(path, 0700); }
