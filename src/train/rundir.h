/* The run directory's guards: an exclusive lock held for the life of a run (so two processes never
 * write one directory's files at once), and the temporaries that a run killed in the middle of an
 * atomic write (cf_write_file_atomic: PATH.tmp.PID.SERIAL) leaves behind. */
#ifndef CLFORMER_TRAIN_RUNDIR_H
#define CLFORMER_TRAIN_RUNDIR_H

#include "base/base.h"

/* Take DIR/run.lock exclusively (flock, non-blocking) and write our pid into it. The lock lasts
 * until cf_run_dir_unlock or the end of the process, however it ends (the kernel drops it even on
 * SIGKILL). Another process holding it: CF_ERR_CONFIG at once, naming DIR and that process's pid.
 * *fd: the lock's descriptor, -1 on failure. */
cf_status cf_run_dir_lock(const char *dir, int *fd);
/* Release a lock taken by cf_run_dir_lock (-1: nothing to release). The file stays, empty. */
void cf_run_dir_unlock(int fd);

/* Remove DIR/NAME.tmp.PID.SERIAL, NAME one of a run's own files (checkpoint.safetensors, run.json,
 * config.yaml, metrics.csv) and PID and SERIAL decimal, whose writer PID is no live process (kill
 * fails with ESRCH). Nothing else is touched. Returns how many were removed. */
int cf_run_dir_remove_stale(const char *dir);

#endif
