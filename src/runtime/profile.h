/* Whether a device's profiling events can be believed. Some implementations accept
 * CL_QUEUE_PROFILING_ENABLE and answer every clGetEventProfilingInfo, yet measure nothing: Mesa's
 * rusticl 22.3 gives every kernel's event an end a nanosecond or two after its start, so a step of
 * 1.7 s read as 0.0001 ms of device time. Callers that report event times check them here first. */
#ifndef CLFORMER_RUNTIME_PROFILE_H
#define CLFORMER_RUNTIME_PROFILE_H

#include "clformer/runtime.h"

/* NULL when the collected entries (n of them, over wall_ms of wall-clock time that they were
 * enqueued and finished in) look like measurements; else why not, for a report ("61 profiling events
 * read 0.0001 ms in all (1.6 ns each) over 1693.27 ms of wall-clock time"), in buf: events that read
 * 0 or average under 100 ns, or add up to more than the wall time allows. Entries with no calls are ignored; with no
 * entries at all there is nothing to judge (NULL). */
const char *cf_profile_implausible(const cf_profile_entry *ops, int n, double wall_ms, char *buf, size_t len);

#endif
