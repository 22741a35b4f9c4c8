/* Philox4x32-10 on the host: the twin of cl/philox.clh, for references and tests. */
#ifndef CLFORMER_PHILOX_H
#define CLFORMER_PHILOX_H
#include <stdint.h>

void cf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* Words for elements 4*group .. 4*group+3: key (seed, tensor_id), counter (group, step, 0, 0). */
void cf_random_bits(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t group, uint32_t out[4]);
/* Element i's uniform in [0, 1): word i%4 of group i/4, top 24 bits. */
float cf_random_uniform(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t i);

#endif
