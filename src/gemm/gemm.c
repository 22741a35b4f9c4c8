/* Row-major SGEMM, plain and strided-batched, on the context's queue: through CLBlast, or through
 * our own CPU kernels (cl/gemm.cl), chosen per $CLFORMER_GEMM, the tuning file, or else what was
 * measured on the device for the product's class (calibrate.c). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <clblast_c.h>
#include "clformer/gemm.h"
#include "gemm/calibrate.h"
#include "gemm/loop_budget.h"
#include "gemm/tuning_file.h"
#include "runtime/runtime.h"

/* ---------- choosing ---------- */

const char *cf_gemm_tri_name(cf_gemm_tri tri) {
  switch (tri) {
    case CF_GEMM_FULL: return "full";
    case CF_GEMM_A_LOWER: return "a_lower";
    case CF_GEMM_A_UPPER: return "a_upper";
    case CF_GEMM_C_LOWER: return "c_lower";
  }
  return "?";
}

const char *cf_gemm_impl_name(cf_gemm_impl impl) {
  switch (impl) {
    case CF_GEMM_AUTO: return "auto";
    case CF_GEMM_CLBLAST: return "clblast";
    case CF_GEMM_OWN: return "own";
  }
  return "?";
}

cf_status cf_gemm_resolve(const cf_context *ctx, cf_gemm_impl impl, cf_gemm_impl *out) {
  if (impl == CF_GEMM_AUTO) {
    const char *env = getenv("CLFORMER_GEMM");
    if (env && *env) {
      if (!strcmp(env, "clblast")) impl = CF_GEMM_CLBLAST;
      else if (!strcmp(env, "own")) impl = CF_GEMM_OWN;
      else if (strcmp(env, "auto"))
        return CF_FAIL(CF_ERR_CONFIG, "CLFORMER_GEMM=%s: expected clblast, own or auto", env);
    }
  }
  (void)ctx;  /* AUTO left: measured per product class (cf_gemm_calib_choose), never the device type */
  if (impl != CF_GEMM_AUTO && impl != CF_GEMM_CLBLAST && impl != CF_GEMM_OWN)
    return CF_FAIL(CF_ERR_INVALID_ARG, "unknown GEMM implementation %d", (int)impl);
  *out = impl;
  return CF_OK;
}

/* ---------- tuning results (clformer tune) ---------- */

/* `clformer tune` stores, per device and driver, a tuning file in the cache directory (its format:
 * tuning_file.c, which reads it here): CLBlast parameters, applied with CLBlastOverrideParameters,
 * and per shape the faster implementation. It is read on a context's first GEMM (unless
 * cf_gemm_tune_hold defers it); CLFORMER_TUNE=off ignores it.
 *
 * What a context read lives in the context (its extension slot, like the scratch below): a context
 * is used from one thread at a time, so it needs no lock, and two contexts never share a table. */
typedef struct tune_state {
  int loaded;            /* a tuning file was read (0 also while held back by cf_gemm_tune_hold) */
  char applied[512];     /* what CLBlast accepted, for cf_gemm_tune_summary */
  unsigned long long fingerprint;  /* the file's bytes hashed (cf_gemm_tune_fingerprint) */
  cf_tuning_file file;   /* what was read: its choices are looked up per GEMM */
} tune_state;
static const char tune_key;  /* its address names the slot */

static void tune_free(cf_context *ctx, void *state) {
  (void)ctx;
  cf_tuning_file_free(&((tune_state *)state)->file);
  free(state);
}

/* The one process-wide fact: CLBlast took tuned parameters for this cl_device_id. It mirrors state
 * CLBlast itself keeps per process (CLBlastOverrideParameters stores into its global database cache
 * keyed by the cl_device_id, for every context and thread, and there is no call that reads it back
 * or puts the defaults back), so it cannot live in a context: a second context on a device CLBlast
 * already tuned must not claim to hold the tuning back (cf_gemm_tune_hold). A short list under a
 * mutex: it is touched only when a context reads its file or asks to hold, never per GEMM. When the
 * list is full, every device counts as tuned: holding back is then refused, never wrongly granted. */
#define TUNED_DEVICES 64
static struct {
  pthread_mutex_t lock;
  int n, overflow;
  cl_device_id device[TUNED_DEVICES];
} clblast_tuned = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}};

static void clblast_tuned_mark(cl_device_id dev) {
  pthread_mutex_lock(&clblast_tuned.lock);
  int i = 0;
  while (i < clblast_tuned.n && clblast_tuned.device[i] != dev) i++;
  if (i == clblast_tuned.n) {
    if (i < TUNED_DEVICES) clblast_tuned.device[clblast_tuned.n++] = dev;
    else clblast_tuned.overflow = 1;
  }
  pthread_mutex_unlock(&clblast_tuned.lock);
}

static int clblast_tuned_has(cl_device_id dev) {
  pthread_mutex_lock(&clblast_tuned.lock);
  int found = clblast_tuned.overflow;
  for (int i = 0; i < clblast_tuned.n && !found; i++) found = clblast_tuned.device[i] == dev;
  pthread_mutex_unlock(&clblast_tuned.lock);
  return found;
}

int cf_gemm_tune_path(const cf_context *ctx, char *buf, size_t n) {
  const char *dir = cf_cache_dir();
  if (!dir) return 0;
  const char *parts[] = {ctx->info.name, ctx->info.platform_name, ctx->info.platform_version,
                         ctx->info.driver_version, ctx->info.device_version};
  unsigned long long h = CF_HASH_SEED;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) h = cf_hash64(h, parts[i], strlen(parts[i]) + 1);
  snprintf(buf, n, "%s/gemm-tune-%016llx.txt", dir, h);
  return 1;
}

/* Hand one `clblast` line to CLBlast, noting in s what it took. */
static void apply_clblast(tune_state *s, cl_device_id dev, const cf_tuning_clblast *l) {
  const char *names[CF_TUNING_MAX_PARAMS];
  size_t values[CF_TUNING_MAX_PARAMS], k = (size_t)l->nparams;
  for (size_t i = 0; i < k; i++) {
    names[i] = l->params[i].name;
    values[i] = l->params[i].value;
  }
  clblast_tuned_mark(dev);  /* before CLBlast takes them, so a hold on another thread never misses it */
  CLBlastStatusCode st = CLBlastOverrideParameters(dev, l->kernel, CLBlastPrecisionSingle, k, names, values);
  if (st != CLBlastSuccess) {
    cf_log(1, "note: tuned CLBlast parameters for %s not applied (CLBlast status %d)", l->kernel, (int)st);
    return;
  }
  cf_log(2, "note: tuned CLBlast parameters for %s applied (%zu values)", l->kernel, k);
  size_t len = strlen(s->applied);
  if (k == 1)  /* a single switch (GemmRoutine's XGEMM_MIN_INDIRECT_SIZE): its value says more than its kernel */
    snprintf(s->applied + len, sizeof s->applied - len, "%s%s=%zu", len ? ", " : "", names[0], values[0]);
  else snprintf(s->applied + len, sizeof s->applied - len, "%s%s", len ? ", " : "", l->kernel);
}

