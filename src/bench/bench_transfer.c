/* `bench step`'s host transfers, both ways in one run: by copies, and by maps (zero-copy, what
 * cf_context_zero_copy picks where the device shares host memory).
 *
 * Per step the host sends the batch's ids (the language model's token ids and targets, 2 x B T
 * ints; an encoder-decoder's source ids and lengths, target inputs and outputs). Each way runs `steps` profiled
 * steps; reported are the transfer commands' device time per step (their profiling events:
 * clEnqueueWriteBuffer when copying; map and unmap on the transfer queue when mapping) and the
 * step's wall-clock time.
 *
 * A checkpoint reads out the parameters and the optimizer's two moments (3 x P floats): each way
 * five times, the wall-clock time from asking to having summed every float (the checkpoint writer
 * reads them all, so a map's deferred cost, page faults or a driver's copy, is counted). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "clformer/model.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"
#include "bench/bench_internal.h"

#define MAX_OPS 128
#define READOUTS 5

typedef struct upload_figures {
  double device_ms, host_ms, step_ms, commands;  /* per step */
  const char *unavailable;              /* why the events are not believed, or NULL */
  char why[160];
} upload_figures;

/* `steps` profiled steps the given way: the upload commands' device time, the steps' wall time. */
static cf_status upload_way(cf_context *ctx, cf_model *m, int mapped, cf_bench_fn step, void *arg, int steps, upload_figures *u) {
  cf_profile_entry ops[MAX_OPS];
  memset(u, 0, sizeof *u);
  cf_context_set_zero_copy(ctx, mapped);
  CF_TRY(step(arg));  /* the switch waits for the device: not in the figures */
  CF_TRY(cf_context_finish(ctx));
  cf_profile_start(ctx);
  double t0 = cf_now(), host0 = cf_model_upload_seconds(m);
  cf_status st = CF_OK;
  for (int i = 0; i < steps && st == CF_OK; i++)
    if ((st = step(arg)) == CF_OK) st = cf_context_finish(ctx);
  double wall = cf_now() - t0;
  u->host_ms = (cf_model_upload_seconds(m) - host0) / steps * 1e3;
  int n = cf_profile_collect(ctx, ops, MAX_OPS);
  CF_TRY(st);
  u->step_ms = wall / steps * 1e3;
  u->unavailable = n ? cf_profile_implausible(ops, n, wall * 1e3, u->why, sizeof u->why)
                     : "the context was created without profiling";
  for (int i = 0; i < n; i++)
    if (!strncmp(ops[i].name, "upload_", 7)) {
      u->device_ms += ops[i].ms / steps;
      u->commands += (double)ops[i].calls / steps;
    }
  return CF_OK;
}

/* Seconds to have the checkpoint's floats on the host and summed, the given way. */
/* Where the read-out's sums go, so that the compiler keeps the reads. */
static volatile double readout_sink;

static cf_status readout_once(cf_model *m, int mapped, float *host, double *sec) {
  static const int flats[3] = {0, 2, 3};
  size_t P = cf_model_flat_floats(m);
  double t0 = cf_now(), s = 0;
  for (int k = 0; k < 3; k++) {
    const float *p = host;
    if (mapped) CF_TRY(cf_model_map(m, flats[k], &p));
    else CF_TRY(cf_model_read(m, flats[k], host));
    for (size_t i = 0; p && i < P; i++) s += p[i];
    if (mapped) CF_TRY(cf_model_unmap(m, flats[k], p));
  }
  CF_TRY(cf_context_finish(cf_model_context(m)));
  *sec = cf_now() - t0;
  readout_sink = s;
  return CF_OK;
}

