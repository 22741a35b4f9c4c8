/* The world of ranks and its collectives (clformer/dist.h). Every MPI call goes through CF_MPI:
 * MPI_COMM_WORLD returns errors (MPI_ERRORS_RETURN) instead of aborting, and a failing call is
 * reported with its text, file:line, MPI's error string, the rank and the host. Without MPI
 * (CLFORMER_HAVE_MPI unset) the world is one process and the collectives are identities. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "clformer/dist.h"
#include "base/base.h"
#ifdef CLFORMER_HAVE_MPI
#include <mpi.h>
#endif

static cf_world world = {1, 0, 1, 0, 0, "localhost"};
static int agreed_failure;
static char failure_reason[1024];  /* cf_dist_failure_reason's, for the abort line */

void cf_dist_failure_reason(const char *why) { snprintf(failure_reason, sizeof failure_reason, "%s", why ? why : ""); }

const cf_world *cf_dist_world(void) { return &world; }
int cf_dist_failure_agreed(void) { return agreed_failure; }

/* The launcher's size from the environment: Open MPI's, else 0 (PMIx/PMI name a rank, not a size). */
static int launcher_size(void) {
  const char *s = getenv("OMPI_COMM_WORLD_SIZE");
  if (s) return atoi(s);
  return getenv("PMIX_RANK") || getenv("PMI_RANK") ? -1 : 0;
}

#ifdef CLFORMER_HAVE_MPI

static cf_status mpi_fail(int rc, const char *call, const char *file, int line) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
  return cf_report(CF_ERR_MPI, call, file, line, "%s (rank %d of %d on %s)", text, world.rank, world.size, world.host);
}
#define CF_MPI(call)                                                     \
  do {                                                                   \
    int cf_mpi_rc_ = (call);                                             \
    if (cf_mpi_rc_ != MPI_SUCCESS) return mpi_fail(cf_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

/* Rank and size among the ranks that share this host's memory. */
static cf_status local_ranks(void) {
  MPI_Comm local;
  CF_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  int rc = MPI_Comm_rank(local, &world.local_rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(local, &world.local_size);
  MPI_Comm_free(&local);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Comm_rank/MPI_Comm_size(local)", __FILE__, __LINE__);
  return CF_OK;
}

cf_status cf_dist_init(int *argc, char ***argv) {
  if (gethostname(world.host, sizeof world.host) != 0) snprintf(world.host, sizeof world.host, "localhost");
  world.host[sizeof world.host - 1] = 0;
  if (!launcher_size()) return CF_OK;  /* not under mpirun: the world of one, MPI never started */
  int rc = MPI_Init(argc, argv);
  if (rc != MPI_SUCCESS) return cf_report(CF_ERR_MPI, "MPI_Init", __FILE__, __LINE__, "MPI error %d", rc);
  world.mpi = 1;
  /* errors come back to us, to be reported with their call, not abort the job from inside MPI */
  CF_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CF_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world.rank));
  CF_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world.size));
  return local_ranks();
}

void cf_dist_finalize(int failed, int exit_code) {
  if (!world.mpi) return;
  if (failed && !agreed_failure && world.size > 1) {
    /* one line with all a reader of the job's merged output needs: who, where and why */
    const char *why = failure_reason[0] ? failure_reason : cf_last_error();
    fprintf(stderr, "clformer: rank %d of %d on %s failed (exit %d%s%s): stopping the whole job (MPI_Abort)\n",
            world.rank, world.size, world.host, exit_code, why[0] ? ": " : "", why);
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, exit_code ? exit_code : 1);
  }
  MPI_Finalize();
  world.mpi = 0;
}

static double waited;  /* seconds inside collectives, for *wait_s */
#define TIMED(call) (waited -= cf_now(), cf_mpi_t_ = (call), waited += cf_now(), cf_mpi_t_)

cf_status cf_dist_agree(cf_status st) {
  if (world.size == 1) return st;
  int *all = malloc((size_t)world.size * sizeof *all);
  if (!all) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  int mine = st, rc = MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) { free(all); return mpi_fail(rc, "MPI_Allgather(status)", __FILE__, __LINE__); }
  int bad = -1;
  for (int r = 0; r < world.size && bad < 0; r++)
    if (all[r] != CF_OK) bad = r;
  cf_status other = bad >= 0 ? all[bad] : CF_OK;
  free(all);
  if (bad < 0) return CF_OK;
  agreed_failure = st != CF_OK ? 1 : 2;
  if (st != CF_OK) return st;
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* rank `bad` said why; the others only follow it out */
  cf_report(CF_ERR_MPI, NULL, __FILE__, __LINE__, "rank %d failed (%s): stopping with it", bad, cf_status_str(other));
  cf_set_verbosity(v);
  return other;
}

/* Counts and offsets of the size slices of an m-float bucket. */
static void slices(size_t m, int *cnt, int *off) {
  size_t base = m / (size_t)world.size, extra = m % (size_t)world.size, at = 0;
  for (int r = 0; r < world.size; r++) {
    cnt[r] = (int)(base + ((size_t)r < extra));
    off[r] = (int)at;
    at += (size_t)cnt[r];
  }
}

/* A non-blocking collective waited for idle: tested, then a 100 us sleep between tests, rather than
 * MPI's own wait, which spins: a rank that waits for another still in its backward would take a core
 * from its own device (PoCL's threads) and from the other rank's on a machine with few cores. */
static int wait_idle(MPI_Request *req) {
  int done = 0, rc = MPI_SUCCESS;
  while (rc == MPI_SUCCESS && !(rc = MPI_Test(req, &done, MPI_STATUS_IGNORE)) && !done)
    nanosleep(&(struct timespec){0, 100000}, NULL);
  return rc;
}