/* The tuning file of this context's device when it should be read (CLFORMER_TUNE not off) and exists. */
static int tune_file(const cf_context *ctx, char *path, size_t n) {
  const char *off = getenv("CLFORMER_TUNE");
  if ((off && (!strcmp(off, "off") || !strcmp(off, "0"))) || !cf_gemm_tune_path(ctx, path, n)) return 0;
  FILE *f = fopen(path, "r");
  if (f) fclose(f);
  return f != NULL;
}

/* This context's tuning state, created empty (unread) when it has none; NULL when out of memory or
 * extension slots. */
static tune_state *tune_state_of(cf_context *ctx, int *created) {
  tune_state *s = cf_context_ext(ctx, &tune_key);
  *created = 0;
  if (s) return s;
  if (!(s = calloc(1, sizeof *s))) return NULL;
  if (cf_context_ext_set(ctx, &tune_key, s, tune_free) != CF_OK) {
    free(s);
    return NULL;
  }
  *created = 1;
  return s;
}

/* Read this context's file into s (cleared first), handing its `clblast` lines to CLBlast. */
static void tune_read(cf_context *ctx, tune_state *s) {
  cf_tuning_file_free(&s->file);
  s->loaded = 0;
  s->applied[0] = 0;
  s->fingerprint = 0;
  char path[4200];
  if (!tune_file(ctx, path, sizeof path) || !cf_tuning_file_read(path, &s->file, 1)) return;
  s->loaded = 1;
  char *text = NULL;
  size_t len = 0;
  int v = cf_verbosity();
  cf_set_verbosity(-1);
  if (cf_read_file(path, &text, &len) == CF_OK) s->fingerprint = cf_hash64(CF_HASH_SEED, text, len);
  cf_set_verbosity(v);
  cf_clear_error();
  free(text);
  for (int i = 0; i < s->file.nclblast; i++) apply_clblast(s, ctx->info.device, &s->file.clblast[i]);
  cf_log(2, "note: GEMM tuning from %s: %d shape choices", path, s->file.nchoices);
}

/* This context's state, reading its file on first use (or again with reload). NULL only when the
 * state cannot be stored: GEMMs then run untuned, as with no file. */
static tune_state *tune_get(cf_context *ctx, int reload) {
  int created;
  tune_state *s = tune_state_of(ctx, &created);
  if (s && (created || reload)) tune_read(ctx, s);
  return s;
}

/* Whether the file at path has a `clblast` line (parameters CLBlast may take); its malformed lines
 * are left for the read that applies it to report. */
static int has_clblast_lines(const char *path) {
  cf_tuning_file tf = {0};
  int found = cf_tuning_file_read(path, &tf, 0) && tf.nclblast > 0;
  cf_tuning_file_free(&tf);
  return found;
}

int cf_gemm_tune_hold(cf_context *ctx) {
  char path[4200];
  /* not when this context read (or held) its file already, nor when CLBlast was tuned for the
   * device before, by this context or another (another context on the device that reads the file
   * later tunes CLBlast for this one too: CLBlast's parameters are per device, not per context) */
  if (cf_context_ext(ctx, &tune_key) || clblast_tuned_has(ctx->info.device)) return 0;
  if (!tune_file(ctx, path, sizeof path) || !has_clblast_lines(path)) return 0;
  int created;
  tune_state *s = tune_state_of(ctx, &created);  /* created unread: tune_get leaves it so until reload */
  if (s && clblast_tuned_has(ctx->info.device)) {  /* another thread tuned CLBlast meanwhile: read as usual */
    tune_read(ctx, s);
    return 0;
  }
  return s != NULL;
}

void cf_gemm_tune_reload(cf_context *ctx) {
  tune_get(ctx, 1);
  /* CLBlast keys its compiled programs by their parameters, but drop the ones built before the
   * new parameters anyway: a program it kept would run untuned without a word */
  CLBlastStatusCode st = CLBlastClearCache();
  if (st != CLBlastSuccess) cf_log(1, "note: CLBlastClearCache failed (CLBlast status %d)", (int)st);
}

int cf_gemm_tune_summary(cf_context *ctx, char *buf, size_t n) {
  tune_state *s = tune_get(ctx, 0);
  int r = s && s->loaded && s->applied[0];
  snprintf(buf, n, "%s", r ? s->applied : "");
  return r;
}

/* The measured choice for this shape, or CF_GEMM_AUTO when there is none. */
static cf_gemm_impl tune_choose(cf_context *ctx, int ta, int tb, size_t M, size_t N, size_t K, size_t batch) {
  tune_state *s = tune_get(ctx, 0);
  for (int i = 0; s && i < s->file.nchoices; i++) {
    const cf_tuning_choice *c = &s->file.choices[i];
    if (c->ta == ta && c->tb == tb && c->M == M && c->N == N && c->K == K && c->batch == batch) return c->impl;
  }
  return CF_GEMM_AUTO;
}

static void tune_ensure(cf_context *ctx) { tune_get(ctx, 0); }

unsigned long long cf_gemm_tune_fingerprint(cf_context *ctx) {
  tune_state *s = tune_get(ctx, 0);
  return s && s->loaded ? s->fingerprint : 0;
}

/* ---------- CLBlast ---------- */

/* The outer level of a nested batch (cf_gemm_batched_nested): `count` groups of the inner batch,
 * group o's matrices starting o * a, o * b, o * c elements after group 0's; and the triangle
 * (cf_gemm_tri) the strip kernels skip in every product of the batch. */
typedef struct gemm_outer {
  size_t count, a, b, c;
  cf_gemm_tri tri;
} gemm_outer;
static const gemm_outer one_group = {1, 0, 0, 0, CF_GEMM_FULL};


static cf_status scratch_get(cf_context *ctx, size_t bytes, cl_mem *out);

static CLBlastTranspose tr(int t) { return t ? CLBlastTransposeYes : CLBlastTransposeNo; }

