/* Softmax cross-entropy with label smoothing and an ignore index, fused with the
 * (max-subtracted) softmax. Targets q = (1 - eps) * onehot(target) + eps / V, so
 * loss_row = -sum_v q_v log p_v. Not here: the logits projection (gemm). */
#ifndef CLFORMER_CROSSENTROPY_H
#define CLFORMER_CROSSENTROPY_H

#include "clformer/program.h"
#include "clformer/selftest.h"

/* losses[n] = loss of row n, 0 for ignored rows; loss[0] = mean of losses over counted rows (0 if
 * none), reduced on the device in a fixed order. A row is counted when targets[n] != ignore_index;
 * targets outside [0, V) other than ignore_index are invalid: the kernels read nothing out of
 * bounds for them and treat them as ignored. Two launches: the rows (one per work-item on CPUs,
 * one work-group per row elsewhere), then one work-group for the mean. */
cf_status cf_crossentropy_forward(cf_context *ctx, cf_mem loss,  // (1)
                                  cf_mem losses,                 // (N)
                                  cf_mem logits,                 // (N, V)
                                  cf_mem targets,                // int (N)
                                  int N, int V, float smoothing, int ignore_index);

/* dlogits = dloss * (softmax(logits) - q) for counted rows, 0 for ignored rows (the caller passes
 * dloss = 1 / count for the mean). dlogits may be logits itself (in place); it is overwritten,
 * not accumulated. */
cf_status cf_crossentropy_backward(cf_context *ctx, cf_mem dlogits,  // (N, V), may alias logits
                                   cf_mem logits,                    // (N, V)
                                   cf_mem targets,                   // int (N)
                                   int N, int V, float smoothing, int ignore_index, float dloss);

/* Both of the above in one pass over the logits, for a training step (which needs both): loss and
 * losses as cf_crossentropy_forward, dlogits as cf_crossentropy_backward, bit for bit on CPUs
 * (one exp per logit instead of two, the logits read once). dlogits may be logits (in place). */
cf_status cf_crossentropy_forward_backward(cf_context *ctx, cf_mem loss,  // (1)
                                           cf_mem losses,                 // (N)
                                           cf_mem dlogits,                // (N, V), may alias logits
                                           cf_mem logits,                 // (N, V)
                                           cf_mem targets,                // int (N)
                                           int N, int V, float smoothing, int ignore_index, float dloss);

/* Number of rows with targets[n] != ignore_index. */
int cf_crossentropy_count(const int *targets, int N, int ignore_index);

/* Double references. losses (N) and *loss (the mean) as the device defines them. */
void ref_crossentropy_forward(double *loss, double *losses, const float *logits, const int *targets, int N, int V,
                              double smoothing, int ignore_index);
void ref_crossentropy_backward(double *dlogits, const float *logits, const int *targets, int N, int V,
                               double smoothing, int ignore_index, double dloss);

cf_status cf_selftest_crossentropy(cf_context *ctx, cf_selftest *t);

#endif
