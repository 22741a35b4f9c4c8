/* `clformer translate RUN` and `clformer eval-bleu RUN`: a trained encoder-decoder's translations of
 * standard input, and the BLEU of its config's test (or validation) set. RUN is a run directory or a
 * checkpoint file; the model is built from the config stored in the checkpoint, the subword
 * vocabulary read from bpe.merges beside it. Not here: decoding itself (experiments/translate.c). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "app/cli.h"
#include "base/base.h"
#include "clformer/base.h"
#include "clformer/config.h"
#include "clformer/experiments.h"
#include "clformer/train.h"
#include "runtime/runtime.h"

static const char *translate_usage =
    "usage: clformer translate RUN_DIR_OR_CHECKPOINT [--beam N] [--lenpen X] [--device SPEC] < SOURCE > OUTPUT\n"
    "\n"
    "Translates standard input, one sentence a line, with a trained encoder-decoder (model.arch\n"
    "encoder_decoder): RUN_DIR/checkpoint.safetensors (or the checkpoint file named), its stored config,\n"
    "and the subword vocabulary bpe.merges beside it. Writes one translation a line to standard output,\n"
    "in the input's order; notes (sentences cut to data.max_len, speed) go to standard error. All input\n"
    "is read before the first translation: sentences of similar length are decoded together.\n"
    "  --beam N          hypotheses kept per sentence (default 5; 1 = greedy)\n"
    "  --lenpen X        length penalty: scores divided by length^X (default 1.0, fairseq's; 0 = none)\n"
    "  --device SPEC     OpenCL device (default: $CLFORMER_DEVICE, then the run's config, then auto)\n";

static const char *bleu_usage =
    "usage: clformer eval-bleu RUN_DIR_OR_CHECKPOINT [--split test|valid] [--beam N] [--lenpen X] [--limit N]\n"
    "                           [--json] [--device SPEC]\n"
    "\n"
    "Translates the run's test set (the stored config's data.test: PREFIX.SOURCE_LANG) with its\n"
    "checkpoint and scores it against PREFIX.TARGET_LANG as sacreBLEU does by default (13a, exp\n"
    "smoothing), printing sacreBLEU's line with its signature, then the time taken:\n"
    "  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp = 23.41 55.2/29.8/18.0/11.2 (BP = 0.981 ...)\n"
    "  --split S         test (default) or valid (data.valid's files)\n"
    "  --beam N          hypotheses kept per sentence (default 5; 1 = greedy)\n"
    "  --lenpen X        length penalty: scores divided by length^X (default 1.0)\n"
    "  --limit N         the first N sentences only (default 0: all)\n"
    "  --json            print one JSON object instead (score, n-gram precisions, signature, time)\n"
    "  --device SPEC     OpenCL device (default: $CLFORMER_DEVICE, then the run's config, then auto)\n";

/* A trained encoder-decoder, ready to decode. */
typedef struct trained {
  cf_config cfg;
  cf_train_state ts;
  cf_context *ctx;
  cf_model *m;
  cf_bpe *bpe;
  char ckpt[2100];
} trained;

static void trained_free(trained *t) {
  cf_model_free(t->m);
  cf_context_free(t->ctx);
  cf_bpe_free(t->bpe);
}

/* The config stored in the checkpoint, validated: 0, or 2 after saying why. */
static int stored_config(const char *cmd, const char *ckpt, cf_config *cfg) {
  cf_st_file f;
  if (cf_safetensors_read(ckpt, &f) != CF_OK) return 2;  /* reported, naming the file */
  const char *yaml = cf_safetensors_meta(&f, "config");
  int rc = 0;
  cf_config_defaults(cfg);
  if (!yaml) {
    fprintf(stderr, "clformer %s: %s holds no config (not a checkpoint clformer train wrote)\n", cmd, ckpt);
    rc = 2;
  } else if (cf_config_load_string(cfg, yaml, ckpt) != CF_OK || cf_config_validate(cfg) != CF_OK) {
    fprintf(stderr, "clformer %s: %s: its stored config does not load (above)\n", cmd, ckpt);
    rc = 2;
  }
  cf_safetensors_free(&f);
  return rc;
}

