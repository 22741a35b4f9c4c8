/* `clformer check CONFIG`: validate a config (with --set overrides) and print it fully resolved; a
 * comparison or gradnorm file is checked whole, as `compare` and `gradnorm` read it. */
#include <stdlib.h>
#include <string.h>
#include "app/cli.h"
#include "clformer/config.h"
#include "clformer/data.h"
#include "clformer/experiments.h"
#include "clformer/model.h"
#include "config/config_yaml.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer check CONFIG [--set KEY=VALUE ...] [--device SPEC]\n"
    "       clformer check --keys\n"
    "\n"
    "Validates a training config and prints it fully resolved (every key, defaults filled in), as YAML\n"
    "that `train` accepts; opens its data as `train` does (so a config check passes is one train starts\n"
    "with). A comparison file (variants:) or a gradnorm file (depths:) is checked as `compare` or\n"
    "`gradnorm` reads it: every variant or depth resolved and validated, its data opened; --set then\n"
    "overrides the base. Errors name file:line:column and the key; the exit code is then 2.\n"
    "\n"
    "Then prints the memory plan as YAML comments: the device memory the run needs (parameters, gradients,\n"
    "optimizer state, activations per micro-batch, workspaces); with --device, against that device's\n"
    "memory and largest allocation, with the largest batch_size that fits, and a run that does not fit\n"
    "is refused (exit code 2) as train would refuse it. A comparison's plan is its base config's.\n"
    "\n"
    "  --set KEY=VALUE   override a key, e.g. --set model.norm=post (repeatable)\n"
    "  --device SPEC     compare the plan with this OpenCL device (auto, P:D, gpu, cpu or part of a name)\n"
    "  --keys            print every key with its default and meaning (Markdown)\n";

int cf_cli_load_config(cf_config *c, const char *path, char **sets, int nsets) {
  cf_config_defaults(c);
  if (path && cf_config_load(c, path) != CF_OK) return 2;
  for (int i = 0; i < nsets; i++)
    if (cf_config_set(c, sets[i]) != CF_OK) return 2;
  if (cf_config_validate(c) != CF_OK) return 2;
  return 0;
}

/* A comparison or gradnorm file's `base:` section, when path is such a file: 1 if it was applied,
 * 0 if the file has no base (an ordinary config), -1 on error (reported). */
static int load_base_section(cf_config *c, const char *path) {
  yaml_document_t doc;
  if (cf_yaml_load_file(path, &doc) != CF_OK) return -1;
  yaml_node_t *root = yaml_document_get_root_node(&doc), *base = NULL;
  if (root && root->type == YAML_MAPPING_NODE)
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
      yaml_node_t *k = yaml_document_get_node(&doc, p->key);
      if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, "base"))
        base = yaml_document_get_node(&doc, p->value);
    }
  int rc = 0;
  if (base) {
    rc = cf_config_apply_node(c, &doc, base, path) == CF_OK && cf_config_resolve_paths(c, path) == CF_OK ? 1 : -1;
    if (rc == 1) cf_log(1, "note: %s is an experiment file: using its base config (add a variant's keys with --set)", path);
  }
  yaml_document_delete(&doc);
  return rc;
}

int cf_cli_load_model_config(cf_config *c, const char *path, char **sets, int nsets) {
  cf_config_defaults(c);
  int from_base = path ? load_base_section(c, path) : 0;
  if (from_base < 0) return 2;
  if (path && !from_base && cf_config_load(c, path) != CF_OK) return 2;
  if (!c->data.train[0]) snprintf(c->data.train, sizeof c->data.train, "(none: only the model's shapes are used)");
  for (int i = 0; i < nsets; i++)
    if (cf_config_set(c, sets[i]) != CF_OK) return 2;
  return cf_config_validate(c) != CF_OK ? 2 : 0;
}

/* The device a spec selects, into *out. 0, or 2 with the message (no OpenCL, no such device). */
static int find_device(const char *spec, cf_device_info *out) {
  cf_device_info *list;
  int count, chosen;
  cf_status st = cf_device_list(&list, &count);
  if (st != CF_OK) return cf_exit_code(st);
  st = cf_device_select(list, count, spec, &chosen);  /* a failure lists the devices */
  if (st == CF_OK) *out = list[chosen];
  free(list);
  return st == CF_OK ? 0 : 2;
}

/* The memory plan of c's model, as YAML comments, against the device when one is given: 0, or 2
 * when it does not fit (refused as train refuses it). */
static int print_plan(const cf_config *c, const char *device) {
  cf_device_info dev;
  if (device && find_device(device, &dev)) return 2;
  cf_memory_plan plan;
  int B, T;
  cf_model_shape(c, &B, &T);
  if (cf_model_plan(&c->model, &c->optim, B, T, device ? &dev : NULL, &plan) != CF_OK ||
      cf_model_fits(&plan) != CF_OK)
    return 2;
  cf_model_plan_write(&plan, "# ", stdout);
  if (c->train.accumulate > 1)
    printf("# train.accumulate %d: %d sequences per optimizer step\n", c->train.accumulate,
           c->train.accumulate * c->data.batch_size);
  return 0;
}

int cmd_check(int argc, char **argv) {
  const char *path = NULL, *device = NULL;
  char *sets[256];
  int nsets = 0;
  for (int i = 1; i < argc; i++) {
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    if (cf_arg_is(argv[i], "--keys", NULL)) { cf_config_print_keys(stdout); return 0; }
    if (cf_arg_set(argc, argv, &i, sets, &nsets, 256)) continue;
    else if (cf_arg_is(argv[i], "--device", "-d") && i + 1 < argc) device = argv[++i];
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else return cf_cli_unexpected("check", argc, argv, i, usage);
  }
  if (!path) { fprintf(stderr, "clformer check: a CONFIG file is required\n\n%s", usage); return 2; }
  cf_file_kind kind;
  if (cf_config_file_kind(path, &kind) != CF_OK) return 2;
  cf_config c;
  if (kind == CF_FILE_COMPARISON) {
    int rc = cf_exit_code(cf_compare_check(path, sets, nsets, stdout));
    int v = cf_verbosity();
    cf_set_verbosity(-1);  /* its base passed above; no note that it is an experiment file */
    if (rc == 0) rc = cf_cli_load_model_config(&c, path, sets, nsets);
    cf_set_verbosity(v);
    return rc ? rc : print_plan(&c, device);
  }
  if (kind == CF_FILE_GRADNORM) return cf_exit_code(cf_gradnorm_check(path, sets, nsets, stdout));
  if (kind == CF_FILE_EXPERIMENT) {
    fprintf(stderr, "clformer: error: %s: an experiment file (it has base:) needs variants: (a comparison, run with "
                    "`clformer compare`) or depths: (run with `clformer gradnorm`)\n", path);
    return 2;
  }
  int rc = cf_cli_load_config(&c, path, sets, nsets);
  if (rc) return rc;
  /* the data as `train` opens it, so that a config `check` passes is one `train` starts with */
  if (cf_data_check(&c) != CF_OK) return 2;
  printf("# %s: valid\n", path);
  cf_config_write(&c, stdout);
  return print_plan(&c, device);
}