/* Row-major C = op(A) op(B) is passed to CLBlast as the column-major product C^T = op(B)^T op(A)^T
 * (the same memory, operands swapped). CLBlast's indirect kernel wants C column-major: given a
 * row-major C it transposes C into a temporary before the product (when beta != 0) and back after,
 * two extra passes over C on every call, which this form avoids (measured: the TransposeMatrix pass
 * was 5-15% of a tuned call at the model's shapes on PoCL). Both forms give the same result. */
static cf_status clblast_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                              cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b, float beta,
                              cf_mem C, size_t ldc, size_t stride_c, size_t batch) {
  tune_ensure(ctx);  /* tuned parameters are in place before CLBlast compiles its kernels */
  if (batch == 1) {
    /* The indirect kernel's padded/transposed operands: in our per-queue scratch rather than a
     * buffer CLBlast creates and releases on every call. */
    size_t temp = 0;
    CF_CHECK(CLBlastSGemmTempBufferSize(CLBlastLayoutColMajor, tr(trans_b), tr(trans_a), N, M, K, B.off, ldb, A.off,
                                        lda, C.off, ldc, &ctx->queue, &temp));
    if (temp == 0)
      CF_CHECK(CLBlastSgemm(CLBlastLayoutColMajor, tr(trans_b), tr(trans_a), N, M, K, alpha, B.buf, B.off, ldb,
                            A.buf, A.off, lda, beta, C.buf, C.off, ldc, &ctx->queue,
                            cf_profile_slot(ctx, "clblast_sgemm")));
    else {
      cl_mem buf;
      CF_TRY(scratch_get(ctx, temp, &buf));
      CF_CHECK(CLBlastSgemmWithTempBuffer(CLBlastLayoutColMajor, tr(trans_b), tr(trans_a), N, M, K, alpha, B.buf, B.off,
                                          ldb, A.buf, A.off, lda, beta, C.buf, C.off, ldc, &ctx->queue,
                                          cf_profile_slot(ctx, "clblast_sgemm"), buf));
    }
  } else
    CF_CHECK(CLBlastSgemmStridedBatched(CLBlastLayoutColMajor, tr(trans_b), tr(trans_a), N, M, K, alpha,
                                        B.buf, B.off, ldb, stride_b, A.buf, A.off, lda, stride_a, beta,
                                        C.buf, C.off, ldc, stride_c, batch, &ctx->queue,
                                        cf_profile_slot(ctx, "clblast_sgemm_batched")));
  return CF_OK;
}

/* A nested batch on CLBlast: one call of its batched GEMM with every matrix's offset listed. */
static cf_status clblast_gemm_nested(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                                     float alpha, cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb,
                                     size_t stride_b, float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch,
                                     const gemm_outer *o) {
  size_t n = batch * o->count;
  size_t *off = malloc(3 * n * sizeof *off);
  float *ab = malloc(2 * n * sizeof *ab);
  if (!off || !ab) {
    free(off);
    free(ab);
    return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory for a batch of %zu GEMM offsets", n);
  }
  for (size_t g = 0; g < o->count; g++)
    for (size_t i = 0; i < batch; i++) {
      size_t j = g * batch + i;
      off[j] = A.off + g * o->a + i * stride_a;
      off[n + j] = B.off + g * o->b + i * stride_b;
      off[2 * n + j] = C.off + g * o->c + i * stride_c;
      ab[j] = alpha;
      ab[n + j] = beta;
    }
  tune_ensure(ctx);
  cf_status st = CF_OK;
  CF_CHECK_GOTO(CLBlastSgemmBatched(CLBlastLayoutColMajor, tr(trans_b), tr(trans_a), N, M, K, ab, B.buf, off + n, ldb,
                                    A.buf, off, lda, ab + n, C.buf, off + 2 * n, ldc, n, &ctx->queue,
                                    cf_profile_slot(ctx, "clblast_sgemm_batched")),
                st, done);
done:
  free(off);
  free(ab);
  return st;
}

/* ---------- the packing scratch ---------- */

/* The scratch for packed panels of op(B) and op(A) (when A is transposed), and for CLBlast's padded
 * or transposed operands: one buffer per context, held in the context's extension slot. Kernels on
 * its in-order queue run one after another, so every product can share it. Allocating per call
 * instead costs a fresh mapping and its page faults on every product (about a millisecond for a
 * 4 MiB panel set on PoCL, as long as a whole forward GEMM of the default model). */
typedef struct gemm_scratch {
  cl_mem buf;
  size_t bytes;
} gemm_scratch;
static const char scratch_key;  /* its address names the slot */

static void scratch_release(cf_context *ctx, void *state) {
  gemm_scratch *s = state;
  CF_RELEASE(clReleaseMemObject, s->buf);
  s->buf = NULL;
  s->bytes = 0;
}

static void scratch_free(cf_context *ctx, void *state) {
  scratch_release(ctx, state);
  free(state);
}

void cf_gemm_scratch_free(cf_context *ctx) {
  gemm_scratch *s = ctx ? cf_context_ext(ctx, &scratch_key) : NULL;
  if (s) scratch_release(ctx, s);
}

/* A buffer of at least `bytes` for this context. */
static cf_status scratch_get(cf_context *ctx, size_t bytes, cl_mem *out) {
  gemm_scratch *s = cf_context_ext(ctx, &scratch_key);
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
    cf_status st = cf_context_ext_set(ctx, &scratch_key, s, scratch_free);
    if (st != CF_OK) {
      free(s);
      return st;
    }
  }
  if (s->bytes < bytes) {
    size_t grow = s->bytes + s->bytes / 2;  /* grow geometrically, in whole MiB */
    size_t want = cf_round_up(bytes > grow ? bytes : grow, (size_t)1 << 20);
    if (want > ctx->info.max_alloc) want = bytes;
    scratch_release(ctx, s);  /* queued users keep the old buffer alive until they finish */
    CF_TRY(cf_buffer_create(ctx, want, &s->buf));
    s->bytes = want;
  }
  *out = s->buf;
  return CF_OK;
}

/* ---------- our kernels ---------- */

#define OWN_MR 6  /* GEMM_MR, GEMM_NR in cl/gemm.cl */
#define OWN_NR 64
#define OWN_GROUP_BYTES (256u << 10)  /* A rows one tile group keeps in cache */
#define OWN_SLICE_MIN_K 768  /* where B is read in place, a longer K runs in slices (own_gemm) */
#define OWN_SLICE_K 512      /* of about this K */
#define EPI_BIAS 1u          /* GEMM_EPI_BIAS, GEMM_EPI_ACT in cl/gemm.cl */
#define EPI_ACT 2u