/* One bucket: slice r of every rank to rank r (recv holds them in rank order), summed in rank
 * order, the sums shared back into buf. */
static cf_status reduce_bucket(float *buf, size_t m, float *recv, int *cnt, int *off, int *rcnt, int *roff) {
  int me = world.rank, c, cf_mpi_t_;
  slices(m, cnt, off);
  c = cnt[me];
  for (int r = 0; r < world.size; r++) { rcnt[r] = c; roff[r] = r * c; }
  MPI_Request req;
  CF_MPI(MPI_Ialltoallv(buf, cnt, off, MPI_FLOAT, recv, rcnt, roff, MPI_FLOAT, MPI_COMM_WORLD, &req));
  CF_MPI(TIMED(wait_idle(&req)));
  float *mine = buf + off[me];
  for (int k = 0; k < c; k++) {
    float s = recv[k];
    for (int r = 1; r < world.size; r++) s += recv[(size_t)r * c + k];
    mine[k] = s;
  }
  CF_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, cnt, off, MPI_FLOAT, MPI_COMM_WORLD, &req));
  CF_MPI(TIMED(wait_idle(&req)));
  return CF_OK;
}

cf_status cf_dist_allreduce_sum(float *buf, size_t n, size_t bucket, double *wait_s) {
  if (world.size == 1 || n == 0) return CF_OK;
  if (bucket == 0 || bucket > (1u << 26)) bucket = 1u << 26;  /* counts are ints */
  size_t first = bucket < n ? bucket : n;
  float *recv = malloc((first / (size_t)world.size + 1) * (size_t)world.size * sizeof *recv);
  int *ints = malloc(4 * (size_t)world.size * sizeof *ints);
  cf_status st = !recv || !ints ? CF_FAIL(CF_ERR_NO_MEMORY, "out of memory") : CF_OK;
  int W = world.size;
  waited = 0;
  for (size_t at = 0; st == CF_OK && at < n; at += bucket)
    st = reduce_bucket(buf + at, n - at < bucket ? n - at : bucket, recv, ints, ints + W, ints + 2 * W, ints + 3 * W);
  if (wait_s) *wait_s += waited;
  free(recv);
  free(ints);
  return st;
}

cf_status cf_dist_bcast(void *buf, size_t bytes, int root) {
  if (world.size == 1) return CF_OK;
  for (size_t at = 0; at < bytes; at += 1u << 30) {  /* counts are ints: 1 GiB at a time */
    size_t k = bytes - at < (1u << 30) ? bytes - at : 1u << 30;
    CF_MPI(MPI_Bcast((char *)buf + at, (int)k, MPI_BYTE, root, MPI_COMM_WORLD));
  }
  return CF_OK;
}

cf_status cf_dist_any(int *flag) {
  if (world.size == 1) return CF_OK;
  int mine = *flag != 0, cf_mpi_t_;
  CF_MPI(TIMED(MPI_Allreduce(&mine, flag, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD)));
  return CF_OK;
}

cf_status cf_dist_gather_text(const char *mine, char *all, size_t len) {
  char *own = calloc(1, len);
  if (!own) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  snprintf(own, len, "%s", mine);
  int rc = world.size == 1 ? (memcpy(all, own, len), MPI_SUCCESS)
                           : MPI_Allgather(own, (int)len, MPI_CHAR, all, (int)len, MPI_CHAR, MPI_COMM_WORLD);
  free(own);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Allgather(text)", __FILE__, __LINE__);
  return CF_OK;
}

cf_status cf_dist_gather_double(double mine, double *all) {
  if (world.size == 1) { all[0] = mine; return CF_OK; }
  CF_MPI(MPI_Allgather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD));
  return CF_OK;
}

cf_status cf_dist_barrier(void) {
  if (world.size == 1) return CF_OK;
  CF_MPI(MPI_Barrier(MPI_COMM_WORLD));
  return CF_OK;
}

cf_status cf_dist_barrier_idle(void) {
  if (world.size == 1) return CF_OK;
  MPI_Request req;
  int done = 0;
  CF_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  while (!done) {
    CF_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (!done) nanosleep(&(struct timespec){0, 1000000}, NULL);  /* 1 ms: no core taken from a rank at work */
  }
  return CF_OK;
}

#else /* no MPI: the world of one */

cf_status cf_dist_init(int *argc, char ***argv) {
  if (gethostname(world.host, sizeof world.host) != 0) snprintf(world.host, sizeof world.host, "localhost");
  world.host[sizeof world.host - 1] = 0;
  int n = launcher_size();
  if (n > 1)
    return CF_FAIL(CF_ERR_CONFIG, "started by an MPI launcher, but this clformer was built without MPI "
                   "(CLFORMER_MPI=OFF): each process would train alone; rebuild with libopenmpi-dev installed");
  return CF_OK;
}
void cf_dist_finalize(int failed, int exit_code) {}
cf_status cf_dist_agree(cf_status st) { return st; }
cf_status cf_dist_allreduce_sum(float *buf, size_t n, size_t bucket, double *wait_s) { return CF_OK; }
cf_status cf_dist_bcast(void *buf, size_t bytes, int root) { return CF_OK; }
cf_status cf_dist_any(int *flag) { return CF_OK; }
cf_status cf_dist_gather_text(const char *mine, char *all, size_t len) {
  snprintf(all, len, "%s", mine);
  return CF_OK;
}
cf_status cf_dist_gather_double(double mine, double *all) {
  all[0] = mine;
  return CF_OK;
}
cf_status cf_dist_barrier(void) { return CF_OK; }
cf_status cf_dist_barrier_idle(void) { return CF_OK; }

#endif
