/* Per-step uploads (model_internal.h's cf_upload): copied through host slots, or mapped in place.
 *
 * Mapping follows cf_context_zero_copy. A map on the compute queue would wait for the step in
 * flight (the queue is in order), and a blocking map is a round trip through the driver's
 * scheduler (about 0.2 ms on PoCL) where a non-blocking write returns at once. So each slot is
 * mapped ahead, on the context's transfer queue, without waiting: as soon as one slot is filled,
 * the other is mapped behind a marker on the compute queue, which every command reading it precedes
 * (a slot is read by the forward and the backward of its micro-batch, both enqueued before the next
 * upload). The compute queue waits for a filled slot's unmap by a barrier. */
#include <stdlib.h>
#include <string.h>
#include "model/model_internal.h"
#include "runtime/runtime.h"

cf_status cf_upload_create(cf_context *ctx, cf_upload *u, const char *name, size_t n) {
  memset(u, 0, sizeof *u);
  u->ctx = ctx;
  u->name = name;
  u->n = n;
  return cf_buffer_create_mappable(ctx, n * sizeof(int), &u->slot[0]);
}

/* Wait for an event and let it go (NULL: nothing to wait for). */
static cf_status settle(cl_event *ev) {
  if (!*ev) return CF_OK;
  cl_int err = clWaitForEvents(1, ev);
  CF_RELEASE(clReleaseEvent, *ev);
  *ev = NULL;
  if (err != CL_SUCCESS) return cf_report(err, "clWaitForEvents", __FILE__, __LINE__, "an upload's slot");
  return CF_OK;
}

/* Record ev under name in the context's profile too, when it is profiling. */
static void profile(cf_context *ctx, const char *name, cl_event ev) {
  cl_event *slot = cf_profile_slot(ctx, name);
  if (slot && clRetainEvent(ev) == CL_SUCCESS) *slot = ev;
}

static cf_status put_copied(cf_upload *u, const int *src) {
  int k = u->next;
  u->next ^= 1;
  u->current = 0;
  CF_TRY(settle(&u->written[k]));
  if (!u->host[k] && !(u->host[k] = malloc(u->n * sizeof(int)))) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  memcpy(u->host[k], src, u->n * sizeof(int));
  CF_CHECK(clEnqueueWriteBuffer(cf_context_queue(u->ctx), u->slot[0], CL_FALSE, 0, u->n * sizeof(int), u->host[k], 0,
                                NULL, &u->written[k]));
  profile(u->ctx, "upload_write", u->written[k]);
  return CF_OK;
}

/* Slot k mapped for writing once the compute queue is past everything enqueued so far; no wait. */
static cf_status map_ahead(cf_upload *u, int k) {
  cl_command_queue tq;
  CF_TRY(cf_context_transfer_queue(u->ctx, &tq));
  cl_event past;
  CF_CHECK(clEnqueueMarkerWithWaitList(cf_context_queue(u->ctx), 0, NULL, &past));
  /* the map waits for an event of the compute queue: it must be submitted, or a wait deadlocks */
  CF_CHECK(clFlush(cf_context_queue(u->ctx)));
  cl_int err;
  u->ahead[k] = clEnqueueMapBuffer(tq, u->slot[k], CL_FALSE, CL_MAP_WRITE_INVALIDATE_REGION, 0, u->n * sizeof(int), 1,
                                   &past, &u->mapped[k], &err);
  CF_RELEASE(clReleaseEvent, past);
  if (err != CL_SUCCESS) {
    u->ahead[k] = NULL;
    return cf_report(err, "clEnqueueMapBuffer", __FILE__, __LINE__, "%s, %zu bytes to write", u->name,
                     u->n * sizeof(int));
  }
  profile(u->ctx, "upload_map", u->mapped[k]);
  CF_CHECK(clFlush(tq));
  return CF_OK;
}

/* Slot k's map given back; the compute queue's next command waits for it when `order`. */
static cf_status unmap(cf_upload *u, int k, int order) {
  cl_command_queue tq;
  cl_event done;
  CF_TRY(cf_context_transfer_queue(u->ctx, &tq));
  CF_TRY(settle(&u->mapped[k]));
  CF_CHECK(clEnqueueUnmapMemObject(tq, u->slot[k], u->ahead[k], 0, NULL, &done));
  u->ahead[k] = NULL;
  profile(u->ctx, "upload_unmap", done);
  cl_int err = clFlush(tq);
  if (err == CL_SUCCESS && order) err = clEnqueueBarrierWithWaitList(cf_context_queue(u->ctx), 1, &done, NULL);
  CF_RELEASE(clReleaseEvent, done);
  if (err != CL_SUCCESS)
    return cf_report(err, order ? "clEnqueueBarrierWithWaitList" : "clFlush", __FILE__, __LINE__, "after %s", u->name);
  return CF_OK;
}

static cf_status put_mapped(cf_upload *u, const int *src) {
  int k = u->next;
  if (!u->slot[1]) CF_TRY(cf_buffer_create_mappable(u->ctx, u->n * sizeof(int), &u->slot[1]));
  if (!u->ahead[k]) CF_TRY(map_ahead(u, k));
  CF_TRY(settle(&u->mapped[k]));  /* usually long done */
  memcpy(u->ahead[k], src, u->n * sizeof(int));
  CF_TRY(unmap(u, k, 1));
  u->current = k;
  u->next ^= 1;
  return map_ahead(u, k ^ 1);  /* its readers are all enqueued: mapped as soon as they are done */
}

/* Nothing pending, no slot mapped: the way may change, or the slots go. */
static cf_status quiesce(cf_upload *u) {
  cf_status st = CF_OK;
  for (int k = 0; k < 2; k++) {
    cf_status s = u->ahead[k] ? unmap(u, k, 0) : CF_OK;
    if (st == CF_OK) st = s;
    s = settle(&u->written[k]);
    if (st == CF_OK) st = s;
  }
  cl_command_queue tq;
  if (u->ctx && u->slot[1] && cf_context_transfer_queue(u->ctx, &tq) == CF_OK) clFinish(tq);
  return st;
}

cf_status cf_upload_put(cf_upload *u, const int *host) {
  int mapping = cf_context_zero_copy(u->ctx);
  if (mapping != u->mapping) {  /* the device done with every slot before the way changes */
    CF_TRY(cf_context_finish(u->ctx));
    CF_TRY(quiesce(u));
    u->mapping = mapping;
    u->next = 0;
  }
  double t0 = cf_now();
  cf_status st = mapping ? put_mapped(u, host) : put_copied(u, host);
  u->host_s += cf_now() - t0;
  return st;
}

double cf_model_upload_seconds(const cf_model *m) { return m->tokens.host_s + m->targets.host_s; }

void cf_upload_free(cf_upload *u) {
  quiesce(u);
  for (int k = 0; k < 2; k++) {
    free(u->host[k]);
    cf_buffer_free(u->slot[k]);
  }
  memset(u, 0, sizeof *u);
}
