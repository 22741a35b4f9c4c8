/* The host's core-to-core round trip, for `bench` on CPU devices: how long data one core writes
 * takes to reach another and back. On the 2-core VM we develop on it was 120-170 ns at some times
 * and 430-500 ns at others (the two vCPUs sharing a last-level cache or not), and a GEMM that read
 * what another kernel had just written ran up to 1.4x slower in the second state; the figure lets a
 * reader tell such states apart in benchmark results. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include "base/base.h"
#include "bench/host_probe.h"

#ifdef __linux__

#define PROBE_TRIPS 20000
#define PROBE_ROUNDS 5
#define PROBE_LIMIT_S 0.5 /* a spinning partner that gets no CPU of its own: give up */

static _Alignas(64) atomic_int probe_flag;
static atomic_int probe_abort;
static int probe_cpu[2];

static int probe_pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* The partner answers every odd value v with v + 1. */
static void *probe_partner(void *arg) {
  (void)arg;
  if (probe_pin(probe_cpu[1])) {
    atomic_store(&probe_abort, 1);
    return NULL;
  }
  for (int i = 0; i < PROBE_ROUNDS * PROBE_TRIPS; i++) {
    int want = 2 * i + 1;
    while (atomic_load_explicit(&probe_flag, memory_order_acquire) != want)
      if (atomic_load_explicit(&probe_abort, memory_order_relaxed)) return NULL;
    atomic_store_explicit(&probe_flag, want + 1, memory_order_release);
  }
  return NULL;
}

double cf_host_core_round_trip_ns(int cpus[2]) {
  /* the first two CPUs this process may run on */
  cpu_set_t allowed;
  if (pthread_getaffinity_np(pthread_self(), sizeof allowed, &allowed)) return -1;
  int found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
    if (CPU_ISSET(c, &allowed)) probe_cpu[found++] = c;
  if (found < 2) return -1;
  atomic_store(&probe_flag, 0);
  atomic_store(&probe_abort, 0);
  pthread_t partner;
  if (pthread_create(&partner, NULL, probe_partner, NULL)) return -1;
  int ok = probe_pin(probe_cpu[0]) == 0;
  double v[PROBE_ROUNDS], t_begin = cf_now();
  for (int r = 0; r < PROBE_ROUNDS && ok; r++) {
    double t0 = cf_now();
    for (int j = 0; j < PROBE_TRIPS && ok; j++) {
      int v_out = 2 * (r * PROBE_TRIPS + j) + 1;
      atomic_store_explicit(&probe_flag, v_out, memory_order_release);
      for (long spin = 0; atomic_load_explicit(&probe_flag, memory_order_acquire) != v_out + 1; spin++)
        if ((spin & 0xffff) == 0 && (atomic_load(&probe_abort) || cf_now() - t_begin > PROBE_LIMIT_S)) {
          ok = 0;
          break;
        }
    }
    v[r] = (cf_now() - t0) / PROBE_TRIPS * 1e9;
  }
  atomic_store(&probe_abort, 1);
  pthread_join(partner, NULL);
  pthread_setaffinity_np(pthread_self(), sizeof allowed, &allowed);
  if (!ok) return -1;
  cpus[0] = probe_cpu[0];
  cpus[1] = probe_cpu[1];
  return cf_median(v, PROBE_ROUNDS);
}

#else

double cf_host_core_round_trip_ns(int cpus[2]) {
  (void)cpus;
  return -1;
}

#endif