static cf_status readout_way(cf_model *m, int mapped, cf_bench_stats *ms) {
  size_t P = cf_model_flat_floats(m);
  float *host = malloc((P ? P : 1) * sizeof *host);
  double v[READOUTS];
  if (!host) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_status st = CF_OK;
  for (int i = 0; i < READOUTS && st == CF_OK; i++) st = readout_once(m, mapped, host, &v[i]);
  free(host);
  CF_TRY(st);
  for (int i = 0; i < READOUTS; i++) v[i] *= 1e3;
  *ms = cf_bench_stats_of(v, READOUTS);
  return CF_OK;
}

static void print_upload(FILE *out, const char *way, const upload_figures *u) {
  fprintf(out, "    %-17s host %.4f ms, ", way, u->host_ms);
  if (u->unavailable) fprintf(out, "device time unavailable (%s)", u->unavailable);
  else fprintf(out, "device %.4f ms in %.0f commands", u->device_ms, u->commands);
  fprintf(out, "; step %.2f ms\n", u->step_ms);
}

static json_t *upload_json(const upload_figures *u) {
  if (u->unavailable)
    return json_pack("{s:o, s:n, s:n, s:o, s:s}", "host_ms", cf_json_num(u->host_ms, "%.5f"), "device_ms", "commands",
                     "step_ms", cf_json_num(u->step_ms, "%.4f"), "unavailable", u->unavailable);
  return json_pack("{s:o, s:o, s:o, s:o, s:n}", "host_ms", cf_json_num(u->host_ms, "%.5f"), "device_ms",
                   cf_json_num(u->device_ms, "%.5f"), "commands",
                   cf_json_num(u->commands, "%.2f"), "step_ms", cf_json_num(u->step_ms, "%.4f"), "unavailable");
}

cf_status cf_bench_transfers(cf_context *ctx, cf_model *m, cf_bench_fn step, void *arg, int steps, const char *what,
                             double upload_kib, FILE *out, json_t *report) {
  int in_force = cf_context_zero_copy(ctx);
  upload_figures up[2];  /* [0] copies, [1] maps */
  cf_bench_stats ro[2];
  cf_status st = CF_OK;
  for (int w = 0; w < 2 && st == CF_OK; w++) st = upload_way(ctx, m, w, step, arg, steps, &up[w]);
  for (int w = 0; w < 2 && st == CF_OK; w++) st = readout_way(m, w, &ro[w]);
  cf_context_set_zero_copy(ctx, in_force);
  CF_TRY(st);
  double state_mib = (double)cf_model_flat_floats(m) * 4 / 1048576;
  fprintf(out, "\nhost transfers, both ways (in force: %s; the device %s host memory):\n",
          in_force ? "maps" : "copies", cf_context_device(ctx)->host_unified ? "shares" : "does not share");
  fprintf(out, "  per step, %s, mean of %d profiled steps:\n", what, steps);
  print_upload(out, "maps (zero-copy)", &up[1]);
  print_upload(out, "copies", &up[0]);
  fprintf(out, "  checkpoint read-out, parameters and optimizer moments (3 x %.1f MiB), median of %d:\n", state_mib,
          READOUTS);
  fprintf(out, "    %-17s %.2f ms [%.2f, %.2f]\n", "maps (zero-copy)", ro[1].median, ro[1].min, ro[1].max);
  fprintf(out, "    %-17s %.2f ms [%.2f, %.2f]\n", "copies", ro[0].median, ro[0].min, ro[0].max);
  if (!report) return CF_OK;
  return cf_json_set(report, "transfers",
                     json_pack("{s:s, s:b, s:o, s:{s:o, s:o}, s:o, s:{s:o, s:o}}", "in_force", in_force ? "map" : "copy",
                               "host_unified", cf_context_device(ctx)->host_unified, "upload_kib",
                               cf_json_num(upload_kib, "%.2f"), "upload", "map", upload_json(&up[1]), "copy",
                               upload_json(&up[0]), "checkpoint_mib", cf_json_num(3 * state_mib, "%.2f"),
                               "checkpoint_readout_ms", "map", cf_bench_stats_json(ro[1], 1, "%.3f"), "copy",
                               cf_bench_stats_json(ro[0], 1, "%.3f")));
}
