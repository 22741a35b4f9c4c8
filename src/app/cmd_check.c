/* `clformer check CONFIG`: validate a config (with --set overrides) and print it fully resolved. */
#include <errno.h>
#include <string.h>
#include "app/cli.h"
#include "clformer/config.h"
#include "config/config_yaml.h"
#include "runtime/runtime.h"

static const char *usage =
    "usage: clformer check CONFIG [--set KEY=VALUE ...]\n"
    "       clformer check --keys\n"
    "\n"
    "Validates a training config and prints it fully resolved (every key, defaults filled in), as YAML\n"
    "that `train` accepts; checks that its data files can be opened. Errors name file:line:column and\n"
    "the key; the exit code is then 2.\n"
    "\n"
    "  --set KEY=VALUE   override a key, e.g. --set model.norm=post (repeatable)\n"
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

int cmd_check(int argc, char **argv) {
  const char *path = NULL;
  char *sets[256];
  int nsets = 0;
  for (int i = 1; i < argc; i++) {
    if (cf_arg_is(argv[i], "--help", "-h")) { fputs(usage, stdout); return 0; }
    if (cf_arg_is(argv[i], "--keys", NULL)) { cf_config_print_keys(stdout); return 0; }
    if (cf_arg_set(argc, argv, &i, sets, &nsets, 256)) continue;
    else if (argv[i][0] != '-' && !path) path = argv[i];
    else return cf_cli_unexpected("check", argc, argv, i, usage);
  }
  if (!path) { fprintf(stderr, "clformer check: a CONFIG file is required\n\n%s", usage); return 2; }
  cf_config c;
  int rc = cf_cli_load_config(&c, path, sets, nsets);
  if (rc) return rc;
  /* the data files too, so that a config `check` passes is one `train` starts with */
  const char *files[2][2] = {{"data.train", c.data.train}, {"data.valid", c.data.valid}};
  for (int i = 0; i < 2; i++) {
    if (!files[i][1][0]) continue;
    FILE *f = fopen(files[i][1], "rb");
    if (!f) {
      fprintf(stderr, "clformer: error: %s: %s '%s': %s\n", path, files[i][0], files[i][1], strerror(errno));
      return 2;
    }
    fclose(f);
  }
  printf("# %s: valid\n", path);
  cf_config_write(&c, stdout);
  return 0;
}