/* RUN (a run directory or a checkpoint) loaded onto the device: 0, or the exit code after saying why. */
static int trained_open(const char *cmd, const char *run, const char *device, trained *t) {
  struct stat sb;
  char dir[2100], merges[2200];
  if (stat(run, &sb) != 0) {
    fprintf(stderr, "clformer %s: %s: %s (expected a run directory or its checkpoint.safetensors)\n", cmd, run,
            strerror(errno));
    return 2;
  }
  if (S_ISDIR(sb.st_mode)) {
    snprintf(dir, sizeof dir, "%s", run);
    snprintf(t->ckpt, sizeof t->ckpt, "%s/checkpoint.safetensors", run);
    if (access(t->ckpt, R_OK) != 0) {
      fprintf(stderr, "clformer %s: %s has no checkpoint.safetensors (a run that diverged before its first "
              "checkpoint, or not a run directory)\n", cmd, run);
      return 2;
    }
  } else {
    const char *slash = strrchr(run, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - run) : 1, slash ? run : ".");
    if (slash == run) snprintf(dir, sizeof dir, "/");
    snprintf(t->ckpt, sizeof t->ckpt, "%s", run);
  }
  int rc = stored_config(cmd, t->ckpt, &t->cfg);
  if (rc) return rc;
  if (t->cfg.model.arch != CF_ARCH_ENCODER_DECODER) {
    fprintf(stderr, "clformer %s: %s is a language model's checkpoint (model.arch decoder), not an encoder-decoder's "
            "(model.arch encoder_decoder): only a translation model translates (`clformer sample` generates text "
            "from this one)\n", cmd, t->ckpt);
    return 2;
  }
  snprintf(merges, sizeof merges, "%s/%s", dir, CF_TRAIN_MERGES_FILE);
  if (access(merges, R_OK) != 0) {
    fprintf(stderr, "clformer %s: no %s beside %s: the subword vocabulary `clformer train` wrote into the run "
            "directory is needed to encode and decode (copy it beside the checkpoint)\n", cmd, CF_TRAIN_MERGES_FILE,
            t->ckpt);
    return 2;
  }
  cf_status st = cf_bpe_load(merges, &t->bpe);
  if (st == CF_OK && cf_bpe_vocab_size(t->bpe) > t->cfg.model.vocab)
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s has %d ids but the model %d: not this model's vocabulary", merges,
                 cf_bpe_vocab_size(t->bpe), t->cfg.model.vocab);
  if (st != CF_OK) return cf_exit_code(st);
  cf_context_options o = {.device_spec = cf_device_spec_resolve(device, t->cfg.device)};
  if ((st = cf_context_create(&o, &t->ctx)) != CF_OK) return cf_exit_code(st);
  int B, T;
  cf_model_shape(&t->cfg, &B, &T);
  /* decoding keeps no optimizer state: planned and made as plain SGD's (none), Adam's moments in
   * the file are checked but not loaded; two of the four parameter-sized buffers saved */
  cf_optim_config none = {.name = CF_OPTIM_SGD, .lr = t->cfg.optim.lr};
  st = cf_model_create(t->ctx, &t->cfg.model, &none, t->cfg.seed, B, T, &t->m);
  if (st == CF_OK) st = cf_checkpoint_load(t->m, t->ckpt, &t->ts, NULL);
  if (st == CF_OK && t->ts.vocab && t->ts.vocab != cf_bpe_checksum(t->bpe))
    st = CF_FAIL(CF_ERR_CHECKPOINT, "%s is not the vocabulary %s was trained with (checksum %016llx, the checkpoint "
                 "records %016llx): use the bpe.merges of its run", merges, t->ckpt, cf_bpe_checksum(t->bpe),
                 t->ts.vocab);
  return cf_exit_code(st);
}

typedef struct decode_args {
  const char *run, *device, *split;
  cf_translate_options o;
  long limit;
  int json;
} decode_args;

/* The options both commands share, and eval-bleu's: 0, -1 after --help, or 2 after saying why. */
static int parse_args(const char *cmd, const char *usage, int argc, char **argv, decode_args *a) {
  int bleu = !strcmp(cmd, "eval-bleu");
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long l;
    if (cf_arg_is(s, "--help", "-h")) { fputs(usage, stdout); return -1; }
    else if (cf_arg_is(s, "--beam", NULL) && v) {
      i++;
      if (!cf_parse_long(v, 1, 100000, &l)) {
        fprintf(stderr, "clformer %s: --beam '%s' is not valid: an integer of at least 1 (1: greedy)\n", cmd, v);
        return 2;
      }
      a->o.beam = (int)l;
    } else if (cf_arg_is(s, "--lenpen", NULL) && v) {
      i++;
      if (!cf_parse_double(v, -100, 100, &a->o.len_penalty)) {
        fprintf(stderr, "clformer %s: --lenpen '%s' is not valid: a number (1: fairseq's default, 0: none)\n", cmd, v);
        return 2;
      }
    } else if (cf_arg_is(s, "--device", "-d") && v) a->device = argv[++i];
    else if (bleu && cf_arg_is(s, "--split", NULL) && v) {
      a->split = argv[++i];
      if (strcmp(v, "test") && strcmp(v, "valid")) {
        fprintf(stderr, "clformer %s: --split '%s' is not a split: test or valid\n", cmd, v);
        return 2;
      }
    } else if (bleu && cf_arg_is(s, "--limit", NULL) && v) {
      i++;
      if (!cf_parse_long(v, 0, 2147483647, &a->limit)) {
        fprintf(stderr, "clformer %s: --limit '%s' is not valid: an integer >= 0 (0: all)\n", cmd, v);
        return 2;
      }
    } else if (bleu && cf_arg_is(s, "--json", NULL)) a->json = 1;
    else if (s[0] != '-' && !a->run) a->run = s;
    else return cf_cli_unexpected(cmd, argc, argv, i, usage);
  }
  if (!a->run) { fprintf(stderr, "clformer %s: RUN_DIR_OR_CHECKPOINT is required\n\n%s", cmd, usage); return 2; }
  return 0;
}