/* What a product adds to its stores: a forward one's bias, activation and dropout
 * (cf_gemm_nt_bias_act, gemm_an_strips), a weight gradient's bias gradient (cf_gemm_tn_dbias,
 * gemm_at_strips). A buffer not set is not applied. */
typedef struct gemm_epi {
  cf_mem bias, act_out;
  cf_activation act;
  cf_dropout drop;  /* after the activation */
  cf_mem dbias;
} gemm_epi;

static int fits32(size_t v) { return v <= UINT32_MAX; }

/* Row tiles whose rows of A (K floats each) fill OWN_GROUP_BYTES: gemm_at's tile group, a strip's part. */
static size_t group_tiles(size_t K) {
  size_t g = OWN_GROUP_BYTES / (OWN_MR * sizeof(float) * (K ? K : 1));
  return g ? g : 1;
}

/* Whether our kernels can index this product (32-bit sizes, strides, offsets, packed panels). */
static int own_fits(int trans_a, int trans_b, size_t M, size_t N, size_t K, cf_mem A, size_t lda, size_t stride_a,
                    cf_mem B, size_t ldb, size_t stride_b, cf_mem C, size_t ldc, size_t stride_c, size_t batch) {
  if (!(fits32(M) && fits32(N) && fits32(K) && fits32(lda) && fits32(ldb) && fits32(ldc) && fits32(stride_a) &&
        fits32(stride_b) && fits32(stride_c) && fits32(batch) && fits32(A.off) && fits32(B.off) && fits32(C.off)))
    return 0;
  size_t panels = (N + OWN_NR - 1) / OWN_NR, tiles = (M + OWN_MR - 1) / OWN_MR, k = K ? K : 1;
  if (tiles > UINT32_MAX / panels) return 0;
  /* gemm_at's packed panels: per matrix, and the whole scratch (B's, then A's) indexed from its start
   * (the strip kernels index their per-item copies in size_t) */
  double per_b = (trans_b || N % OWN_NR) ? (double)panels * OWN_NR * k : 0;
  double per_a = trans_a ? (double)tiles * OWN_MR * k : 0;
  return per_b <= UINT32_MAX && per_a <= UINT32_MAX && (per_a + per_b) * batch <= UINT32_MAX;
}

/* Loop trips of one work-item of our kernels, an upper bound counted from cl/gemm.cl's loops as
 * written (the compiler may unroll some; none is assumed): a device that stops an item's loops
 * after a budget of trips (loop_budget.h) gets work split so that no item passes it. llvmpipe runs
 * 8 items (work-groups of one item too) as the lanes of one invocation that shares the budget: a
 * loop runs as long as its longest lane, and where lanes take different branches both branches run,
 * one after the other. So each bound counts every branch: a block of gemm_pack_block both as a
 * whole panel (81 trips) and a partial one (305 trips; a last, partial block of B^T: 1040). */
#define TRIPS_STORE (OWN_MR * OWN_NR)  /* a tile's stores into a partial column panel */
#define TRIPS_PACK_BLOCK (1 + 81 + 305)
#define TRIPS_PACK_LAST (1040 + 305 + 81)

/* gemm_an_strips's epilogue, a tile: the bias row (64 + 4), and each row's activation (a partial panel: 64 + 4 + 64) */
#define TRIPS_EPILOGUE (OWN_NR + 4 + OWN_MR * (1 + 2 * OWN_NR + 4))

/* A strip item (gemm_an_strips, gemm_at_strips) of `tiles` row tiles, with its own pack of op(B),
 * and the bias and activation epilogue when `epi`. */
static double trips_strip(size_t tiles, size_t K, size_t kc, int packed_b, int epi) {
  double slices = K ? (double)((K + kc - 1) / kc) : 0, blocks = (double)((K + 15) / 16);
  double pack = packed_b ? blocks * (1 + TRIPS_PACK_BLOCK) + TRIPS_PACK_LAST : 0;
  return pack + slices + (double)tiles * ((double)K + slices * (1 + TRIPS_STORE) + (epi ? TRIPS_EPILOGUE : 0));
}

/* A gemm_at_rows item: per row tiles packed, then `panels` column panels. */
static double trips_rows(size_t per, size_t panels, size_t K, size_t kc) {
  double slices = K ? (double)((K + kc - 1) / kc) : 0;
  double pack = (double)per * (7.0 * (double)K + 2) + (double)K;  /* 8 tiles at once, or 1 (7 K if partial) */
  return pack + (double)panels * (1 + slices * (1 + (double)per * (1 + TRIPS_STORE)) + (double)per * (double)K);
}

/* gemm_at's one tile, and the packing kernels' items before it. */
static double trips_at(size_t K) { return (double)K + 1 + TRIPS_STORE + 4096; }

/* The slice of K the strip kernels take where B is read in place (own_gemm). */
static size_t own_kc(size_t K) {
  size_t slices = K > OWN_SLICE_MIN_K ? (K + OWN_SLICE_K - 1) / OWN_SLICE_K : 1;
  return (K + slices - 1) / slices;
}

/* Whether, split as finely as it can be (one row tile, one panel an item), the kernel own_gemm
 * picks for this product keeps every item within `budget` trips (0: no limit). */
static int own_loops_fit(size_t budget, int trans_a, int trans_b, size_t M, size_t N, size_t K, size_t lda, int epi) {
  if (!budget || K == 0) return 1;
  int packed_b = trans_b || N % OWN_NR;
  size_t kc = own_kc(K);
  if (!trans_a) return trips_strip(1, K, packed_b ? K : kc, packed_b, epi) <= (double)budget;
  if (!packed_b)
    return (M >= OWN_MR && lda % 1024 != 0 ? trips_strip(1, K, kc, 0, 0) : trips_rows(1, 1, K, kc)) <= (double)budget;
  return trips_at(K) <= (double)budget;
}

/* The refusal of a product no split brings under the device's loop budget. */
static cf_status over_budget(const cf_context *ctx, size_t budget, size_t M, size_t N, size_t K) {
  return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM M=%zu N=%zu K=%zu: an item of the own kernels would loop past the %zu "
                 "trips %s lets a work-item run (Mesa llvmpipe's loop limiter); use CLBlast", M, N, K, budget,
                 ctx->info.name);
}

