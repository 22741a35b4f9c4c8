/* Two contexts on two devices (POCL_DEVICES="pthread pthread" gives PoCL two CPU devices) train in
 * one process from two threads at once, and each gives the losses it gives alone, bit for bit: no
 * state of one context (GEMM tuning, scratch, programs, dropout, errors) leaks into the other. Each
 * thread opens its own context, so programs are built (or loaded from the binary cache) at the same
 * time too. Twice: with the default GEMMs (our kernels on a CPU), then under a tuning file that sends
 * every GEMM shape of the model to CLBlast with tuned parameters (each context reads it on its first
 * GEMM, both threads hand the parameters to CLBlast at once). With one device, both contexts share it
 * (said in the output). */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* mkstemp, fdopen, unlink */
#endif
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"

#define STEPS 10
#define TRY(expr)                         \
  do {                                    \
    cf_status try_st_ = (expr);           \
    if (try_st_ != CF_OK) return try_st_; \
  } while (0)
#define B 4
#define T 16

typedef struct run {
  char spec[32];          /* the device, as "P:D" */
  unsigned long long seed;
  const char *corpus;
  float losses[STEPS];
  double seconds;         /* the whole run, opening the context included */
  int tuned;              /* cf_gemm_tune_summary after training */
  char applied[512];
  cf_status st;
  char err[1024];         /* the thread's cf_last_error when st is not CF_OK */
} run;

static cf_status tiny_config(cf_config *c, const char *corpus, unsigned long long seed) {
  cf_config_defaults(c);
  snprintf(c->data.train, sizeof c->data.train, "%s", corpus);
  c->seed = seed;
  c->data.seq_len = T;
  c->data.batch_size = B;
  c->model.layers = 2;
  c->model.d_model = 32;
  c->model.heads = 2;
  c->model.d_ff = 64;
  c->model.dropout = 0.1;       /* dropout on: the masks come from Philox keyed by (seed, step) */
  c->model.attn_dropout = 0.1;
  return cf_config_validate(c);
}

static cf_status train_steps(cf_model *m, const cf_data *d, unsigned long long seed, float *losses) {
  int in[B * T], tg[B * T];
  for (int s = 1; s <= STEPS; s++) {
    cf_data_batch(d, CF_SPLIT_TRAIN, seed, (uint64_t)s, B, T, in, tg);
    TRY(cf_model_forward(m, in, tg, (uint32_t)s, 1));
    TRY(cf_model_loss(m, &losses[s - 1]));
    TRY(cf_model_backward(m));
    TRY(cf_model_global_grad_norm(m));
    TRY(cf_model_update(m, 1e-3f, s));
  }
  return CF_OK;
}

/* One whole run on its own context: open, train STEPS steps, close. */
static cf_status train_run(run *r) {
  cf_config c;
  TRY(tiny_config(&c, r->corpus, r->seed));
  cf_data d;
  TRY(cf_data_open(&d, &c));
  cf_context_options o = {0};
  o.device_spec = r->spec;
  cf_context *ctx = NULL;
  cf_model *m = NULL;
  cf_status st = cf_context_create(&o, &ctx);
  if (st == CF_OK) st = cf_model_create(ctx, &c.model, &c.optim, c.seed, B, T, &m);
  if (st == CF_OK) st = cf_model_init(m, r->seed);
  if (st == CF_OK) st = train_steps(m, &d, r->seed, r->losses);
  if (st == CF_OK) r->tuned = cf_gemm_tune_summary(ctx, r->applied, sizeof r->applied);
  cf_model_free(m);
  cf_context_free(ctx);
  cf_data_close(&d);
  return st;
}

static void *run_thread(void *arg) {
  run *r = arg;
  double t0 = test_now();
  r->st = train_run(r);
  r->seconds = test_now() - t0;
  if (r->st != CF_OK) snprintf(r->err, sizeof r->err, "%s", cf_last_error());  /* this thread's error */
  return NULL;
}

static void run_init(run *r, const char *spec, unsigned long long seed, const char *corpus) {
  memset(r, 0, sizeof *r);
  snprintf(r->spec, sizeof r->spec, "%s", spec);
  r->seed = seed;
  r->corpus = corpus;
}

static int run_ok(const run *r, const char *when) {
  TEST_ASSERT(r->st == CF_OK, "%s run on %s, seed %llu: %s: %s", when, r->spec, r->seed, cf_status_str(r->st), r->err);
  return r->st == CF_OK;
}

/* Two runs at the same time, one per thread. */
static void run_pair(run *a, run *b) {
  pthread_t ta, tb;
  int ea = pthread_create(&ta, NULL, run_thread, a), eb = pthread_create(&tb, NULL, run_thread, b);
  if (ea || eb) {
    fprintf(stderr, "FAIL: pthread_create: %s\n", strerror(ea ? ea : eb));
    exit(1);
  }
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
}

