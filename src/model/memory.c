/* The memory plan: every device buffer a model needs, counted from the same layout cf_model_create
 * allocates, before anything is allocated; compared with the device's memory and its largest
 * allocation, and the largest batch that would fit. A run the device cannot hold is refused with
 * these numbers rather than failing in the driver mid-run. */
#include <string.h>
#include "model/model_internal.h"
#include "runtime/runtime.h"

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

/* The GEMM layer's scratch, estimated from the products a step issues: our kernels pack op(B) into
 * 64-column panels (and a transposed A), one product at a time into one buffer grown in whole MiB;
 * CLBlast's padded copies are of the same order. The largest such operand, rounded up to a MiB. */
static size_t gemm_scratch_estimate(const cf_model *m) {
  cf_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.model = m->mc;
  cfg.data.batch_size = m->B;
  cfg.data.seq_len = m->T;
  cfg.data.max_tokens = m->B * m->T;  /* an encoder-decoder's rows (cf_model_shape) */
  cfg.data.max_len = m->T;
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  size_t most = 0;
  for (int i = 0, n = cf_model_gemm_shapes(&cfg, sh); i < n; i++) {
    size_t b = sh[i].tb || sh[i].N % 64 ? cf_round_up(sh[i].N, 64) * sh[i].K : 0;
    size_t a = sh[i].ta ? cf_round_up(sh[i].M, 64) * sh[i].K : 0;
    size_t bytes = (a + b) * sh[i].batch * sizeof(float);
    if (bytes > most) most = bytes;
  }
  return most ? cf_round_up(most, (size_t)1 << 20) : 0;
}

static void consider(cf_memory_plan *p, const char *name, size_t bytes) {
  p->buffers++;
  p->total += bytes;
  if (bytes > p->largest) {
    p->largest = bytes;
    snprintf(p->largest_name, sizeof p->largest_name, "%s", name);
  }
}

static void compare_with(cf_memory_plan *p, const cf_device_info *dev) {
  p->fits = 1;
  if (!dev) return;
  p->has_device = 1;
  snprintf(p->device, sizeof p->device, "%s", dev->name);
  p->global_mem = dev->global_mem;
  p->max_alloc = dev->max_alloc;
  p->fits = p->total <= dev->global_mem && p->largest <= dev->max_alloc;
}

void cf_model_plan_of(const cf_model *m, const cf_device_info *dev, cf_memory_plan *p) {
  memset(p, 0, sizeof *p);
  p->batch = m->B;
  p->seq_len = m->T;
  p->seq2seq = m->seq2seq;
  for (int i = 0; i < m->nviews; i++) p->params += m->views[i].numel;
  cf_model_flat_bytes f = cf_model_flat_sizes(m);
  p->parameters = f.params;
  p->gradients = f.grads;
  p->optimizer = f.m1 + f.m2;
  p->inputs = f.tokens + f.targets + f.sources + f.source_lens;
  p->activations = m->acts.total * 4;
  if (m->mc.attention == CF_ATTENTION_MATERIALIZED)  /* fused attention keeps no probabilities */
    p->attention_probs = (size_t)m->dec.L * cf_round_up((size_t)m->B * m->NH * m->T * m->T, 16) * 4;
  p->attention_workspace = m->scratch.seg[0].floats * 4;
  p->gemm_scratch = gemm_scratch_estimate(m);
  p->workspace = m->scratch.total * 4 + p->gemm_scratch;
  const char *names[] = {"parameters", "gradients", "optimizer state", "optimizer state", "token ids", "targets",
                         "source ids", "source lengths"};
  const size_t flat[] = {f.params, f.grads, f.m1, f.m2, f.tokens, f.targets, f.sources, f.source_lens};
  for (int i = 0; i < 8; i++)
    if (flat[i]) consider(p, names[i], flat[i]);
  const cf_arena *arenas[] = {&m->acts, &m->scratch};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < arenas[k]->n; i++) consider(p, arenas[k]->seg[i].name, arenas[k]->seg[i].floats * 4);
  if (p->gemm_scratch) consider(p, "GEMM scratch", p->gemm_scratch);
  compare_with(p, dev);
}