/* Column strips (gemm_an_strips, gemm_at_strips): how many parts each of the `items` column panels
 * is split into. With B read in place, into parts of as many rows as one tile group for a slice of
 * kc (items side by side then share those rows of A in cache); with op(B) packed (each part packs
 * its own copy) only until there are at least two items per compute unit and, while there are
 * fewer than eight per unit, a multiple of their count, so the units finish together. Never more
 * parts than row tiles or 64, and one part when the packed copies would not fit in one buffer. */
static size_t strip_parts(const cf_context *ctx, size_t items, size_t tiles, size_t K, size_t kc, int packed_b) {
  size_t cus = ctx->info.compute_units ? ctx->info.compute_units : 1, parts = 1;
  if (!packed_b) parts = (tiles + group_tiles(kc) - 1) / group_tiles(kc);
  while (parts < tiles && parts < 64 &&
         (items * parts < 2 * cus || (items * parts < 8 * cus && (items * parts) % cus)))
    parts++;
  if (parts > 64) parts = 64;
  if (packed_b && items * parts * OWN_NR * K * sizeof(float) > ctx->info.max_alloc) parts = 1;
  return parts;
}

/* op(A) = A: gemm_an_strips, op(B) read in place or packed by each item, with the epilogue `epi`
 * (NULL: none). */
static cf_status own_gemm_an_strips(cf_context *ctx, int trans_b, size_t M, size_t N, size_t K, size_t kc,
                                    float alpha, cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb,
                                    size_t stride_b, float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch,
                                    const gemm_outer *o, size_t panels, size_t tiles, int packed_b, size_t budget,
                                    const gemm_epi *epi) {
  size_t items = panels * batch * o->count, parts = strip_parts(ctx, items, tiles, K, kc, packed_b);
  while (budget && parts < tiles &&
         trips_strip((tiles + parts - 1) / parts, K, kc, packed_b, epi != NULL) > (double)budget)
    parts++;
  cl_mem buf = NULL;
  if (packed_b) CF_TRY(scratch_get(ctx, items * parts * OWN_NR * K * sizeof(float), &buf));
  cf_launch L;
  cf_launch_begin(&L, ctx, "gemm", "gemm_an_strips");
  cf_arg_mem(&L, C);
  cf_arg_mem(&L, A);
  cf_arg_mem(&L, B);
  cf_arg_buf(&L, buf ? buf : C.buf);  /* S: unread when B is read in place */
  CF_ARG_UINTS(&L, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, o->a, o->b, o->c);
  cf_arg_int(&L, trans_b);
  cf_arg_uint(&L, (unsigned)parts);
  cf_arg_float(&L, alpha);
  cf_arg_float(&L, beta);
  cf_arg_uint(&L, (unsigned)kc);
  cf_arg_uint(&L, (unsigned)o->tri);
  unsigned flags = epi ? (epi->bias.buf ? EPI_BIAS : 0) | (epi->act_out.buf ? EPI_ACT : 0) : 0;
  cf_arg_uint(&L, flags);
  cf_arg_mem(&L, flags & EPI_BIAS ? epi->bias : C);       /* unread without the flag */
  cf_arg_mem(&L, flags & EPI_ACT ? epi->act_out : C);
  cf_arg_int(&L, epi ? (int)epi->act : 0);
  cf_arg_dropout(&L, epi ? epi->drop : (cf_dropout){0});
  /* the packed panel in local memory where it fits in half of it (cl/gemm.cl says why) */
  size_t panel_bytes = OWN_NR * K * sizeof(float);
  int use_local = packed_b && panel_bytes <= ctx->info.local_mem / 2;
  cf_arg_local(&L, use_local ? panel_bytes : sizeof(float));
  cf_arg_int(&L, use_local);
  size_t global[3] = {panels * parts, batch, o->count}, local[3] = {1, 1, 1};
  return cf_launch_run(&L, 3, global, local);
}

/* op(A) = A^T, B read in place: gemm_at_strips (A^T in place) or gemm_at_rows (each item packs its
 * rows of A^T into S: `per` row tiles, 8 letting gemm_pack_at8 pack them at once, for a group of
 * the column panels). While the items would not give every compute unit two, the columns are
 * split into more groups (up to one panel each), then the row parts made smaller. */
static cf_status own_gemm_at_in_place_b(cf_context *ctx, int a_inplace, size_t M, size_t N, size_t K, size_t kc,
                                        float alpha, cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb,
                                        size_t stride_b, float beta, cf_mem C, size_t ldc, size_t stride_c,
                                        size_t batch, const gemm_outer *o, size_t panels, size_t tiles,
                                        size_t budget, const gemm_epi *epi) {
  cf_launch L;
  size_t global[3] = {0, batch, o->count}, local[3] = {1, 1, 1};
  if (a_inplace) {
    size_t parts = strip_parts(ctx, panels * batch * o->count, tiles, K, kc, 0);
    while (budget && parts < tiles && trips_strip((tiles + parts - 1) / parts, K, kc, 0, 0) > (double)budget) parts++;
    cf_launch_begin(&L, ctx, "gemm", "gemm_at_strips");
    cf_arg_mem(&L, C);
    cf_arg_mem(&L, A);
    cf_arg_mem(&L, B);
    CF_ARG_UINTS(&L, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, o->a, o->b, o->c, parts);
    global[0] = panels * parts;
  } else {
    size_t cus = ctx->info.compute_units ? ctx->info.compute_units : 1, per = 8, groups = 1;
    while ((tiles + per - 1) / per * groups * batch < 2 * cus) {
      if (groups < panels) groups++;
      else if (per > 1) per--;
      else break;
    }
    while (budget && trips_rows(per, (panels + groups - 1) / groups, K, kc) > (double)budget) {
      if (groups < panels) groups++;
      else if (per > 1) per--;
      else break;
    }
    size_t parts = (tiles + per - 1) / per;
    cl_mem S;
    CF_TRY(scratch_get(ctx, batch * groups * parts * per * OWN_MR * K * sizeof(float), &S));
    cf_launch_begin(&L, ctx, "gemm", "gemm_at_rows");
    cf_arg_mem(&L, C);
    cf_arg_mem(&L, A);
    cf_arg_mem(&L, B);
    cf_arg_buf(&L, S);
    CF_ARG_UINTS(&L, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, per, groups);
    global[0] = parts * groups;
  }
  cf_arg_float(&L, alpha);
  cf_arg_float(&L, beta);
  cf_arg_uint(&L, (unsigned)kc);
  cf_arg_uint(&L, (unsigned)o->tri);
  if (a_inplace) {
    int with_dbias = epi && epi->dbias.buf;
    cf_arg_mem(&L, with_dbias ? epi->dbias : C);  /* unread without it */
    cf_arg_int(&L, with_dbias);
  }
  return cf_launch_run(&L, a_inplace ? 3 : 2, global, local);  /* gemm_at_rows: one group (own_gemm) */
}

