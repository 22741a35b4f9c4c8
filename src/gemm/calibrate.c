/* Which implementation an automatic GEMM takes, from measurements on the device (calibrate.h).
 *
 * The device's type says nothing useful here: Mesa's llvmpipe is a CPU device like PoCL's, yet our
 * kernels, written for PoCL, ran a tiny model's step 20x slower there than CLBlast (a launch alone
 * costs 0.4-0.6 ms on rusticl, 0.006 ms on PoCL). So products are grouped in classes (form NN, NT or
 * TN, TT counted as TN; single or batched; small, medium or large work M*N*K*batch), and the first
 * product of a class on a device times both implementations on a fixed representative shape of the
 * class (interleaved samples, medians). Ours is kept unless it is more than CALIB_MARGIN slower:
 * CLBlast compiles its kernels again in every process, ours come from the binary cache.
 *
 * Verdicts live in the context and in one small file per device, driver, kernel source and tuning
 * file in the kernel cache directory (gemm-calib-<16 hex>.txt, pruned with the binaries). A file
 * that does not parse is ignored whole and rewritten with what is measured anew. Measuring and
 * writing hold an flock on the cache directory, so processes that start together measure once. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include "gemm/calibrate.h"
#include "runtime/runtime.h"

#define CALIB_MARGIN 1.10        /* CLBlast is taken when ours is slower than this factor */
#define CALIB_CLEAR 4.0          /* a first sample this lopsided decides at once */
#define CALIB_SAMPLE_S 0.002     /* calls per sample: about this long for the faster one */
#define CALIB_ROUNDS 5
#define CALIB_HEADER "clformer-gemm-calibration 1"

enum { FORMS = 3, KINDS = 2, SIZES = 3, CLASSES = FORMS * KINDS * SIZES };
static const char *const form_name[FORMS] = {"NN", "NT", "TN"};
static const char *const kind_name[KINDS] = {"single", "batched"};
static const char *const size_name[SIZES] = {"small", "medium", "large"};
/* A class's representative: square matrices of this side (single), or batches of 8 of this side. */
static const size_t single_side[SIZES] = {32, 128, 384}, batched_side[SIZES] = {16, 64, 192};
#define BATCHED_COUNT 8

typedef struct calib_entry {
  int known;
  cf_gemm_impl impl;
  double own_ms, clblast_ms;  /* per call; INFINITY: that one failed or refused */
} calib_entry;

typedef struct calib_state {
  calib_entry e[CLASSES];
  int file_read;  /* the verdict file was consulted (once per context) */
  int noted;      /* the progress note went out */
  cf_gemm_calib_stats stats;
} calib_state;
static const char calib_key;  /* its address names the context's slot */

/* ---------- classes ---------- */

static int form_of(int ta, int tb) { return ta ? 2 : tb ? 1 : 0; }

static int size_of(double work) { return work < 262144.0 ? 0 : work < 16777216.0 ? 1 : 2; } /* 2^18, 2^24 */

static int class_of(int ta, int tb, size_t M, size_t N, size_t K, size_t batch) {
  double work = (double)M * (double)N * (double)K * (double)batch;
  return (form_of(ta, tb) * KINDS + (batch > 1)) * SIZES + size_of(work);
}

static void class_name(int c, char *buf, size_t n) {
  snprintf(buf, n, "%s %s %s", form_name[c / (KINDS * SIZES)], kind_name[c / SIZES % KINDS], size_name[c % SIZES]);
}

/* ---------- the verdict file ---------- */

int cf_gemm_calib_path(cf_context *ctx, char *buf, size_t n) {
  const char *dir = cf_cache_dir();
  if (!dir) return 0;
  const cf_device_info *d = &ctx->info;
  const char *parts[] = {d->name, d->platform_name, d->platform_version, d->driver_version, d->device_version,
                         CLFORMER_VERSION, cf_program_defines(ctx)};
  unsigned long long h = CF_HASH_SEED;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) h = cf_hash64(h, parts[i], strlen(parts[i]) + 1);
  char *src = NULL;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  if (cf_program_source("gemm", &src) == CF_OK) h = cf_hash64(h, src, strlen(src));
  cf_set_verbosity(v);
  cf_clear_error();
  free(src);
  unsigned long long tuned = cf_gemm_tune_fingerprint(ctx);
  h = cf_hash64(h, &tuned, sizeof tuned);
  snprintf(buf, n, "%s/gemm-calib-%016llx.txt", dir, h);
  return 1;
}