/* The concurrent run's losses against the solo run's, bit for bit. */
static void compare(const run *solo, const run *conc, const char *what) {
  if (!run_ok(solo, "solo") || !run_ok(conc, "concurrent")) return;
  int same = !memcmp(solo->losses, conc->losses, sizeof solo->losses);
  printf("%s  %-34s device %s seed %llu: %d losses, solo %.6f .. %.6f (%.1f s), concurrent %.6f .. %.6f (%.1f s)\n",
         same ? "ok  " : "FAIL", what, solo->spec, solo->seed, STEPS, solo->losses[0], solo->losses[STEPS - 1],
         solo->seconds, conc->losses[0], conc->losses[STEPS - 1], conc->seconds);
  for (int i = 0; i < STEPS && !same; i++)
    if (memcmp(&solo->losses[i], &conc->losses[i], sizeof(float)))
      printf("      step %d: solo %.9g, concurrent %.9g\n", i + 1, solo->losses[i], conc->losses[i]);
  TEST_ASSERT(same, "%s on %s (seed %llu): the concurrent losses differ from the solo ones", what, solo->spec,
              solo->seed);
}

/* A small corpus in a temporary file: a few verses, repeated. */
static void write_corpus(char *path) {
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "FAIL: cannot create the corpus %s\n", path);
    exit(1);
  }
  for (int i = 0; i < 40; i++)
    fprintf(f, "%d:%d In the beginning God created the heaven and the earth.\n"
               "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
               "And God said, Let there be light: and there was light.\n", 1 + i % 3, 1 + i);
  fclose(f);
}

/* The first two devices, or the only one twice. */
static void pick_devices(char spec[2][32]) {
  cf_device_info *list;
  int count;
  cf_status st = cf_device_list(&list, &count);
  if (st == CL_PLATFORM_NOT_FOUND_KHR || (st == CF_OK && count == 0)) {
    fprintf(stderr, "SKIP: no OpenCL device\n");
    exit(TEST_SKIP);
  }
  TEST_OK(st);
  for (int i = 0; i < 2; i++) {
    const cf_device_info *d = &list[i < count ? i : 0];
    snprintf(spec[i], 32, "%d:%d", d->platform_index, d->device_index);
    printf("context %d: device %s, %s (%s)\n", i, spec[i], d->name, d->platform_name);
  }
  if (count < 2) printf("only one OpenCL device: both contexts use %s (POCL_DEVICES=\"pthread pthread\" gives two)\n",
                        spec[0]);
  free(list);
}

/* Each spec's run alone, one after the other, then two at once: the same work, then different
 * seeds (different data, weights and masks). want_tuned: every run must report tuned CLBlast. */
static void scenario(const char *title, char spec[2][32], const char *corpus, int want_tuned) {
  printf("-- %s\n", title);
  run a, b, c;
  run_init(&a, spec[0], 1, corpus);
  run_init(&b, spec[1], 1, corpus);
  run_init(&c, spec[1], 2, corpus);
  run_thread(&a);
  run_thread(&b);
  run_thread(&c);
  if (run_ok(&a, "solo") && run_ok(&b, "solo"))
    printf("info  solo runs of seed 1 on %s and %s are %s (last loss %.9g)%s%s\n", spec[0], spec[1],
           memcmp(a.losses, b.losses, sizeof a.losses) ? "different" : "identical", a.losses[STEPS - 1],
           a.tuned ? "; tuned CLBlast: " : "",
           a.applied);
  if (run_ok(&b, "solo") && run_ok(&c, "solo"))
    TEST_ASSERT(memcmp(b.losses, c.losses, sizeof b.losses), "seeds 1 and 2 must train differently");
  run a2, b2, a3, c3;
  run_init(&a2, spec[0], 1, corpus);
  run_init(&b2, spec[1], 1, corpus);
  run_pair(&a2, &b2);
  compare(&a, &a2, "same seed on both, concurrent:");
  compare(&b, &b2, "same seed on both, concurrent:");
  run_init(&a3, spec[0], 1, corpus);
  run_init(&c3, spec[1], 2, corpus);
  run_pair(&a3, &c3);
  compare(&a, &a3, "different seeds, concurrent:");
  compare(&c, &c3, "different seeds, concurrent:");
  const run *all[] = {&a, &b, &c, &a2, &b2, &a3, &c3};
  for (size_t i = 0; want_tuned && i < sizeof all / sizeof *all; i++)
    TEST_ASSERT(all[i]->st != CF_OK || all[i]->tuned, "run on %s (seed %llu) did not take the tuning file",
                all[i]->spec, all[i]->seed);
}

static cf_context *open_on(const char *spec) {
  cf_context_options o = {0};
  o.device_spec = spec;
  cf_context *ctx;
  TEST_OK(cf_context_create(&o, &ctx));
  return ctx;
}