/* gemm_at: op(A) = A^T with op(B) packed first by gemm_pack_b (pack_b) and A^T by gemm_pack_at
 * (pack_a), or K = 0 (C = beta C, A and B unread). */
static cf_status own_gemm_at(cf_context *ctx, int trans_b, size_t M, size_t N, size_t K, float alpha, cf_mem A,
                             size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b, float beta, cf_mem C,
                             size_t ldc, size_t stride_c, size_t batch, size_t panels, size_t tiles, int pack_b,
                             int pack_a) {
  size_t per_b = pack_b ? panels * OWN_NR * K : 0, per_a = pack_a ? tiles * OWN_MR * K : 0;
  cl_mem buf = NULL;
  if (pack_a || pack_b) CF_TRY(scratch_get(ctx, (per_a + per_b) * batch * sizeof(float), &buf));
  cf_mem Ap = A, Bp = B;
  size_t lda_k = lda, sap = stride_a, b_ld = ldb, b_panel = OWN_NR, sbp = stride_b;
  if (pack_b) {  /* op(B) as zero-padded K x 64 panels (only for gemm_at: gemm_an_strips packs its own) */
    Bp = cf_at(buf, 0);
    b_ld = OWN_NR;
    b_panel = OWN_NR * K;
    sbp = per_b;
    cf_launch L;
    cf_launch_begin(&L, ctx, "gemm", "gemm_pack_b");
    cf_arg_mem(&L, Bp);
    cf_arg_mem(&L, B);
    cf_arg_int(&L, trans_b);
    CF_ARG_UINTS(&L, K, N, ldb, stride_b, per_b);
    size_t global[3] = {(K + 15) / 16, panels, batch}, local[3] = {1, 1, 1};
    CF_TRY(cf_launch_run(&L, 3, global, local));
  }
  if (pack_a) {  /* op(A) = A^T as zero-padded K x 6 panels (lda 6 tells gemm_at) */
    Ap = cf_at(buf, per_b * batch);
    lda_k = OWN_MR;
    sap = per_a;
    cf_launch L;
    cf_launch_begin(&L, ctx, "gemm", "gemm_pack_at");
    cf_arg_mem(&L, Ap);
    cf_arg_mem(&L, A);
    CF_ARG_UINTS(&L, K, M, lda, stride_a, per_a);
    size_t global[3] = {(K + 63) / 64, (tiles + 7) / 8, batch}, local[3] = {1, 1, 1};
    CF_TRY(cf_launch_run(&L, 3, global, local));
  }
  size_t group = group_tiles(K);
  if (group > tiles) group = tiles;
  cf_launch L;
  cf_launch_begin(&L, ctx, "gemm", "gemm_at");
  cf_arg_mem(&L, C);
  cf_arg_mem(&L, Ap);
  cf_arg_mem(&L, Bp);
  CF_ARG_UINTS(&L, M, N, K, lda_k, ldc, b_ld, b_panel, sap, sbp, stride_c);
  cf_arg_float(&L, alpha);
  cf_arg_float(&L, beta);
  cf_arg_uint(&L, (unsigned)group);
  size_t global[2] = {tiles * panels, batch}, local[2] = {1, 1};
  return cf_launch_run(&L, 2, global, local);
}

/* epi (NULL: none) only where its kernel runs: a forward epilogue with op(A) = A and K > 0
 * (gemm_an_strips), dbias where gemm_at_strips does (tn_dbias_fuses). The strip kernels take a nested
 * batch in one launch; the others a group at a time. */
static cf_status own_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                          cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b, float beta,
                          cf_mem C, size_t ldc, size_t stride_c, size_t batch, const gemm_outer *o,
                          const gemm_epi *epi) {
  int packed_b = trans_b || N % OWN_NR;
  /* op(A) = A^T is read in place unless its rows are a multiple of 4 KiB apart (every row of a
   * tile's k loop then falls in the same cache sets): then, and for M < 6, it is packed. Measured on
   * Zen 5 with the calls interleaved (gemm_at, one item per tile), in place against packed: rows
   * 3 KiB apart 3-10% faster, 2 KiB 7-21%, 6 KiB the same, with C 1024 wide 3-8%; 4 KiB apart,
   * packed is faster. */
  int a_inplace = trans_a && M >= OWN_MR && lda % 1024 != 0;
  int strips = K > 0 && (!trans_a || (a_inplace && !packed_b));
  if (o->count > 1 && !strips) {
    gemm_outer group = {1, 0, 0, 0, o->tri};
    for (size_t g = 0; g < o->count; g++)
      CF_TRY(own_gemm(ctx, trans_a, trans_b, M, N, K, alpha, cf_shift(A, g * o->a), lda, stride_a,
                      cf_shift(B, g * o->b), ldb, stride_b, beta, cf_shift(C, g * o->c), ldc, stride_c, batch,
                      &group, epi));
    return CF_OK;
  }
  if (!own_fits(trans_a, trans_b, M, N, K, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c, batch) ||
      !(fits32(o->a) && fits32(o->b) && fits32(o->c)))
    return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM M=%zu N=%zu K=%zu batch=%zu: sizes, strides or offsets exceed the 32-bit "
                   "indexing of the own kernels", M, N, K, batch);
  size_t budget = 0;
  CF_TRY(cf_gemm_loop_budget(ctx, &budget));
  if (!own_loops_fit(budget, trans_a, trans_b, M, N, K, lda, epi != NULL)) return over_budget(ctx, budget, M, N, K);
  size_t panels = (N + OWN_NR - 1) / OWN_NR, tiles = (M + OWN_MR - 1) / OWN_MR;
  /* Where B is read in place, a K over OWN_SLICE_MIN_K runs as slices of about OWN_SLICE_K inside the
   * strip kernels, C accumulating (cl/gemm.cl). Measured on Zen 5 with the calls interleaved, as
   * separate launches against one pass (before the kernels took slices themselves, another 4-5%):
   * NN K = 1024 3-5% faster, 25% at K = 2048, TN with B's rows 4 KiB apart 6%; at K = 768 and 640
   * one pass was 5-9% faster, and so were the NT products (B packed) at K = 1024. */
  size_t kc = own_kc(K);
  if (!trans_a && K > 0)
    return own_gemm_an_strips(ctx, trans_b, M, N, K, packed_b ? K : kc, alpha, A, lda, stride_a, B, ldb, stride_b,
                              beta, C, ldc, stride_c, batch, o, panels, tiles, packed_b, budget, epi);
  if (trans_a && K > 0 && !packed_b)
    return own_gemm_at_in_place_b(ctx, a_inplace, M, N, K, kc, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C,
                                  ldc, stride_c, batch, o, panels, tiles, budget, epi);
  return own_gemm_at(ctx, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch,
                     panels, tiles, packed_b && K > 0, trans_a && K > 0 && !a_inplace);
}