static int word_index(const char *w, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(w, names[i])) return i;
  return -1;
}

/* One "FORM KIND SIZE IMPL OWN_MS CLBLAST_MS" line into out[class]; 0 when malformed. */
static int parse_line(const char *line, calib_entry *out) {
  char f[8], k[16], s[16], impl[16], rest[2];
  double own, clb;
  if (sscanf(line, "%7s %15s %15s %15s %lf %lf %1s", f, k, s, impl, &own, &clb, rest) != 6) return 0;
  int fi = word_index(f, form_name, FORMS), ki = word_index(k, kind_name, KINDS), si = word_index(s, size_name, SIZES);
  int own_won = !strcmp(impl, "own");
  if (fi < 0 || ki < 0 || si < 0 || (!own_won && strcmp(impl, "clblast")) || !(own > 0) || !(clb > 0)) return 0;
  calib_entry *e = &out[(fi * KINDS + ki) * SIZES + si];
  *e = (calib_entry){1, own_won ? CF_GEMM_OWN : CF_GEMM_CLBLAST, own, clb};
  return 1;
}

/* The file's verdicts into out (cleared first): 1 when read whole, 0 when missing, -1 when it does
 * not parse (out then left empty: the file is rebuilt). */
static int file_load(const char *path, calib_entry out[CLASSES]) {
  memset(out, 0, CLASSES * sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[256];
  int ok = fgets(line, sizeof line, f) && !strncmp(line, CALIB_HEADER "\n", sizeof CALIB_HEADER);
  while (ok && fgets(line, sizeof line, f))
    ok = line[0] == '#' || parse_line(line, out);
  fclose(f);
  if (!ok) memset(out, 0, CLASSES * sizeof *out);
  return ok ? 1 : -1;
}

/* Every known verdict of e into path, atomically; failures only noted (the next run measures again). */
static void file_store(cf_context *ctx, const char *dir, const char *path, const calib_entry e[CLASSES]) {
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof text, CALIB_HEADER "\n# %s | %s | %s | driver %s\n# class, faster, ms "
                              "per call of ours and CLBlast's on the class's representative shape\n",
                              ctx->info.name, ctx->info.platform_name, ctx->info.platform_version,
                              ctx->info.driver_version);
  for (int c = 0; c < CLASSES && n < sizeof text; c++) {
    if (!e[c].known) continue;
    char name[48];
    class_name(c, name, sizeof name);
    n += (size_t)snprintf(text + n, sizeof text - n, "%s %s %.6g %.6g\n", name,
                          e[c].impl == CF_GEMM_OWN ? "own" : "clblast", isfinite(e[c].own_ms) ? e[c].own_ms : 1e30,
                          isfinite(e[c].clblast_ms) ? e[c].clblast_ms : 1e30);
  }
  if (n >= sizeof text) return;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = cf_mkdirs_private(dir);
  if (st == CF_OK) st = cf_write_file_atomic(path, text, n);
  cf_set_verbosity(v);
  if (st == CF_OK) cf_cache_prune_default(dir);
  else cf_log(1, "note: the GEMM calibration is not cached: %s", cf_last_error());
  cf_clear_error();
}

/* An exclusive lock on the cache directory while a class is measured and stored (-1: none, which
 * costs at most a second measurement elsewhere). */