/* A tuning file in a fresh cache directory (CLFORMER_CACHE_DIR, set while no thread runs): tuned
 * CLBlast parameters (as in test_gemm) and CLBlast chosen for every GEMM shape of the model. */
static void write_tuning(const char *spec, const char *corpus, char *dir) {
  TEST_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
  setenv("CLFORMER_CACHE_DIR", dir, 1);
  cf_context *ctx = open_on(spec);
  char path[4200];
  TEST_ASSERT(cf_gemm_tune_path(ctx, path, sizeof path), "no tuning file path");
  cf_context_free(ctx);
  cf_config c;
  TEST_OK(tiny_config(&c, corpus, 1));
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  int n = cf_model_gemm_shapes(&c, sh);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "FAIL: cannot write %s\n", path);
    exit(1);
  }
  fputs("# test_two_contexts\n"
        "clblast Xgemm GEMMK=0 KREG=1 KWG=16 KWI=2 MDIMA=8 MDIMC=8 MWG=32 NDIMB=8 NDIMC=8 NWG=32 SA=1 SB=1 STRM=1 "
        "STRN=0 VWM=2 VWN=2\n"
        "clblast XgemmDirect KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=8 NDIMCD=8 PADA=1 PADB=0 VWMD=2 VWND=2 WGD=16\n"
        "clblast Padtranspose PADTRA_PAD=1 PADTRA_TILE=8 PADTRA_WPT=2\n"
        "clblast Transpose TRA_DIM=8 TRA_PAD=1 TRA_SHUFFLE=0 TRA_WPT=2\n", f);
  for (int i = 0; i < n; i++)
    fprintf(f, "choice %c%c %zu %zu %zu %zu clblast 1 2\n", sh[i].ta ? 'T' : 'N', sh[i].tb ? 'T' : 'N', sh[i].M,
            sh[i].N, sh[i].K, sh[i].batch);
  fclose(f);
  printf("tuning file %s: CLBlast for all %d GEMM shapes\n", path, n);
}

/* cf_gemm_tune_hold with the tuning state in each context, before anything tuned CLBlast in this
 * process: a context holds the file back until it reloads it; once CLBlast took the parameters for
 * a device, a new context on it cannot hold them back (CLBlast's parameters are per device and
 * process), while one on the other device still can. */
static void check_hold(char spec[2][32]) {
  char summary[512];
  cf_context *first = open_on(spec[0]);
  int held = cf_gemm_tune_hold(first), tuned = cf_gemm_tune_summary(first, summary, sizeof summary);
  cf_gemm_tune_reload(first);
  int reloaded = cf_gemm_tune_summary(first, summary, sizeof summary);
  cf_context_free(first);
  cf_context *same = open_on(spec[0]), *other = open_on(spec[1]);
  int same_held = cf_gemm_tune_hold(same), same_tuned = cf_gemm_tune_summary(same, summary, sizeof summary);
  int two = strcmp(spec[0], spec[1]) != 0, other_held = cf_gemm_tune_hold(other);
  cf_context_free(same);
  cf_context_free(other);
  int ok = held && !tuned && reloaded && !same_held && same_tuned && other_held == two;
  printf("%s  hold: first context held %d (tuned %d), after reload tuned %d; a new context on %s held %d (tuned %d), "
         "on %s held %d\n", ok ? "ok  " : "FAIL", held, tuned, reloaded, spec[0], same_held, same_tuned, spec[1],
         other_held);
  TEST_ASSERT(ok, "cf_gemm_tune_hold per context: see the line above (want 1 0 1 0 1 %d)", two);
}

/* dir and everything in it (the binary cache and the tuning file). */
static void remove_dir(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", dir);
}

int main(void) {
  char spec[2][32], corpus[] = "/tmp/clformer-two-contexts-XXXXXX", cache[] = "/tmp/clformer-two-contexts-cache-XXXXXX";
  pick_devices(spec);
  write_corpus(corpus);
  /* tuned first, so that nothing in this process tuned CLBlast before check_hold */
  if (!getenv("CLFORMER_GEMM") && !getenv("CLFORMER_TUNE")) {
    const char *old = getenv("CLFORMER_CACHE_DIR");
    char *saved = old ? strdup(old) : NULL;
    write_tuning(spec[0], corpus, cache);
    check_hold(spec);
    scenario("tuned CLBlast for every GEMM", spec, corpus, 1);
    remove_dir(cache);
    if (saved) setenv("CLFORMER_CACHE_DIR", saved, 1);
    else unsetenv("CLFORMER_CACHE_DIR");
    free(saved);
  }
  scenario("default GEMMs", spec, corpus, 0);
  unlink(corpus);
  return test_finish("test_two_contexts");
}