/* ---------- entry points ---------- */

/* impl, else $CLFORMER_GEMM, else the tuning file's choice for this very shape, else what was
 * measured for its class (a K = 0 product measures nothing: gemm_any runs it on ours). */
static cf_status choose(cf_context *ctx, cf_gemm_impl impl, int ta, int tb, size_t M, size_t N, size_t K, size_t batch,
                        cf_gemm_impl *use) {
  CF_TRY(cf_gemm_resolve(ctx, impl, use));
  if (*use == CF_GEMM_AUTO) *use = tune_choose(ctx, ta, tb, M, N, K, batch);
  if (*use == CF_GEMM_AUTO && K == 0) *use = CF_GEMM_OWN;
  if (*use == CF_GEMM_AUTO) CF_TRY(cf_gemm_calib_choose(ctx, ta, tb, M, N, K, batch, use));
  return CF_OK;
}

/* The implementation a product runs on (impl as for cf_gemm_with), after checking its leading
 * dimensions; epi: whether our kernels would also run gemm_an_strips's epilogue. */
static cf_status pick(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                      cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b, cf_mem C,
                      size_t ldc, size_t stride_c, size_t batch, const gemm_outer *o, int epi, cf_gemm_impl *use) {
  size_t acols = trans_a ? M : K, bcols = trans_b ? K : N;
  if (lda < (acols ? acols : 1) || ldb < (bcols ? bcols : 1) || ldc < N)
    return CF_FAIL(CF_ERR_INVALID_ARG,
                   "GEMM %c%c M=%zu N=%zu K=%zu: leading dimensions lda=%zu ldb=%zu ldc=%zu too small",
                   trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, lda, ldb, ldc);
  CF_TRY(choose(ctx, impl, trans_a, trans_b, M, N, K, batch * o->count, use));
  int fits = own_fits(trans_a, trans_b, M, N, K, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c, batch) &&
             fits32(o->a) && fits32(o->b) && fits32(o->c);
  if (*use == CF_GEMM_OWN && impl == CF_GEMM_AUTO && !fits) *use = CF_GEMM_CLBLAST;
  if (*use == CF_GEMM_OWN && impl == CF_GEMM_AUTO && K > 0) {  /* too long for the device's loops: CLBlast */
    size_t budget = 0;
    CF_TRY(cf_gemm_loop_budget(ctx, &budget));
    if (!own_loops_fit(budget, trans_a, trans_b, M, N, K, lda, epi)) *use = CF_GEMM_CLBLAST;
  }
  if (K == 0 && fits) *use = CF_GEMM_OWN;  /* C = beta C: CLBlast refuses K = 0 (CLBlastInvalidDimension) */
  return CF_OK;
}

int cf_gemm_signature(char *buf, size_t n, int trans_a, int trans_b, size_t M, size_t N, size_t K, size_t batch) {
  return snprintf(buf, n, "%c%c %zux%zux%zu x%zu", trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, batch);
}

/* While profiling, the launches that follow carry the product's signature (cf_profile_tag). */
static void tag(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, size_t batch) {
  if (!cf_profile_on(ctx)) return;
  char sig[CF_PROFILE_TAG];
  cf_gemm_signature(sig, sizeof sig, trans_a, trans_b, M, N, K, batch);
  cf_profile_tag(ctx, sig);
}

/* A batch of o->count x batch products (o: one_group for a plain batch). The implementation is
 * picked for the whole batch. */
static cf_status gemm_any(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                          float alpha, cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b,
                          float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch, const gemm_outer *o) {
  if (M == 0 || N == 0 || batch == 0 || o->count == 0) return CF_OK;
  cf_gemm_impl use;
  CF_TRY(pick(ctx, impl, trans_a, trans_b, M, N, K, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c, batch, o, 0,
              &use));
  tag(ctx, trans_a, trans_b, M, N, K, batch * o->count);  /* after pick, whose calibration tags its own */
  cf_status st;
  if (use == CF_GEMM_OWN)
    st = own_gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                  batch, o, NULL);
  else if (o->count > 1)
    st = clblast_gemm_nested(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                             stride_c, batch, o);
  else
    st = clblast_gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                      stride_c, batch);
  cf_profile_tag(ctx, NULL);
  return st;
}

/* One product on our kernels with its epilogue e, its launches tagged while profiling. */
static cf_status own_with_epi(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, cf_mem A,
                              size_t lda, cf_mem B, size_t ldb, float beta, cf_mem C, size_t ldc, const gemm_epi *e) {
  tag(ctx, trans_a, trans_b, M, N, K, 1);
  cf_status st = own_gemm(ctx, trans_a, trans_b, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, &one_group, e);
  cf_profile_tag(ctx, NULL);
  return st;
}

cf_status cf_gemm_nt_bias_act_with(cf_context *ctx, cf_gemm_impl impl, size_t M, size_t N, size_t K, cf_mem A,
                                   size_t lda, cf_mem B, size_t ldb, cf_mem C, size_t ldc, cf_mem bias, cf_mem act_out,
                                   cf_activation act, cf_dropout drop, int *fused) {
  *fused = 1;
  if (M == 0 || N == 0) return CF_OK;
  if ((unsigned)act > CF_ACT_GELU_ERF)
    return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM epilogue: unknown activation %d", (int)act);
  if (!(drop.p >= 0.0f && drop.p < 1.0f) || (drop.p > 0.0f && !act_out.buf))
    return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM epilogue: dropout p %g %s", (double)drop.p,
                   drop.p > 0.0f ? "without an activation output" : "is not in [0, 1)");
  if (drop.p > 0.0f && 4 * (uint64_t)drop.group0 + (uint64_t)M * ldc > ((uint64_t)1 << 32))
    return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM epilogue: a dropout mask of %zu x %zu elements past group %u exceeds "
                   "2^32 elements", M, ldc, drop.group0);
  cf_gemm_impl use;
  CF_TRY(pick(ctx, impl, 0, 1, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0, 1, &one_group, 1, &use));
  *fused = use == CF_GEMM_OWN && K > 0;
  if (!*fused) return gemm_any(ctx, use, 0, 1, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1, &one_group);
  gemm_epi e = {bias, act_out, act, drop, {0}};
  return own_with_epi(ctx, 0, 1, M, N, K, A, lda, B, ldb, 0.0f, C, ldc, &e);
}