static int dir_lock(const char *dir) {
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_mkdirs_private(dir);
  cf_set_verbosity(v);
  cf_clear_error();
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static void dir_unlock(int fd) {
  if (fd < 0) return;
  flock(fd, LOCK_UN);
  close(fd);
}

/* ---------- measuring ---------- */

/* The representative product of class c. */
static void class_shape(int c, int *ta, int *tb, size_t *side, size_t *batch) {
  int form = c / (KINDS * SIZES), batched = c / SIZES % KINDS, size = c % SIZES;
  *ta = form == 2;
  *tb = form == 1;
  *side = batched ? batched_side[size] : single_side[size];
  *batch = batched ? BATCHED_COUNT : 1;
}

/* Seconds per call of `calls` products through impl (CF_ERR_* as the implementation reports it). */
static cf_status time_calls(cf_context *ctx, cf_gemm_impl impl, int c, cl_mem A, cl_mem B, cl_mem C, int calls,
                            double *sec) {
  int ta, tb;
  size_t s, batch;
  class_shape(c, &ta, &tb, &s, &batch);
  CF_TRY(cf_context_finish(ctx));
  double t0 = cf_now();
  for (int i = 0; i < calls; i++)
    CF_TRY(cf_gemm_batched_with(ctx, impl, ta, tb, s, s, s, 1.0f, cf_at(A, 0), s, s * s, cf_at(B, 0), s, s * s, 0.0f,
                                cf_at(C, 0), s, s * s, batch));
  CF_TRY(cf_context_finish(ctx));
  *sec = (cf_now() - t0) / calls;
  return CF_OK;
}

/* A first call (building the kernels) and one timed call; INFINITY when the implementation fails
 * or refuses the product (noted: the other one is then taken). */
static double first_time(cf_context *ctx, cf_gemm_impl impl, int c, cl_mem A, cl_mem B, cl_mem C) {
  double sec = INFINITY;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  cf_status st = time_calls(ctx, impl, c, A, B, C, 1, &sec);
  if (st == CF_OK) st = time_calls(ctx, impl, c, A, B, C, 1, &sec);
  cf_set_verbosity(v);
  if (st != CF_OK) {
    char name[48];
    class_name(c, name, sizeof name);
    cf_log(2, "note: GEMM calibration: %s failed on a %s product (%s); the other is taken", cf_gemm_impl_name(impl),
           name, cf_last_error());
    cf_clear_error();
    sec = INFINITY;
  }
  return sec;
}

/* Interleaved samples of both (order alternating), medians into own and clb. */
static cf_status sample_both(cf_context *ctx, int c, cl_mem A, cl_mem B, cl_mem C, double *own, double *clb) {
  double fast = *own < *clb ? *own : *clb;
  int calls = fast >= CALIB_SAMPLE_S ? 1 : (int)ceil(CALIB_SAMPLE_S / (fast > 1e-6 ? fast : 1e-6));
  if (calls > 50) calls = 50;
  double v[2][CALIB_ROUNDS];
  for (int r = 0; r < CALIB_ROUNDS; r++)
    for (int j = 0; j < 2; j++) {
      int which = (j + r) % 2;
      CF_TRY(time_calls(ctx, which ? CF_GEMM_CLBLAST : CF_GEMM_OWN, c, A, B, C, calls, &v[which][r]));
    }
  *own = cf_median(v[0], CALIB_ROUNDS);
  *clb = cf_median(v[1], CALIB_ROUNDS);
  return CF_OK;
}

/* Both implementations on class c's representative product, the verdict into e. */
static cf_status measure_with(cf_context *ctx, int c, cl_mem A, cl_mem B, cl_mem C, calib_entry *e) {
  double own = first_time(ctx, CF_GEMM_OWN, c, A, B, C), clb = first_time(ctx, CF_GEMM_CLBLAST, c, A, B, C);
  if (isinf(own) && isinf(clb)) {
    char name[48];
    class_name(c, name, sizeof name);
    return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM calibration: neither our kernels nor CLBlast ran a %s product", name);
  }
  double hi = own > clb ? own : clb, lo = own > clb ? clb : own;
  if (hi < CALIB_CLEAR * lo) CF_TRY(sample_both(ctx, c, A, B, C, &own, &clb));
  *e = (calib_entry){1, own <= CALIB_MARGIN * clb ? CF_GEMM_OWN : CF_GEMM_CLBLAST, own * 1e3, clb * 1e3};
  return CF_OK;
}

/* Measure class c (buffers filled with small values; profiling events not recorded). */
static cf_status measure_class(cf_context *ctx, int c, calib_entry *e) {
  int ta, tb;
  size_t s, batch;
  class_shape(c, &ta, &tb, &s, &batch);
  size_t n = s * s * batch;
  cl_mem A = NULL, B = NULL, C = NULL;
  int prof = ctx->prof_on;
  ctx->prof_on = 0;
  cf_status st = cf_buffer_create(ctx, n * sizeof(float), &A);
  if (st == CF_OK) st = cf_buffer_create(ctx, n * sizeof(float), &B);
  if (st == CF_OK) st = cf_buffer_create(ctx, n * sizeof(float), &C);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(A, 0), 0.01f, n);
  if (st == CF_OK) st = cf_fill(ctx, cf_at(B, 0), 0.01f, n);
  if (st == CF_OK) st = measure_with(ctx, c, A, B, C, e);
  if (st == CF_OK) st = cf_context_finish(ctx);
  ctx->prof_on = prof;
  cf_buffer_free(A);
  cf_buffer_free(B);
  cf_buffer_free(C);
  return st;
}