typedef struct { char **line; size_t n, cap; } lines;

static void lines_free(lines *l) {
  for (size_t i = 0; i < l->n; i++) free(l->line[i]);
  free(l->line);
}

/* Standard input's lines (without '\n' or a '\r' before it; a last line without one counts): 0, or 2. */
static int read_stdin(lines *l) {
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&buf, &cap, stdin)) >= 0) {
    if (len > 0 && buf[len - 1] == '\n') buf[--len] = 0;
    if (len > 0 && buf[len - 1] == '\r') buf[--len] = 0;
    if (l->n == l->cap) {
      l->cap = l->cap ? 2 * l->cap : 1024;
      char **grown = realloc(l->line, l->cap * sizeof *grown);
      if (!grown) break;
      l->line = grown;
    }
    if (!(l->line[l->n] = strdup(buf))) break;
    l->n++;
  }
  int eof = feof(stdin), err = ferror(stdin) ? errno : 0;
  free(buf);
  if (err) { fprintf(stderr, "clformer translate: cannot read standard input: %s\n", strerror(err)); return 2; }
  if (!eof) { fprintf(stderr, "clformer translate: out of memory reading standard input\n"); return 1; }
  return 0;
}

/* A note at most every 2 s while a long input is translated. */
typedef struct { double last; } progress_state;

static void progress(void *user, int done, int total, const char *what, double elapsed_s, double eta_s) {
  progress_state *p = user;
  (void)eta_s;
  if (done == total || elapsed_s - p->last < 2.0 || cf_verbosity() < 1) return;
  p->last = elapsed_s;
  fprintf(stderr, "clformer translate: %d of %d %s (%.0f s)\n", done, total, what, elapsed_s);
}

int cmd_translate(int argc, char **argv) {
  decode_args a = {.o = {.beam = 5, .len_penalty = 1.0}};
  int rc = parse_args("translate", translate_usage, argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  trained t = {0};
  lines in = {0};
  if (!(rc = trained_open("translate", a.run, a.device, &t))) rc = read_stdin(&in);
  char **out = rc ? NULL : calloc(in.n ? in.n : 1, sizeof *out);
  if (!rc && !out) rc = 1;
  size_t truncated = 0;
  progress_state ps = {0};
  double t0 = cf_now();
  if (!rc)
    rc = cf_exit_code(cf_translate_lines(t.m, t.bpe, (const char *const *)in.line, in.n, &a.o, out, &truncated,
                                         progress, &ps));
  for (size_t i = 0; !rc && i < in.n; i++) {
    for (char *c = out[i]; *c; c++)  /* one line a sentence, whatever bytes the model chose */
      if (*c == '\n' || *c == '\r') *c = ' ';
    puts(out[i]);
  }
  if (!rc && fflush(stdout) != 0) {
    fprintf(stderr, "clformer translate: cannot write standard output: %s\n", strerror(errno));
    rc = 1;
  }
  double s = cf_now() - t0;
  if (!rc && in.n && cf_verbosity() >= 1)
    fprintf(stderr, "clformer translate: %zu sentence%s in %.2f s (%.1f a second), beam %d\n", in.n, in.n == 1 ? "" : "s", s,
            s > 0 ? (double)in.n / s : 0.0, a.o.beam);
  if (!rc && truncated)
    fprintf(stderr, "clformer translate: note: %zu of %zu sentences were longer than %d tokens (data.max_len - 1) "
            "and were cut\n", truncated, in.n, t.cfg.data.max_len - 1);
  for (size_t i = 0; out && i < in.n; i++) free(out[i]);
  free(out);
  lines_free(&in);
  trained_free(&t);
  return rc;
}

/* Lines in path (a last one without '\n' counts): what cf_translate_bleu reads. -1 if unreadable. */
static long count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long n = 0;
  int c, last = '\n';
  while ((c = getc(f)) != EOF) {
    n += c == '\n';
    last = c;
  }
  fclose(f);
  return n + (last != '\n');
}

