/* Inside the GEMM layer: which implementation (ours or CLBlast) an automatic GEMM takes, measured
 * on the device (calibrate.c), per shape class, and cached on disk per device, driver and kernel
 * source beside the kernel binaries. gemm.c asks it when neither $CLFORMER_GEMM, the caller nor a
 * tuning file's per-shape choice decides. */
#ifndef CLFORMER_GEMM_CALIBRATE_H
#define CLFORMER_GEMM_CALIBRATE_H

#include "clformer/gemm.h"

/* The implementation measured faster for the class of this product (its form NN/NT/TN, TT counted
 * as TN; batched or not; small, medium or large by M*N*K*batch): known to the context, else read
 * from the verdict file, else measured now on a representative shape of the class (and stored). */
cf_status cf_gemm_calib_choose(cf_context *ctx, int ta, int tb, size_t M, size_t N, size_t K, size_t batch,
                               cf_gemm_impl *out);

/* What the tuning file this context applies says, hashed (0: none applied): part of the verdict
 * file's key, since tuned CLBlast parameters change CLBlast's times (gemm.c). */
unsigned long long cf_gemm_tune_fingerprint(cf_context *ctx);

#endif
