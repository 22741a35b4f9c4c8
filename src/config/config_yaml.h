/* Applying a libyaml mapping node to a config: shared by config files and the experiment files
 * that embed a config (a comparison's base, its variants' overrides). */
#ifndef CLFORMER_CONFIG_YAML_H
#define CLFORMER_CONFIG_YAML_H

#include <yaml.h>
#include "clformer/config.h"

/* Keys of the mapping, nested ("model: {norm: pre}") or dotted ("model.norm: pre"). */
cf_status cf_config_apply_node(cf_config *c, yaml_document_t *doc, yaml_node_t *mapping, const char *origin);

/* Read and parse a whole YAML file into doc (the caller deletes it with yaml_document_delete);
 * a malformed file is CF_ERR_CONFIG with file:line:column. */
cf_status cf_yaml_load_file(const char *path, yaml_document_t *doc);

#endif
