/* The host's core-to-core round trip, a figure `bench gemm` prints beside its timings. */
#ifndef CLFORMER_BENCH_HOST_PROBE_H
#define CLFORMER_BENCH_HOST_PROBE_H

/* src/bench/host_probe.c: the median round trip in ns of a value passed between two threads pinned to
 * the first two CPUs this process may use (about 0.1 s; cpus receives them), or -1 where there are
 * not two, pinning fails, the partner does not answer within 0.5 s, or the host is not Linux. */
double cf_host_core_round_trip_ns(int cpus[2]);

#endif
