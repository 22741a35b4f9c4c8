/* Philox4x32-10 on the host (see cl/philox.clh, which must stay bit-identical). */
#include "clformer/base.h"

static uint32_t mulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }

void cf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    uint32_t hi0 = mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

void cf_random_bits(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t group, uint32_t out[4]) {
  uint32_t ctr[4] = {group, step, 0, 0}, key[2] = {seed, tensor_id};
  cf_philox4x32_10(ctr, key, out);
}

float cf_random_uniform(uint32_t seed, uint32_t step, uint32_t tensor_id, uint32_t i) {
  uint32_t w[4];
  cf_random_bits(seed, step, tensor_id, i / 4, w);
  return (float)(w[i % 4] >> 8) * (1.0f / 16777216.0f);
}
