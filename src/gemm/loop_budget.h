/* How many loop trips one work-item of a device may run. Mesa's llvmpipe (rusticl's CPU device)
 * counts the trips of all of an invocation's loops together and, past 65535 (gallivm's
 * LP_MAX_TGSI_LOOP_ITERATIONS), ends every loop at its next test, silently: a kernel whose item
 * loops longer computes wrong numbers. An invocation is up to 8 work-items run as SIMD lanes (even
 * work-groups of one item each, measured: an item's loop of 40000 stopped at 25534 because its
 * neighbour had run 40000 in the other branch of an if), so lanes that diverge share the budget. Our GEMM kernels give an item a lot of work, so the host
 * asks the device (a probe kernel, once per context) and splits the work to stay under what it
 * shows (gemm.c). */
#ifndef CLFORMER_GEMM_LOOP_BUDGET_H
#define CLFORMER_GEMM_LOOP_BUDGET_H

#include <stddef.h>
#include "clformer/base.h"
#include "clformer/runtime.h"

/* The trips a work-item's loops may make in all on this context's device: 0 when the probe's
 * 2^20 trips ran whole (no limit seen). Probed on the first call, then kept in the context. */
cf_status cf_gemm_loop_budget(cf_context *ctx, size_t *out);
/* Replace the context's budget (tests: make a device without a limit plan as if it had one). */
cf_status cf_gemm_loop_budget_set(cf_context *ctx, size_t budget);

#endif