cf_status cf_gemm_nt_bias_act(cf_context *ctx, size_t M, size_t N, size_t K, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                              cf_mem C, size_t ldc, cf_mem bias, cf_mem act_out, cf_activation act, cf_dropout drop,
                              int *fused) {
  return cf_gemm_nt_bias_act_with(ctx, CF_GEMM_AUTO, M, N, K, A, lda, B, ldb, C, ldc, bias, act_out, act, drop, fused);
}

/* Whether own_gemm takes C += A^T B with gemm_at_strips (A's rows not 4 KiB multiples apart, M >= 6,
 * B in place: N a multiple of 64), the kernel that adds dbias; not on a device that limits an
 * item's loops (its trip counts leave the row sums out). */
static cf_status tn_dbias_fuses(cf_context *ctx, size_t M, size_t N, size_t K, size_t lda, int *fuses) {
  size_t budget = 0;
  CF_TRY(cf_gemm_loop_budget(ctx, &budget));
  *fuses = K > 0 && M >= OWN_MR && lda % 1024 != 0 && N % OWN_NR == 0 && budget == 0;
  return CF_OK;
}

cf_status cf_gemm_tn_dbias_with(cf_context *ctx, cf_gemm_impl impl, size_t M, size_t N, size_t K, cf_mem A, size_t lda,
                                cf_mem B, size_t ldb, float beta, cf_mem C, size_t ldc, cf_mem dbias, int *fused) {
  *fused = 0;
  if (M == 0 || N == 0) return CF_OK;
  cf_gemm_impl use;
  CF_TRY(pick(ctx, impl, 1, 0, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0, 1, &one_group, 0, &use));
  if (use == CF_GEMM_OWN && dbias.buf) CF_TRY(tn_dbias_fuses(ctx, M, N, K, lda, fused));
  if (!*fused) return gemm_any(ctx, use, 1, 0, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, &one_group);
  gemm_epi e = {.dbias = dbias};
  return own_with_epi(ctx, 1, 0, M, N, K, A, lda, B, ldb, beta, C, ldc, &e);
}

cf_status cf_gemm_tn_dbias(cf_context *ctx, size_t M, size_t N, size_t K, cf_mem A, size_t lda, cf_mem B, size_t ldb,
                           float beta, cf_mem C, size_t ldc, cf_mem dbias, int *fused) {
  return cf_gemm_tn_dbias_with(ctx, CF_GEMM_AUTO, M, N, K, A, lda, B, ldb, beta, C, ldc, dbias, fused);
}

cf_status cf_gemm_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N, size_t K,
                       float alpha, cf_mem A, size_t lda, cf_mem B, size_t ldb, float beta, cf_mem C, size_t ldc) {
  return gemm_any(ctx, impl, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, &one_group);
}

cf_status cf_gemm_batched_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N,
                               size_t K, float alpha, cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb,
                               size_t stride_b, float beta, cf_mem C, size_t ldc, size_t stride_c, size_t batch) {
  return gemm_any(ctx, impl, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                  stride_c, batch, &one_group);
}

cf_status cf_gemm(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha, cf_mem A,
                  size_t lda, cf_mem B, size_t ldb, float beta, cf_mem C, size_t ldc) {
  return gemm_any(ctx, CF_GEMM_AUTO, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                  &one_group);
}

cf_status cf_gemm_batched(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                          cf_mem A, size_t lda, size_t stride_a, cf_mem B, size_t ldb, size_t stride_b, float beta,
                          cf_mem C, size_t ldc, size_t stride_c, size_t batch) {
  return gemm_any(ctx, CF_GEMM_AUTO, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                  stride_c, batch, &one_group);
}

cf_status cf_gemm_batched_nested_with(cf_context *ctx, cf_gemm_impl impl, int trans_a, int trans_b, size_t M, size_t N,
                                      size_t K, float alpha, cf_mem A, size_t lda, size_t stride_a, size_t outer_a,
                                      cf_mem B, size_t ldb, size_t stride_b, size_t outer_b, float beta, cf_mem C,
                                      size_t ldc, size_t stride_c, size_t outer_c, size_t inner, size_t outer,
                                      cf_gemm_tri tri) {
  if ((unsigned)tri > CF_GEMM_C_LOWER) return CF_FAIL(CF_ERR_INVALID_ARG, "GEMM: unknown triangle %d", (int)tri);
  gemm_outer o = {outer, outer_a, outer_b, outer_c, tri};
  return gemm_any(ctx, impl, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                  stride_c, inner, &o);
}

cf_status cf_gemm_batched_nested(cf_context *ctx, int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                                 cf_mem A, size_t lda, size_t stride_a, size_t outer_a, cf_mem B, size_t ldb,
                                 size_t stride_b, size_t outer_b, float beta, cf_mem C, size_t ldc, size_t stride_c,
                                 size_t outer_c, size_t inner, size_t outer, cf_gemm_tri tri) {
  return cf_gemm_batched_nested_with(ctx, CF_GEMM_AUTO, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, outer_a, B,
                                     ldb, stride_b, outer_b, beta, C, ldc, stride_c, outer_c, inner, outer, tri);
}

/* Of 0 .. n-1, how many are <= i, and how many >= i. */
static size_t upto(size_t i, size_t n) { return i + 1 < n ? i + 1 : n; }
static size_t from(size_t i, size_t n) { return i < n ? n - i : 0; }

double cf_gemm_shape_flops(const cf_gemm_shape *s) {
  double terms = 0;  /* multiply-adds */
  for (size_t i = 0; i < s->M; i++) {  /* row i of C */
    size_t k = s->tri == CF_GEMM_A_LOWER ? upto(i, s->K) : s->tri == CF_GEMM_A_UPPER ? from(i, s->K) : s->K;
    terms += (double)k * (double)(s->tri == CF_GEMM_C_LOWER ? upto(i, s->N) : s->N);
  }
  return 2.0 * terms * (double)s->batch;
}
