/* Housekeeping of the on-disk cache (compiled program binaries and self-test verdicts).
 *
 * Every kernel edit, driver update or new device adds entries under new keys and orphans the old
 * ones, so without pruning the directory only grows. After each write (a cache miss, the rare
 * case) entries unused for a while are removed, then the least recently used ones until the total
 * is under a size limit. "Used" is the file's mtime, refreshed on a hit when it is over a day old,
 * so a hit rarely costs a write and atime (often off) is not needed. Only names the cache itself
 * writes are touched: <program>-<32 hex>.bin, selftest-<16 hex>.txt, gemm-calib-<16 hex>.txt (the
 * GEMM layer's measured choice, keyed like the binaries), and their leftover
 * *.tmp.<pid> files from an interrupted write; anything else in the directory (the GEMM tuning
 * files, a user's own files) is left alone. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime/runtime.h"

#define DAY_S 86400.0
#define DEFAULT_MAX_AGE_DAYS 60.0
#define DEFAULT_MAX_MB 256

static int hex_run(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789abcdef", s[i]) || !s[i]) return 0;
  return 1;
}

/* Whether `name` is an entry this cache writes (or the temporary file of one). */
static int is_cache_entry(const char *name) {
  char base[512];
  const char *tmp = strstr(name, ".tmp.");
  size_t n = tmp ? (size_t)(tmp - name) : strlen(name);
  if (n >= sizeof base) return 0;
  memcpy(base, name, n);
  base[n] = 0;
  if (n > 4 + 33 && !strcmp(base + n - 4, ".bin")) return base[n - 37] == '-' && hex_run(base + n - 36, 32);
  if (n == 11 + 16 + 4 && !strncmp(base, "gemm-calib-", 11)) return hex_run(base + 11, 16) && !strcmp(base + 27, ".txt");
  return n == 9 + 16 + 4 && !strncmp(base, "selftest-", 9) && hex_run(base + 9, 16) && !strcmp(base + 25, ".txt");
}

void cf_cache_touch(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && difftime(time(NULL), st.st_mtime) > DAY_S) utimensat(AT_FDCWD, path, NULL, 0);
}

typedef struct entry {
  char name[256];
  time_t used;
  off_t bytes;
} entry;

static int oldest_first(const void *a, const void *b) {
  time_t x = ((const entry *)a)->used, y = ((const entry *)b)->used;
  return x < y ? -1 : x > y;
}

int cf_cache_prune(const char *dir, double max_age_days, size_t max_bytes) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  entry *v = NULL;
  size_t n = 0, cap = 0, total = 0;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_cache_entry(e->d_name) || strlen(e->d_name) >= sizeof v->name) continue;
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
    if (n == cap) {
      entry *w = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
      if (!w) break;
      v = w;
    }
    snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
    /* a temporary file is someone's write in progress unless it is an hour old */
    double age_limit = strstr(e->d_name, ".tmp.") ? 3600.0 : max_age_days * DAY_S;
    v[n].used = difftime(now, st.st_mtime) > age_limit ? 0 : st.st_mtime;  /* 0: expired */
    v[n].bytes = st.st_size;
    total += (size_t)st.st_size;
    n++;
  }
  closedir(d);
  if (n) qsort(v, n, sizeof *v, oldest_first);
  int removed = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i].used != 0 && total <= max_bytes) break;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
    if (unlink(path) == 0) {
      removed++;
      total -= (size_t)v[i].bytes;
    }
  }
  free(v);
  if (removed) cf_log(2, "note: removed %d old entries from the kernel cache %s", removed, dir);
  return removed;
}

void cf_cache_prune_default(const char *dir) {
  long mb = DEFAULT_MAX_MB;
  const char *s = getenv("CLFORMER_CACHE_MAX_MB");
  if (s && *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*end && v >= 0) mb = v;
    else cf_log(1, "note: CLFORMER_CACHE_MAX_MB='%s' is not a number of MB; using %ld", s, mb);
  }
  cf_cache_prune(dir, DEFAULT_MAX_AGE_DAYS, (size_t)mb << 20);
}
