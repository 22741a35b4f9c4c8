/* Status names, error reporting and logging. Errors (and the verbosity) are kept per thread for
 * cf_last_error() and echoed to stderr; the library never exits. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/base.h"

const char *cf_status_str(cf_status s) {
  switch (s) {
#define N(code, name) case code: return name;
    N(0, "CL_SUCCESS")
    N(-1, "CL_DEVICE_NOT_FOUND") N(-2, "CL_DEVICE_NOT_AVAILABLE") N(-3, "CL_COMPILER_NOT_AVAILABLE")
    N(-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE") N(-5, "CL_OUT_OF_RESOURCES") N(-6, "CL_OUT_OF_HOST_MEMORY")
    N(-7, "CL_PROFILING_INFO_NOT_AVAILABLE") N(-8, "CL_MEM_COPY_OVERLAP") N(-9, "CL_IMAGE_FORMAT_MISMATCH")
    N(-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED") N(-11, "CL_BUILD_PROGRAM_FAILURE") N(-12, "CL_MAP_FAILURE")
    N(-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET") N(-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST")
    N(-15, "CL_COMPILE_PROGRAM_FAILURE") N(-16, "CL_LINKER_NOT_AVAILABLE") N(-17, "CL_LINK_PROGRAM_FAILURE")
    N(-18, "CL_DEVICE_PARTITION_FAILED") N(-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE")
    N(-30, "CL_INVALID_VALUE") N(-31, "CL_INVALID_DEVICE_TYPE") N(-32, "CL_INVALID_PLATFORM")
    N(-33, "CL_INVALID_DEVICE") N(-34, "CL_INVALID_CONTEXT") N(-35, "CL_INVALID_QUEUE_PROPERTIES")
    N(-36, "CL_INVALID_COMMAND_QUEUE") N(-37, "CL_INVALID_HOST_PTR") N(-38, "CL_INVALID_MEM_OBJECT")
    N(-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR") N(-40, "CL_INVALID_IMAGE_SIZE") N(-41, "CL_INVALID_SAMPLER")
    N(-42, "CL_INVALID_BINARY") N(-43, "CL_INVALID_BUILD_OPTIONS") N(-44, "CL_INVALID_PROGRAM")
    N(-45, "CL_INVALID_PROGRAM_EXECUTABLE") N(-46, "CL_INVALID_KERNEL_NAME") N(-47, "CL_INVALID_KERNEL_DEFINITION")
    N(-48, "CL_INVALID_KERNEL") N(-49, "CL_INVALID_ARG_INDEX") N(-50, "CL_INVALID_ARG_VALUE")
    N(-51, "CL_INVALID_ARG_SIZE") N(-52, "CL_INVALID_KERNEL_ARGS") N(-53, "CL_INVALID_WORK_DIMENSION")
    N(-54, "CL_INVALID_WORK_GROUP_SIZE") N(-55, "CL_INVALID_WORK_ITEM_SIZE") N(-56, "CL_INVALID_GLOBAL_OFFSET")
    N(-57, "CL_INVALID_EVENT_WAIT_LIST") N(-58, "CL_INVALID_EVENT") N(-59, "CL_INVALID_OPERATION")
    N(-60, "CL_INVALID_GL_OBJECT") N(-61, "CL_INVALID_BUFFER_SIZE") N(-62, "CL_INVALID_MIP_LEVEL")
    N(-63, "CL_INVALID_GLOBAL_WORK_SIZE") N(-64, "CL_INVALID_PROPERTY") N(-65, "CL_INVALID_IMAGE_DESCRIPTOR")
    N(-66, "CL_INVALID_COMPILER_OPTIONS") N(-67, "CL_INVALID_LINKER_OPTIONS") N(-68, "CL_INVALID_DEVICE_PARTITION_COUNT")
    N(-69, "CL_INVALID_PIPE_SIZE") N(-70, "CL_INVALID_DEVICE_QUEUE") N(-71, "CL_INVALID_SPEC_ID")
    N(-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED")
    N(-1001, "CL_PLATFORM_NOT_FOUND_KHR")
    /* CLBlast's own range */
    N(-1024, "CLBlastNotImplemented") N(-1022, "CLBlastInvalidMatrixA") N(-1021, "CLBlastInvalidMatrixB")
    N(-1020, "CLBlastInvalidMatrixC") N(-1019, "CLBlastInvalidVectorX") N(-1018, "CLBlastInvalidVectorY")
    N(-1017, "CLBlastInvalidDimension") N(-1016, "CLBlastInvalidLeadDimA") N(-1015, "CLBlastInvalidLeadDimB")
    N(-1014, "CLBlastInvalidLeadDimC") N(-1013, "CLBlastInvalidIncrementX") N(-1012, "CLBlastInvalidIncrementY")
    N(-1011, "CLBlastInsufficientMemoryA") N(-1010, "CLBlastInsufficientMemoryB")
    N(-1009, "CLBlastInsufficientMemoryC") N(-1008, "CLBlastInsufficientMemoryX")
    N(-1007, "CLBlastInsufficientMemoryY")
    N(-2050, "CLBlastInsufficientMemoryTemp") N(-2049, "CLBlastInvalidBatchCount")
    N(-2048, "CLBlastInvalidOverrideKernel") N(-2047, "CLBlastMissingOverrideParameter")
    N(-2046, "CLBlastInvalidLocalMemUsage") N(-2045, "CLBlastNoHalfPrecision") N(-2044, "CLBlastNoDoublePrecision")
    N(-2043, "CLBlastInvalidVectorScalar") N(-2042, "CLBlastInsufficientMemoryScalar")
    N(-2041, "CLBlastDatabaseError") N(-2040, "CLBlastUnknownError") N(-2039, "CLBlastUnexpectedError")
    /* clformer's own */
    N(CF_ERR_INVALID_ARG, "CF_ERR_INVALID_ARG") N(CF_ERR_NO_DEVICE, "CF_ERR_NO_DEVICE") N(CF_ERR_IO, "CF_ERR_IO")
    N(CF_ERR_NO_MEMORY, "CF_ERR_NO_MEMORY") N(CF_ERR_CONFIG, "CF_ERR_CONFIG") N(CF_ERR_NOT_FOUND, "CF_ERR_NOT_FOUND")
    N(CF_ERR_SHAPE, "CF_ERR_SHAPE") N(CF_ERR_NONFINITE, "CF_ERR_NONFINITE") N(CF_ERR_CHECKPOINT, "CF_ERR_CHECKPOINT")
    N(CF_ERR_SELFTEST, "CF_ERR_SELFTEST") N(CF_ERR_DATA, "CF_ERR_DATA")
    N(CF_ERR_MPI, "CF_ERR_MPI")