/* The plan at batch B, laid out on a model of its own. */
static cf_status plan_at(const cf_model_config *mc, const cf_optim_config *oc, int B, int T, const cf_device_info *dev,
                         cf_memory_plan *plan) {
  cf_model m;
  memset(&m, 0, sizeof m);
  cf_status st = cf_model_lay_out(&m, mc, oc, B, T);
  if (st == CF_OK) cf_model_plan_of(&m, dev, plan);
  cf_model_lay_out_free(&m);
  return st;
}

/* The largest B in [1, 65536] whose plan fits dev (sizes grow with B), 0 if none. */
static cf_status largest_batch(const cf_model_config *mc, const cf_optim_config *oc, int T, const cf_device_info *dev,
                               int *out) {
  cf_memory_plan p;
  int lo = 0, hi = 65536;  /* lo fits (0: vacuously), hi + 1 does not */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    CF_TRY(plan_at(mc, oc, mid, T, dev, &p));
    if (p.fits) lo = mid;
    else hi = mid - 1;
  }
  *out = lo;
  return CF_OK;
}

cf_status cf_model_plan(const cf_model_config *mc, const cf_optim_config *oc, int B, int T, const cf_device_info *dev,
                        cf_memory_plan *plan) {
  CF_TRY(plan_at(mc, oc, B, T, dev, plan));
  if (dev) CF_TRY(largest_batch(mc, oc, T, dev, &plan->max_batch));
  return CF_OK;
}

static void write_device(const cf_memory_plan *p, const char *pre, FILE *f) {
  if (!p->has_device) {
    fprintf(f, "%s  device          not compared (give --device SPEC)\n", pre);
    return;
  }
  fprintf(f, "%s  device          %9.1f MiB  global memory, at most %.1f MiB in one buffer (%s)\n", pre,
          mib(p->global_mem), mib(p->max_alloc), p->device);
  char most[64];
  if (p->max_batch) snprintf(most, sizeof most, "the largest batch_size that fits: %d", p->max_batch);
  else snprintf(most, sizeof most, "no batch_size fits");
  if (p->fits)
    fprintf(f, "%s  fits            %8.0f%%  of the memory; %s\n", pre,
            100.0 * (double)p->total / (double)p->global_mem, most);
  else
    fprintf(f, "%s  does not fit    %s; %s\n", pre,
            p->total > p->global_mem ? "the total is over the device's memory"
                                     : "the largest buffer is over the device's largest allocation", most);
}

void cf_model_plan_write(const cf_memory_plan *p, const char *pre, FILE *f) {
  fprintf(f, "%smemory plan, batch %d x %d tokens (one micro-batch), %.2fM parameters:\n", pre, p->batch, p->seq_len,
          (double)p->params / 1e6);
  fprintf(f, "%s  parameters      %9.1f MiB\n", pre, mib(p->parameters));
  fprintf(f, "%s  gradients       %9.1f MiB\n", pre, mib(p->gradients));
  fprintf(f, "%s  optimizer state %9.1f MiB\n", pre, mib(p->optimizer));
  fprintf(f, "%s  activations     %9.1f MiB  per micro-batch; attention probabilities %.1f MiB of it\n", pre,
          mib(p->activations), mib(p->attention_probs));
  fprintf(f, "%s  workspaces      %9.1f MiB  attention %.1f, backward %.1f, GEMM scratch %.1f (estimated)\n", pre,
          mib(p->workspace), mib(p->attention_workspace),
          mib(p->workspace - p->attention_workspace - p->gemm_scratch), mib(p->gemm_scratch));
  fprintf(f, "%s  token ids       %9.1f MiB  and targets\n", pre, mib(p->inputs));
  fprintf(f, "%s  total           %9.1f MiB  in %d buffers, the largest %.1f MiB (%s)\n", pre, mib(p->total), p->buffers,
          mib(p->largest), p->largest_name);
  write_device(p, pre, f);
}
