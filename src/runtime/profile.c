/* Plausibility of profiling events (profile.h). */
#include <stdio.h>
#include "runtime/profile.h"

/* Below this much wall-clock time, zero device time is believable (a clock too coarse for it). */
#define PROFILE_MIN_WALL_MS 0.05
/* No kernel runs in less device time than this on any implementation (a launch alone costs
 * microseconds), so events that average less measure nothing: rusticl 22.3's read 1-2 ns each. */
#define PROFILE_MIN_EVENT_MS 1e-4
/* Device time may pass the wall clock by this factor (plus a millisecond) before it is not believed:
 * an in-order queue runs one kernel at a time, so its events' sum fits within the wall time. */
#define PROFILE_MAX_OVER_WALL 1.5

const char *cf_profile_implausible(const cf_profile_entry *ops, int n, double wall_ms, char *buf, size_t len) {
  double total = 0;
  int events = 0;
  for (int i = 0; i < n; i++) {
    if (ops[i].calls <= 0) continue;
    events += ops[i].calls;
    total += ops[i].ms;
  }
  if (events == 0) return NULL;
  if (!(total >= 0)) snprintf(buf, len, "the profiling events read negative or undefined times");
  else if (total == 0 && wall_ms > PROFILE_MIN_WALL_MS)
    snprintf(buf, len, "every one of %d profiling events read 0 ms over %.2f ms of wall-clock time", events, wall_ms);
  else if (total < PROFILE_MIN_EVENT_MS * events && wall_ms > PROFILE_MIN_WALL_MS)
    snprintf(buf, len, "%d profiling events read %.2g ms in all (%.1f ns each) over %.2f ms of wall-clock time", events,
             total, total / events * 1e6, wall_ms);
  else if (wall_ms > 0 && total > PROFILE_MAX_OVER_WALL * wall_ms + 1.0)
    snprintf(buf, len, "the profiling events add up to %.2f ms, more than the %.2f ms of wall-clock time they ran in",
             total, wall_ms);
  else return NULL;
  return buf;
}