#undef N
    default: return "UNKNOWN_STATUS";
  }
}

static _Thread_local char last_error[65536];
static _Thread_local char detail[65536];

/* Verbosity is per thread: the library quiets an expected failure with "save, set -1, restore"
 * (a missing cache entry, an unwritable cache directory), and with one shared level two threads
 * doing so at once would silence each other's real errors, or leave the process silent for good
 * (A saves 1, B saves A's -1, A restores 1, B restores -1). A thread that never set a level takes
 * CLFORMER_VERBOSE's (default 1), read once for the process. */
#define VERBOSITY_UNSET (-100)
static _Thread_local int thread_verbosity = VERBOSITY_UNSET;
static atomic_int env_verbosity = VERBOSITY_UNSET;

int cf_verbosity(void) {
  if (thread_verbosity != VERBOSITY_UNSET) return thread_verbosity;
  int v = atomic_load_explicit(&env_verbosity, memory_order_relaxed);
  if (v == VERBOSITY_UNSET) {  /* two first readers at once read the same variable: either store wins */
    const char *e = getenv("CLFORMER_VERBOSE");
    v = e && *e ? atoi(e) : 1;
    atomic_store_explicit(&env_verbosity, v, memory_order_relaxed);
  }
  return v;
}
void cf_set_verbosity(int level) { thread_verbosity = level; }

const char *cf_last_error(void) { return last_error; }
void cf_clear_error(void) { last_error[0] = 0; }

/* The message into last_error, cut at its size (a long build log is cut there on purpose). */
static void set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

cf_status cf_report(cf_status status, const char *call, const char *file, int line,
                    const char *detail_fmt, ...) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  detail[0] = 0;
  if (detail_fmt) {
    va_list ap;
    va_start(ap, detail_fmt);
    vsnprintf(detail, sizeof detail, detail_fmt, ap);
    va_end(ap);
  }
  if (call)
    set_last_error("%s failed at %s:%d: %s (%d)%s%s", call, base, line, cf_status_str(status), status,
                   detail[0] ? "\n" : "", detail);
  else if (status == CF_ERR_CONFIG || status == CF_ERR_NO_DEVICE || status == CF_ERR_DATA || status == CF_ERR_IO ||
           status == CF_ERR_CHECKPOINT || status == -1001)
    set_last_error("%s", detail);  /* the user's input: the message is the whole story */
  else
    set_last_error("%s [%s at %s:%d]", detail, cf_status_str(status), base, line);
  if (cf_verbosity() >= 0) fprintf(stderr, "clformer: error: %s\n", last_error);
  return status;
}

void cf_log(int level, const char *fmt, ...) {
  if (level > cf_verbosity()) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("clformer: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

double cf_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

unsigned long long cf_hash64(unsigned long long h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
