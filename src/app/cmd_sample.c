/* `clformer sample RUN_DIR`: generate text from a run's checkpoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "app/cli.h"
#include "clformer/base.h"
#include "clformer/train.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer sample RUN_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                        [--seed S] [--device SPEC]\n"
    "\n"
    "Generates N bytes (default 200) after the prompt from RUN_DIR/checkpoint.safetensors.\n"
    "  --temperature T   divide logits by T (default 0.8; 0 = greedy)\n"
    "  --top-k K         sample among the K most likely bytes (default 0 = all)\n"
    "  --top-p P         nucleus sampling: the smallest set with probability >= P (default 1)\n"
    "  --seed S          sampling seed (default 1)\n";

typedef struct { float p; int v; } cand;
static int by_p(const void *a, const void *b) {
  float x = ((const cand *)a)->p, y = ((const cand *)b)->p;
  return x < y ? 1 : x > y ? -1 : 0;
}

int cmd_sample(int argc, char **argv) {
  const char *dir = NULL, *prompt = "", *device = NULL;
  int tokens = 200, top_k = 0;
  double temperature = 0.8, top_p = 1.0;
  unsigned long long seed = 1;
  long l;
  const char *bad_opt = NULL, *bad_val = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cf_arg_is(a, "--help", "-h")) { fputs(usage, stdout); return 0; }
    else if (cf_arg_is(a, "--prompt", "-p") && v) prompt = argv[++i];
    else if (cf_arg_is(a, "--tokens", "-n") && v) { if (!cf_parse_long(argv[++i], 0, 100000000, &l)) { bad_opt = a; bad_val = argv[i]; break; } tokens = (int)l; }
    else if (cf_arg_is(a, "--temperature", "-t") && v) { if (!cf_parse_double(argv[++i], 0, 1e6, &temperature)) { bad_opt = a; bad_val = argv[i]; break; } }
    else if (cf_arg_is(a, "--top-k", NULL) && v) { if (!cf_parse_long(argv[++i], 0, 1000000, &l)) { bad_opt = a; bad_val = argv[i]; break; } top_k = (int)l; }
    else if (cf_arg_is(a, "--top-p", NULL) && v) { if (!cf_parse_double(argv[++i], 1e-9, 1, &top_p)) { bad_opt = a; bad_val = argv[i]; break; } }
    else if (cf_arg_is(a, "--seed", NULL) && v) { if (!cf_parse_long(argv[++i], 0, 2147483647, &l)) { bad_opt = a; bad_val = argv[i]; break; } seed = (unsigned long long)l; }
    else if (cf_arg_is(a, "--device", "-d") && v) device = argv[++i];
    else if (a[0] != '-' && !dir) dir = a;
    else return cf_cli_unexpected("sample", argc, argv, i, usage);
  }
  if (bad_opt) {
    fprintf(stderr, "clformer sample: %s '%s' is not valid: --tokens, --top-k and --seed take non-negative integers, "
            "--temperature a number >= 0, --top-p a number in (0, 1]\n", bad_opt, bad_val);
    return 2;
  }
  if (!dir) { fprintf(stderr, "clformer sample: RUN_DIR is required\n\n%s", usage); return 2; }
  if (tokens < 0 || temperature < 0 || top_k < 0 || !(top_p > 0 && top_p <= 1)) {
    fprintf(stderr, "clformer sample: --tokens, --temperature and --top-k must be >= 0 and --top-p in (0, 1]\n");
    return 2;
  }
  char cfg_path[2100], ckpt[2100];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
  if (access(ckpt, R_OK) != 0) {
    fprintf(stderr, "clformer sample: %s has no checkpoint.safetensors (a run that diverged before its first checkpoint, "
            "or not a run directory)\n", dir);
    return 2;
  }
  cf_config cfg;
  int rc = cf_cli_load_config(&cfg, cfg_path, NULL, 0);
  if (rc) return rc;
  cf_context_options o = {.device_spec = cf_device_spec_resolve(device, cfg.device)};
  cf_context *ctx;
  cf_status st = cf_context_create(&o, &ctx);
  if (st != CF_OK) return cf_exit_code(st);
  int T = cfg.data.seq_len, V = CF_BYTE_VOCAB;
  cf_model *m = NULL;
  cf_train_state ts;
  int *window = calloc((size_t)T, sizeof *window);
  float *logits = malloc((size_t)V * sizeof *logits);
  cand *c = malloc((size_t)V * sizeof *c);
  size_t plen = strlen(prompt);
  int *text = malloc((plen + (size_t)tokens + 1) * sizeof *text);
  if (!window || !logits || !c || !text) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  if ((st = cf_model_create(ctx, &cfg, 1, T, &m)) != CF_OK) goto done;
  if ((st = cf_checkpoint_load(m, ckpt, &ts, NULL)) != CF_OK) goto done;
  size_t n = cf_tokenize(prompt, text, plen);
  if (n == 0) text[n++] = '\n';  /* an empty prompt starts a new line */
  fputs(prompt, stdout);
  fflush(stdout);
  for (int k = 0; k < tokens; k++) {
    size_t start = n > (size_t)T ? n - (size_t)T : 0, len = n - start;
    memset(window, 0, (size_t)T * sizeof *window);
    for (size_t i = 0; i < len; i++) window[i] = text[start + i];
    if ((st = cf_model_forward(m, window, NULL, 0, 0)) != CF_OK) goto done;
    if ((st = cf_model_logits(m, 0, (int)len - 1, logits)) != CF_OK) goto done;
    int next = 0;
    if (temperature == 0) {
      for (int v = 1; v < V; v++) if (logits[v] > logits[next]) next = v;
    } else {
      float mx = -INFINITY;
      for (int v = 0; v < V; v++) mx = fmaxf(mx, logits[v]);
      double sum = 0;
      for (int v = 0; v < V; v++) { c[v].v = v; c[v].p = expf((float)((logits[v] - mx) / temperature)); sum += c[v].p; }
      qsort(c, (size_t)V, sizeof *c, by_p);
      int keep = top_k > 0 && top_k < V ? top_k : V;
      double cum = 0, kept = 0;
      for (int i = 0; i < keep; i++) {
        cum += c[i].p / sum;
        if (cum >= top_p) { keep = i + 1; break; }
      }
      for (int i = 0; i < keep; i++) kept += c[i].p;
      double u = cf_random_uniform((uint32_t)seed, (uint32_t)(seed >> 32), 0x5a3e, (uint32_t)k) * kept, run = 0;
      next = c[keep - 1].v;
      for (int i = 0; i < keep; i++) { run += c[i].p; if (u < run) { next = c[i].v; break; } }
    }
    text[n++] = next;
    putchar(next);
    fflush(stdout);
  }
  putchar('\n');
done:
  free(window); free(logits); free(c); free(text);
  cf_model_free(m);
  cf_context_free(ctx);
  return cf_exit_code(st);
}
