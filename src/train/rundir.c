/* The run directory's lock and the temporaries a killed run leaves (rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include "train/rundir.h"

/* The pid written in the lock file, 0 when there is none (yet) or it is no live process (the lock is
 * held by something else: a killed run's pid stays in the file). The holder writes it right after
 * taking the lock, so an empty file is read again a few times before giving up. */
static long holder_pid(int fd) {
  for (int tries = 0; tries < 20; tries++) {
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
      buf[n] = 0;
      long pid = strtol(buf, NULL, 10);
      if (pid > 0 && (pid_t)pid == pid) return kill((pid_t)pid, 0) == 0 || errno == EPERM ? pid : 0;
    }
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  return 0;
}

cf_status cf_run_dir_lock(const char *dir, int *fd) {
  char path[2100];
  snprintf(path, sizeof path, "%s/run.lock", dir);
  *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (*fd < 0) return CF_FAIL(CF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  int r;
  while ((r = flock(*fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
  if (r != 0) {
    int e = errno;
    long pid = e == EWOULDBLOCK ? holder_pid(*fd) : 0;
    close(*fd);
    *fd = -1;
    if (e != EWOULDBLOCK) return CF_FAIL(CF_ERR_IO, "cannot lock %s: %s", path, strerror(e));
    char who[64] = "another process";
    if (pid > 0) snprintf(who, sizeof who, "another run (pid %ld)", pid);
    return CF_FAIL(CF_ERR_CONFIG, "run directory '%s' is in use by %s: wait for it to end, or choose another "
                   "directory", dir, who);
  }
  char line[32];
  int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
  if (ftruncate(*fd, 0) != 0 || pwrite(*fd, line, (size_t)n, 0) != n)
    cf_log(1, "warning: cannot write the pid into %s: %s", path, strerror(errno));
  return CF_OK;
}

void cf_run_dir_unlock(int fd) {
  if (fd < 0) return;
  if (ftruncate(fd, 0) != 0) {}  /* the pid of a run that ended would only mislead */
  close(fd);                     /* drops the lock */
}

/* The writer's pid when name is one of our files' temporaries (NAME.tmp.PID.SERIAL), else 0. */
static long temporary_of_ours(const char *name) {
  static const char *const ours[] = {"checkpoint.safetensors", "run.json", "config.yaml", "metrics.csv"};
  for (size_t i = 0; i < sizeof ours / sizeof *ours; i++) {
    size_t len = strlen(ours[i]);
    if (strncmp(name, ours[i], len) || strncmp(name + len, ".tmp.", 5)) continue;
    const char *p = name + len + 5, *dot = strchr(p, '.');
    if (!dot || dot == p || strspn(p, "0123456789") != (size_t)(dot - p)) return 0;
    if (!dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1)) return 0;
    errno = 0;
    long pid = strtol(p, NULL, 10);
    return errno || pid <= 0 ? 0 : pid;
  }
  return 0;
}

int cf_run_dir_remove_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long pid = temporary_of_ours(e->d_name);
    if (pid <= 0 || (pid_t)pid != pid || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) == 0) removed++;
    else cf_log(1, "warning: cannot remove %s: %s", path, strerror(errno));
  }
  closedir(d);
  return removed;
}