/* ---------- the context's verdicts ---------- */

static cf_status state_of(cf_context *ctx, calib_state **out) {
  return cf_context_ext_zeroed(ctx, &calib_key, sizeof **out, (void **)out);
}

/* Verdicts the file holds that the context lacks; the file's state as file_load says. */
static int adopt_file(calib_state *s, const char *path) {
  calib_entry f[CLASSES];
  int r = file_load(path, f);
  for (int c = 0; c < CLASSES; c++)
    if (f[c].known && !s->e[c].known) {
      s->e[c] = f[c];
      s->stats.loaded++;
    }
  return r;
}

/* Class c measured (unless another process stored it while this one waited for the lock), and the
 * file rewritten with every verdict known. */
static cf_status measure_and_store(cf_context *ctx, calib_state *s, int c, const char *dir, const char *path) {
  int fd = dir ? dir_lock(dir) : -1;
  int file = dir ? adopt_file(s, path) : 0;
  cf_status st = CF_OK;
  if (!s->e[c].known) {
    if (!s->noted++)
      cf_log(1, "measuring our GEMM kernels against CLBlast on %s (once per device and driver)...", ctx->info.name);
    double t0 = cf_now();
    st = measure_class(ctx, c, &s->e[c]);
    s->stats.seconds += cf_now() - t0;
    if (st == CF_OK) s->stats.measured++;
    if (st == CF_OK && file < 0) s->stats.rebuilt++;
    if (st == CF_OK && dir) file_store(ctx, dir, path, s->e);
  }
  dir_unlock(fd);
  return st;
}

cf_status cf_gemm_calib_choose(cf_context *ctx, int ta, int tb, size_t M, size_t N, size_t K, size_t batch,
                               cf_gemm_impl *out) {
  calib_state *s;
  CF_TRY(state_of(ctx, &s));
  int c = class_of(ta, tb, M, N, K, batch);
  if (!s->e[c].known) {
    char path[4200];
    const char *dir = cf_gemm_calib_path(ctx, path, sizeof path) ? cf_cache_dir() : NULL;
    if (dir && !s->file_read++ && adopt_file(s, path) > 0) cf_cache_touch(path);
    if (!s->e[c].known) CF_TRY(measure_and_store(ctx, s, c, dir, path));
  }
  *out = s->e[c].impl;
  return CF_OK;
}

cf_gemm_calib_stats cf_gemm_calib_stats_of(const cf_context *ctx) {
  const calib_state *s = cf_context_ext(ctx, &calib_key);
  cf_gemm_calib_stats none = {0};
  return s ? s->stats : none;
}

int cf_gemm_calib_summary(const cf_context *ctx, char *buf, size_t n) {
  const calib_state *s = cf_context_ext(ctx, &calib_key);
  size_t len = 0;
  buf[0] = 0;
  for (int c = 0; s && c < CLASSES; c++) {
    if (!s->e[c].known || len >= n) continue;
    char name[48];
    class_name(c, name, sizeof name);
    len += (size_t)snprintf(buf + len, n - len, "%s%s %s (%.3g vs %.3g ms)", len ? ", " : "", name,
                            s->e[c].impl == CF_GEMM_OWN ? "own" : "clblast", s->e[c].own_ms, s->e[c].clblast_ms);
  }
  return buf[0] != 0;
}
