/* A model too large for the device is refused before its first allocation, with the numbers a
 * user needs to choose a smaller one (the driver's own CL_OUT_OF_RESOURCES, much later, says none). */
#include "model/memory.h"
#include "runtime/runtime.h"

static double mib(double bytes) { return bytes / 1048576.0; }

cf_status cf_model_check_memory(const cf_context *ctx, const cf_model_buffer *bufs, int n, int B, int T) {
  const cf_device_info *d = cf_context_device(ctx);
  double total = 0;
  int largest = 0;
  for (int i = 0; i < n; i++) {
    total += (double)bufs[i].bytes;
    if (bufs[i].bytes > bufs[largest].bytes) largest = i;
  }
  if ((double)bufs[largest].bytes <= (double)d->max_alloc && total <= (double)d->global_mem) return CF_OK;
  return CF_FAIL(CF_ERR_CONFIG,
                 "the model needs %.1f MiB of device memory at batch %d x %d tokens (its largest buffer, %s, %.1f MiB); "
                 "%s has %.1f MiB, at most %.1f MiB in one buffer: choose a smaller model, data.batch_size or "
                 "data.seq_len", mib(total), B, T, bufs[largest].name, mib((double)bufs[largest].bytes), d->name,
                 mib((double)d->global_mem), mib((double)d->max_alloc));
}
