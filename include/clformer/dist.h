/* clformer/dist.h: data-parallel training across processes (MPI ranks), one device each.
 *
 * Without MPI (a build with CLFORMER_MPI=OFF) or without a launcher (`mpirun`), the world is one
 * process: size 1, rank 0, local rank 0, and every function below is a no-op that succeeds. MPI's
 * own types stay inside src/dist/, so this header needs no mpi.h. */
#ifndef CLFORMER_DIST_H
#define CLFORMER_DIST_H

#include <stddef.h>
#include "clformer/base.h"

typedef struct cf_world {
  int size, rank;              /* MPI_COMM_WORLD's */
  int local_size, local_rank;  /* among the ranks on this host (MPI_COMM_TYPE_SHARED) */
  int mpi;                     /* 1: MPI is initialised (launched by mpirun in an MPI build) */
  char host[256];              /* this rank's host name */
} cf_world;

/* Start MPI when this process was launched by an MPI launcher (Open MPI's OMPI_COMM_WORLD_SIZE,
 * PMIx's PMIX_RANK or PMI_RANK in the environment); else the world of one. Errors are returned by
 * every MPI call here (MPI_ERRORS_RETURN), checked, and named with MPI's own text. A launcher of N
 * > 1 processes around a build without MPI is refused (CF_ERR_CONFIG): each would train alone. */
cf_status cf_dist_init(int *argc, char ***argv);
/* The world (1/0/0 before cf_dist_init or without MPI). */
const cf_world *cf_dist_world(void);
/* End MPI. failed: this process is ending with a failure its peers may not know of (they may be
 * waiting in a collective), so the whole job is aborted (MPI_Abort with exit_code) rather than
 * left to hang; a failure every rank agreed on (cf_dist_agree) ends normally. */
void cf_dist_finalize(int failed, int exit_code);
/* The error this rank is failing with, for the line cf_dist_finalize prints before it aborts the job
 * ("rank R of N on HOST failed (exit E: WHY)"); without it, the library's last error, if any is left. */
void cf_dist_failure_reason(const char *why);

/* Collective: every rank passes its status; each learns whether any failed. A rank that failed gets
 * its own status back; the others get CF_ERR_MPI ("rank R on HOST failed: ...", not printed: the
 * failing rank said why) when one did; all get CF_OK when none did. After it, ending is agreed. */
cf_status cf_dist_agree(cf_status st);
/* Whether a failure was agreed by cf_dist_agree: 0 none, 1 this rank's own, 2 another rank's (which
 * said why: this one need say nothing). */
int cf_dist_failure_agreed(void);

/* Collective sum of n floats into buf on every rank, in buckets of bucket floats (0: one bucket),
 * in a fixed order: each bucket is cut into one slice per rank; rank r gathers slice r from every
 * rank (MPI_Ialltoallv) and adds them in rank order 0, 1, ..., size-1; the sums are shared back
 * (MPI_Iallgatherv). The result is the same bits on every rank and from run to run, whatever
 * algorithm MPI picks, and whatever the buckets. Each collective is waited for idle (tested every
 * 0.1 ms), not in MPI's spinning wait, so a rank waiting for another leaves the cores to the devices
 * (the backward it overlaps). *wait_s (optional) adds the seconds spent waiting. */
cf_status cf_dist_allreduce_sum(float *buf, size_t n, size_t bucket, double *wait_s);
/* Collective: rank root's bytes into every rank's buf. */
cf_status cf_dist_bcast(void *buf, size_t bytes, int root);
/* Collective: *flag becomes 1 on every rank when it is non-zero on any. */
cf_status cf_dist_any(int *flag);
/* Collective: every rank's text (at most len - 1 bytes), into all (size * len bytes, rank r's at
 * all + r * len) on every rank. */
cf_status cf_dist_gather_text(const char *mine, char *all, size_t len);
/* Collective: every rank's seconds into all (size doubles). */
cf_status cf_dist_gather_double(double mine, double *all);
/* Collective: a barrier (no rank passes it before all arrive). */
cf_status cf_dist_barrier(void);
/* The same, waiting idle (a non-blocking barrier polled every millisecond) rather than spinning as
 * MPI's own wait does, so that ranks waiting for one at work leave it the cores (a benchmark's
 * single-rank baseline). */
cf_status cf_dist_barrier_idle(void);

/* The device this rank uses: among the devices spec matches ("auto": every device of the type auto
 * would choose; "P:D": that one; a type or a name: every device of that type or with that text), the
 * one at local_rank modulo their number. Writes its "P:D" spec into pd (size n); *shared is set when
 * more ranks on this host than matching devices (ranks share a device). CF_ERR_NO_DEVICE when
 * nothing matches. */
cf_status cf_dist_choose_device(const char *spec, char *pd, size_t n, int *shared, int *matches);

#endif