static int print_json(const decode_args *a, const trained *t, const cf_bleu_score *s, const char *sig, long n,
                      double secs) {
  json_t *j = json_object(), *p = json_array();
  for (int k = 0; k < 4 && p; k++) json_array_append_new(p, cf_json_num(s->precisions[k], "%.4f"));
  cf_status st = cf_json_set(j, "bleu", cf_json_num(s->bleu, "%.4f"));
  if (st == CF_OK) st = cf_json_set(j, "precisions", p);
  if (st == CF_OK) st = cf_json_set(j, "bp", cf_json_num(s->bp, "%.4f"));
  if (st == CF_OK) st = cf_json_set(j, "ratio", cf_json_num(s->ratio, "%.4f"));
  if (st == CF_OK) st = cf_json_set(j, "hyp_len", json_integer((json_int_t)s->hyp_len));
  if (st == CF_OK) st = cf_json_set(j, "ref_len", json_integer((json_int_t)s->ref_len));
  if (st == CF_OK) st = cf_json_set(j, "signature", cf_json_str(sig));
  if (st == CF_OK) st = cf_json_set(j, "split", json_string(a->split));
  if (st == CF_OK) st = cf_json_set(j, "sentences", json_integer(n));
  if (st == CF_OK) st = cf_json_set(j, "beam", json_integer(a->o.beam));
  if (st == CF_OK) st = cf_json_set(j, "lenpen", cf_json_num(a->o.len_penalty, NULL));
  if (st == CF_OK) st = cf_json_set(j, "seconds", cf_json_num(secs, "%.3f"));
  if (st == CF_OK) st = cf_json_set(j, "sentences_per_s", cf_json_num(secs > 0 ? n / secs : 0, "%.2f"));
  if (st == CF_OK) st = cf_json_set(j, "checkpoint", cf_json_str(t->ckpt));
  if (st == CF_OK) st = cf_json_set(j, "step", json_integer(t->ts.step));
  if (st == CF_OK) st = cf_json_write(j, stdout, "the BLEU report");
  else json_decref(j);
  return st == CF_OK ? 0 : 1;
}

int cmd_eval_bleu(int argc, char **argv) {
  decode_args a = {.o = {.beam = 5, .len_penalty = 1.0}, .split = "test"};
  int rc = parse_args("eval-bleu", bleu_usage, argc, argv, &a);
  if (rc) return rc < 0 ? 0 : rc;
  trained t = {0};
  if ((rc = trained_open("eval-bleu", a.run, a.device, &t))) {
    trained_free(&t);
    return rc;
  }
  const cf_config *c = &t.cfg;
  const char *prefix = !strcmp(a.split, "test") ? c->data.test : c->data.valid;
  char src[1100], ref[1100];
  snprintf(src, sizeof src, "%s.%s", prefix, c->data.source_lang);
  snprintf(ref, sizeof ref, "%s.%s", prefix, c->data.target_lang);
  long n = prefix[0] ? count_lines(src) : -1;
  if (!prefix[0])
    fprintf(stderr, "clformer eval-bleu: %s's config has no data.%s (the %s files' prefix): set it in the run's "
            "config%s\n", t.ckpt, a.split, a.split, !strcmp(a.split, "test") ? ", or score --split valid" : "");
  else if (n < 0)
    fprintf(stderr, "clformer eval-bleu: cannot read %s (data.%s of %s): %s\n", src, a.split, t.ckpt, strerror(errno));
  if (n < 0) {
    trained_free(&t);
    return 2;
  }
  if (a.limit && n > a.limit) n = a.limit;
  if (cf_verbosity() >= 1)
    fprintf(stderr, "clformer eval-bleu: translating %ld sentences of %s (step %d, beam %d)\n", n, src, t.ts.step,
            a.o.beam);
  cf_bleu_score s;
  double t0 = cf_now();
  cf_status st = cf_translate_bleu(t.m, t.bpe, src, ref, (size_t)a.limit, &a.o, &s);
  double secs = cf_now() - t0;
  cf_bleu *b = NULL;  /* the signature of cf_translate_bleu's scorer: one reference, 13a */
  if (st == CF_OK) st = cf_bleu_create(CF_BLEU_13A, &b);
  if (st == CF_OK) {
    char line[256], sig[128];
    cf_bleu_signature(b, CF_BLEU_SMOOTH_EXP, sig, sizeof sig);
    if (a.json) rc = print_json(&a, &t, &s, sig, n, secs);
    else {
      cf_bleu_format(&s, line, sizeof line);
      printf("BLEU|%s%s\n", sig, line + strlen("BLEU"));
      printf("%s: %ld sentences, beam %d, lenpen %g, in %.2f s (%.1f a second)\n", a.split, n, a.o.beam,
             a.o.len_penalty, secs, secs > 0 ? n / secs : 0.0);
    }
  } else rc = cf_exit_code(st);
  cf_bleu_free(b);
  trained_free(&t);
  return rc;
}
