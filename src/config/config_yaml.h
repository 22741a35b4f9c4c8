/* Applying a libyaml mapping node to a config: shared by config files and the experiment files
 * that embed a config (a comparison's base, its variants' overrides). */
#ifndef CLFORMER_CONFIG_YAML_H
#define CLFORMER_CONFIG_YAML_H

#include <yaml.h>
#include "clformer/config.h"

/* Keys of the mapping, nested ("model: {norm: pre}") or dotted ("model.norm: pre"). */
cf_status cf_config_apply_node(cf_config *c, yaml_document_t *doc, yaml_node_t *mapping, const char *origin);

/* Read and parse a whole YAML file into doc (the caller deletes it with yaml_document_delete):
 * a regular file of at most CF_CONFIG_MAX_BYTES; anything else, or a malformed file, is
 * CF_ERR_CONFIG with the reason (file:line:column for YAML errors). */
cf_status cf_yaml_load_file(const char *path, yaml_document_t *doc);

/* What a loaded file is, by its top-level keys (cf_config_file_kind); *first_key (when not NULL):
 * its first experiment key, NULL for a config. */
cf_file_kind cf_yaml_file_kind(yaml_document_t *doc, yaml_node_t **first_key);

#endif
