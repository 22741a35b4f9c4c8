/* Inside the model layer: whether a model's buffers fit the device, asked before any is allocated. */
#ifndef CLFORMER_MODEL_MEMORY_H
#define CLFORMER_MODEL_MEMORY_H

#include <stddef.h>
#include "clformer/runtime.h"

typedef struct cf_model_buffer {
  const char *name;
  size_t bytes;
} cf_model_buffer;

/* CF_OK when every buffer fits the device's largest allocation and all together its memory; else
 * CF_ERR_CONFIG with the sizes asked for and available (batch B x T tokens named, as what to lower). */
cf_status cf_model_check_memory(const cf_context *ctx, const cf_model_buffer *bufs, int n, int B, int T);

#endif
