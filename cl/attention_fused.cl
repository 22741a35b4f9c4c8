// Fused multi-head attention (FlashAttention-2 style): out = softmax(scale * q.k^T + masks) . v,
// computed a key tile at a time with an online softmax, so no Tq x Tk matrix reaches device
// memory. The forward saves the output and each query row's logsumexp; the backward recomputes
// the probabilities from them, dq in one kernel (a work-group per query tile) and dk, dv in
// another (a work-group per key tile), so no atomics. Launch plan: src/ops/attention_fused.c.
//
// Layout (int flat indices: the host keeps every tensor below 2^31 elements): row t of sequence b
// of q is q[(b*Tq + t)*ldq + h*HS + d] for head h (channel d < HS), k and v likewise with Tk rows,
// out and dout with ldo; gradients are laid out like their inputs; lse and D are (B, NH, Tq).
// Masks: causal (query t sees keys j <= t + Tk - Tq) and a key length per sequence (keys
// j >= klen[b] are padding). A query row with no key gets a zero output and logsumexp 0.
// Dropout on the probabilities is keyed like cl/attention.cl's: element i = ((b*NH + h)*Tq + t)*Tk + j
// of the (B, NH, Tq, Tk) matrix, kept iff cf_uniform24(word i%4 of cf_random_bits(.., group0 + i/4)) >= p.
//
// Local memory (sizes from the host, which reads CL_DEVICE_LOCAL_MEM_SIZE): a group's own rows are
// stored transposed, [d*G + r] (item r's column), so that items read consecutive words; the tile
// it streams through is row-major [r*HS + d], every item reading the same word. Every loop bound is
// uniform across the group; masks are selects, so no item leaves a barrier behind.
#include "philox.clh"
#include "vecmath.clh"

// The sequence, head and first row of group g, with `tiles` groups per (sequence, head).
#define ATTF_GROUP(g, tiles, b, h, r0) \
  int bh_ = (g) / (tiles), b = bh_ / NH, h = bh_ % NH, r0 = ((g) % (tiles)) * (int)get_local_size(0)

// The keys query t may see: j < attf_key_end(...) (<= 0: none).
inline int attf_key_end(int t, int Tq, int Tk, int causal, int klen) {
  int end = klen;
  if (causal) end = min(end, t + Tk - Tq + 1);
  return t < Tq ? end : 0;
}

// The key length of sequence b: klen[b] clamped to [0, Tk], or Tk without a length.
inline int attf_klen(__global const int *klen, int has_klen, int b, int Tk) {
  return has_klen ? clamp(klen[b], 0, Tk) : Tk;
}

// The dropout factor (scale or 0) of flat element i.
inline float attf_keep(uint i, float p, float inv_keep, uint seed, uint step, uint tensor_id, uint group0) {
  uint4 w = cf_random_bits(seed, step, tensor_id, group0 + i / 4u);
  // word i%4 by masks: Oclgrind picked the wrong word from a ?: chain (or a variable index)
  uint4 e = w & as_uint4((int4)(0, 1, 2, 3) == (int4)((int)(i % 4u)));
  uint bits = e.x | e.y | e.z | e.w;
  return cf_uniform24(bits) >= p ? inv_keep : 0.0f;
}

// dst[r*HS + d] = src row r0 + r (r < n, rows < rows_end), 0 past the end: a tile of n rows,
// loaded by the whole group.
inline void attf_load_rows(__local float *dst, __global const float *src, int ld, int r0, int n, int rows_end,
                           int HS) {
  for (int e = get_local_id(0); e < n * HS; e += get_local_size(0)) {
    int r = e / HS, d = e - r * HS;
    dst[e] = r0 + r < rows_end ? src[(r0 + r) * ld + d] : 0.0f;
  }
}

// dst[d*G + r] = src row r0 + r (0 past rows_end): the group's own rows, transposed.
inline void attf_load_cols(__local float *dst, __global const float *src, int ld, int r0, int rows_end, int HS) {
  int G = get_local_size(0);
  for (int e = get_local_id(0); e < G * HS; e += G) {
    int r = e / HS, d = e - r * HS;
    dst[d * G + r] = r0 + r < rows_end ? src[(r0 + r) * ld + d] : 0.0f;
  }
}

// The first query that sees key j (causal), never below 0.
inline int attf_query_begin(int j, int Tq, int Tk, int causal) { return causal ? max(0, j - (Tk - Tq)) : 0; }

#if CF_DEVICE_IS_CPU

// ---------- CPU shapes ----------
// On CPUs (PoCL runs the GPU shapes' barriers and transposed local tiles about 30x slower) one
// work-item per row, no barriers, no local memory (the host passes minimal local arguments): the
// other side's rows are read from global memory, where a head's K and V stay in cache, with
// 16-float vectors; the item's accumulators are its own output row. Same arguments, same results up
// to the order of the sums. The host launches B*NH*Tq (dk/dv: B*NH*Tk) items.

inline float attf_dot(__global const float *a, __global const float *b, int HS) {
  float16 s16 = (float16)(0.0f);
  int d = 0;
  for (; d + 16 <= HS; d += 16) s16 = fma(vload16(0, a + d), vload16(0, b + d), s16);
  float s = cf_hsum16(s16);
  for (; d < HS; d++) s += a[d] * b[d];
  return s;
}

// y = c * y + a * x over HS floats.
inline void attf_axpby(__global float *y, float c, float a, __global const float *x, int HS) {
  int d = 0;
  for (; d + 16 <= HS; d += 16) vstore16(fma((float16)(a), vload16(0, x + d), c * vload16(0, y + d)), 0, y + d);
  for (; d < HS; d++) y[d] = c * y[d] + a * x[d];
}

inline void attf_zero(__global float *y, int HS) {
  int d = 0;
  for (; d + 16 <= HS; d += 16) vstore16((float16)(0.0f), 0, y + d);
  for (; d < HS; d++) y[d] = 0.0f;
}

#define ATTF_BLOCK 16  // keys whose scores an item holds at once

__kernel void attention_fused_forward(__global float *out, uint out_off, __global float *lse, uint lse_off,
                                      __global float *lsum, uint lsum_off, __global const float *q, uint q_off,
                                      __global const float *k, uint k_off, __global const float *v, uint v_off,
                                      __global const int *klen, uint klen_off, int has_klen, int B, int NH, int Tq,
                                      int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo, int BK, int kbeg,
                                      int kend, int first, int last, float scale, float p, float inv_keep, uint seed,
                                      uint step, uint tensor_id, uint group0, __local float *qs, __local float *acc,
                                      __local float *ks, __local float *vs, __local float *ss) {
  int row = get_global_id(0);
  if (row >= B * NH * Tq) return;
  int t = row % Tq, bh = row / Tq, b = bh / NH, h = bh % NH;
  int kend_row = min(kend, attf_key_end(t, Tq, Tk, causal, attf_klen(klen + klen_off, has_klen, b, Tk)));
  __global const float *qr = q + q_off + (b * Tq + t) * ldq + h * HS;
  __global const float *kb = k + k_off + (b * Tk) * ldk + h * HS, *vb = v + v_off + (b * Tk) * ldv + h * HS;
  __global float *o = out + out_off + (b * Tq + t) * ldo + h * HS;
  float m = first ? -INFINITY : lse[lse_off + row], l = first ? 0.0f : lsum[lsum_off + row];
  if (first) attf_zero(o, HS);
  for (int j0 = kbeg; j0 < kend_row; j0 += ATTF_BLOCK) {
    int n = min(ATTF_BLOCK, kend_row - j0);
    float sc[ATTF_BLOCK], mt = -INFINITY;
    for (int r = 0; r < n; r++) mt = fmax(mt, sc[r] = scale * attf_dot(qr, kb + (j0 + r) * ldk, HS));
    float mn = fmax(m, mt), corr = m == -INFINITY ? 0.0f : exp(m - mn);
    l *= corr;
    for (int r = 0; r < n; r++) {
      float pj = exp(sc[r] - mn);
      l += pj;
      if (p > 0.0f) pj *= attf_keep((uint)row * (uint)Tk + (uint)(j0 + r), p, inv_keep, seed, step, tensor_id, group0);
      attf_axpby(o, r == 0 ? corr : 1.0f, pj, vb + (j0 + r) * ldv, HS);
    }
    m = mn;
  }
  float inv = last ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
  if (inv != 1.0f) attf_axpby(o, inv, 0.0f, o, HS);
  lse[lse_off + row] = last ? (l > 0.0f ? m + log(l) : 0.0f) : m;
  if (!last) lsum[lsum_off + row] = l;
}

__kernel void attention_fused_backward_dq(__global float *dq, uint dq_off, __global const float *dout, uint dout_off,
                                          __global const float *q, uint q_off, __global const float *k, uint k_off,
                                          __global const float *v, uint v_off, __global const float *lse, uint lse_off,
                                          __global const float *D, uint D_off, __global const int *klen, uint klen_off,
                                          int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq,
                                          int ldk, int ldv, int ldo, int BK, int kbeg, int kend, int accumulate,
                                          float scale, float p, float inv_keep, uint seed, uint step, uint tensor_id,
                                          uint group0, __local float *qs, __local float *dos, __local float *dqs,
                                          __local float *ks, __local float *vs) {
  int row = get_global_id(0);
  if (row >= B * NH * Tq) return;
  int t = row % Tq, bh = row / Tq, b = bh / NH, h = bh % NH;
  int kend_row = min(kend, attf_key_end(t, Tq, Tk, causal, attf_klen(klen + klen_off, has_klen, b, Tk)));
  __global const float *qr = q + q_off + (b * Tq + t) * ldq + h * HS, *dor = dout + dout_off + (b * Tq + t) * ldo + h * HS;
  __global const float *kb = k + k_off + (b * Tk) * ldk + h * HS, *vb = v + v_off + (b * Tk) * ldv + h * HS;
  __global float *g = dq + dq_off + (b * Tq + t) * ldq + h * HS;
  float L = lse[lse_off + row], Dt = D[D_off + row];
  if (!accumulate) attf_zero(g, HS);
  for (int j = kbeg; j < kend_row; j++) {
    float pj = exp(scale * attf_dot(qr, kb + j * ldk, HS) - L), dp = attf_dot(dor, vb + j * ldv, HS);
    if (p > 0.0f) dp *= attf_keep((uint)row * (uint)Tk + (uint)j, p, inv_keep, seed, step, tensor_id, group0);
    attf_axpby(g, 1.0f, scale * pj * (dp - Dt), kb + j * ldk, HS);
  }
}

__kernel void attention_fused_backward_dkv(
    __global float *dk, uint dk_off, __global float *dv, uint dv_off, __global const float *dout, uint dout_off,
    __global const float *q, uint q_off, __global const float *k, uint k_off, __global const float *v, uint v_off,
    __global const float *lse, uint lse_off, __global const float *D, uint D_off, __global const int *klen,
    uint klen_off, int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo,
    int BQ, int qbeg, int qend, int accumulate, float scale, float p, float inv_keep, uint seed, uint step,
    uint tensor_id, uint group0, __local float *ks, __local float *vs, __local float *dks, __local float *dvs,
    __local float *qs, __local float *dos, __local float *ls, __local float *Ds) {
  int item = get_global_id(0);
  if (item >= B * NH * Tk) return;
  int j = item % Tk, bh = item / Tk, b = bh / NH, h = bh % NH, kl = attf_klen(klen + klen_off, has_klen, b, Tk);
  __global const float *kr = k + k_off + (b * Tk + j) * ldk + h * HS, *vr = v + v_off + (b * Tk + j) * ldv + h * HS;
  __global const float *qb = q + q_off + (b * Tq) * ldq + h * HS, *dob = dout + dout_off + (b * Tq) * ldo + h * HS;
  __global float *gk = dk + dk_off + (b * Tk + j) * ldk + h * HS, *gv = dv + dv_off + (b * Tk + j) * ldv + h * HS;
  if (!accumulate) {
    attf_zero(gk, HS);
    attf_zero(gv, HS);
  }
  int qe = j < kl ? qend : 0;  // a padded key is seen by no query
  for (int t = max(qbeg, attf_query_begin(j, Tq, Tk, causal)); t < qe; t++) {
    if (j >= attf_key_end(t, Tq, Tk, causal, kl)) continue;
    int r = bh * Tq + t;
    float pj = exp(scale * attf_dot(qb + t * ldq, kr, HS) - lse[lse_off + r]), f = 1.0f;
    float dp = attf_dot(dob + t * ldo, vr, HS);
    if (p > 0.0f) f = attf_keep((uint)r * (uint)Tk + (uint)j, p, inv_keep, seed, step, tensor_id, group0);
    attf_axpby(gv, 1.0f, pj * f, dob + t * ldo, HS);
    attf_axpby(gk, 1.0f, scale * pj * (dp * f - D[D_off + r]), qb + t * ldq, HS);
  }
}

#else  // GPU shapes: a work-group per tile of rows

// ---------- forward ----------

// One key tile of the online softmax for item lid: scores into ss, then the running max m and
// sum l, and acc (its column) rescaled and accumulated.
inline void attf_forward_tile(__local const float *qs, __local float *acc, __local const float *ks,
                              __local const float *vs, __local float *ss, int nk, int j0, int kend, uint drop_base,
                              int HS, float scale, float *m, float *l, float p, float inv_keep, uint seed, uint step,
                              uint tensor_id, uint group0) {
  int G = get_local_size(0), lid = get_local_id(0);
  float mt = -INFINITY;
  for (int r = 0; r < nk; r++) {
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s += qs[d * G + lid] * ks[r * HS + d];
    s = j0 + r < kend ? s * scale : -INFINITY;
    ss[r * G + lid] = s;
    mt = fmax(mt, s);
  }
  float mn = fmax(*m, mt);
  float corr = *m == -INFINITY ? 0.0f : exp(*m - mn);  // mn is finite when m is
  *l *= corr;
  for (int d = 0; d < HS; d++) acc[d * G + lid] *= corr;
  for (int r = 0; r < nk; r++) {
    float s = ss[r * G + lid], pj = s == -INFINITY ? 0.0f : exp(s - mn);
    *l += pj;
    if (p > 0.0f) pj *= attf_keep(drop_base + (uint)(j0 + r), p, inv_keep, seed, step, tensor_id, group0);
    for (int d = 0; d < HS; d++) acc[d * G + lid] += pj * vs[r * HS + d];
  }
  *m = mn;
}

// Keys [kbeg, kend) of every query row; a long key range runs as several launches (first: start
// the state; last: normalise), the state kept in out (unnormalised), lse (the max) and lsum.
// Local: qs, acc (HS x G), ks, vs (BK x HS), ss (BK x G).
__kernel void attention_fused_forward(__global float *out, uint out_off, __global float *lse, uint lse_off,
                                      __global float *lsum, uint lsum_off, __global const float *q, uint q_off,
                                      __global const float *k, uint k_off, __global const float *v, uint v_off,
                                      __global const int *klen, uint klen_off, int has_klen, int B, int NH, int Tq,
                                      int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo, int BK, int kbeg,
                                      int kend, int first, int last, float scale, float p, float inv_keep, uint seed,
                                      uint step, uint tensor_id, uint group0, __local float *qs, __local float *acc,
                                      __local float *ks, __local float *vs, __local float *ss) {
  int G = get_local_size(0), lid = get_local_id(0), tiles = (Tq + G - 1) / G;
  ATTF_GROUP(get_group_id(0), tiles, b, h, r0);
  int t = r0 + lid, row = bh_ * Tq + t, kl = attf_klen(klen + klen_off, has_klen, b, Tk);
  int kend_row = attf_key_end(t, Tq, Tk, causal, kl);
  int kend_group = min(kend, attf_key_end(min(r0 + G, Tq) - 1, Tq, Tk, causal, kl));
  __global float *o = out + out_off + (b * Tq + t) * ldo + h * HS;
  attf_load_cols(qs, q + q_off + (b * Tq) * ldq + h * HS, ldq, r0, Tq, HS);
  float m = -INFINITY, l = 0.0f;
  if (!first && t < Tq) {
    m = lse[lse_off + row];
    l = lsum[lsum_off + row];
  }
  for (int d = 0; d < HS; d++) acc[d * G + lid] = !first && t < Tq ? o[d] : 0.0f;
  for (int j0 = kbeg; j0 < kend_group; j0 += BK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the last tile's reads (and the loads of qs) are done
    int nk = min(BK, kend_group - j0);
    attf_load_rows(ks, k + k_off + (b * Tk) * ldk + h * HS, ldk, j0, nk, Tk, HS);
    attf_load_rows(vs, v + v_off + (b * Tk) * ldv + h * HS, ldv, j0, nk, Tk, HS);
    barrier(CLK_LOCAL_MEM_FENCE);
    attf_forward_tile(qs, acc, ks, vs, ss, nk, j0, kend_row, (uint)row * (uint)Tk, HS, scale, &m, &l, p, inv_keep,
                      seed, step, tensor_id, group0);
  }
  if (t >= Tq) return;  // after the last barrier
  float inv = last ? (l > 0.0f ? 1.0f / l : 0.0f) : 1.0f;
  for (int d = 0; d < HS; d++) o[d] = acc[d * G + lid] * inv;
  lse[lse_off + row] = last ? (l > 0.0f ? m + log(l) : 0.0f) : m;
  if (!last) lsum[lsum_off + row] = l;
}

// ---------- backward ----------

// dq of the group's query rows over keys [kbeg, kend): dq = scale * sum_j P_j (dP_j - D) k_j,
// P_j = exp(scale q.k_j - lse), dP_j = dout.v_j times the dropout factor. accumulate: dq +=.
// Local: qs, dos, dqs (HS x G), ks, vs (BK x HS).
__kernel void attention_fused_backward_dq(__global float *dq, uint dq_off, __global const float *dout, uint dout_off,
                                          __global const float *q, uint q_off, __global const float *k, uint k_off,
                                          __global const float *v, uint v_off, __global const float *lse, uint lse_off,
                                          __global const float *D, uint D_off, __global const int *klen, uint klen_off,
                                          int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq,
                                          int ldk, int ldv, int ldo, int BK, int kbeg, int kend, int accumulate,
                                          float scale, float p, float inv_keep, uint seed, uint step, uint tensor_id,
                                          uint group0,
                                          __local float *qs, __local float *dos, __local float *dqs, __local float *ks,
                                          __local float *vs) {
  int G = get_local_size(0), lid = get_local_id(0), tiles = (Tq + G - 1) / G;
  ATTF_GROUP(get_group_id(0), tiles, b, h, r0);
  int t = r0 + lid, row = bh_ * Tq + t, kl = attf_klen(klen + klen_off, has_klen, b, Tk);
  int kend_row = attf_key_end(t, Tq, Tk, causal, kl);
  int kend_group = min(kend, attf_key_end(min(r0 + G, Tq) - 1, Tq, Tk, causal, kl));
  attf_load_cols(qs, q + q_off + (b * Tq) * ldq + h * HS, ldq, r0, Tq, HS);
  attf_load_cols(dos, dout + dout_off + (b * Tq) * ldo + h * HS, ldo, r0, Tq, HS);
  float L = t < Tq ? lse[lse_off + row] : 0.0f, Dt = t < Tq ? D[D_off + row] : 0.0f;
  for (int d = 0; d < HS; d++) dqs[d * G + lid] = 0.0f;
  for (int j0 = kbeg; j0 < kend_group; j0 += BK) {
    barrier(CLK_LOCAL_MEM_FENCE);
    int nk = min(BK, kend_group - j0);
    attf_load_rows(ks, k + k_off + (b * Tk) * ldk + h * HS, ldk, j0, nk, Tk, HS);
    attf_load_rows(vs, v + v_off + (b * Tk) * ldv + h * HS, ldv, j0, nk, Tk, HS);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < nk; r++) {
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; d++) {
        s += qs[d * G + lid] * ks[r * HS + d];
        dp += dos[d * G + lid] * vs[r * HS + d];
      }
      float pj = j0 + r < kend_row ? exp(s * scale - L) : 0.0f;
      if (p > 0.0f) dp *= attf_keep((uint)row * (uint)Tk + (uint)(j0 + r), p, inv_keep, seed, step, tensor_id, group0);
      float ds = pj * (dp - Dt);
      for (int d = 0; d < HS; d++) dqs[d * G + lid] += ds * ks[r * HS + d];
    }
  }
  if (t >= Tq) return;
  __global float *g = dq + dq_off + (b * Tq + t) * ldq + h * HS;
  for (int d = 0; d < HS; d++) g[d] = (accumulate ? g[d] : 0.0f) + scale * dqs[d * G + lid];
}

// dk and dv of the group's key rows over queries [qbeg, qend): dv = sum_t P_t,drop dout_t,
// dk = scale * sum_t P_t (dP_t - D_t) q_t. accumulate: +=. Local: ks, vs, dks, dvs (HS x G), qs,
// dos (BQ x HS), ls, Ds (BQ).
__kernel void attention_fused_backward_dkv(
    __global float *dk, uint dk_off, __global float *dv, uint dv_off, __global const float *dout, uint dout_off,
    __global const float *q, uint q_off, __global const float *k, uint k_off, __global const float *v, uint v_off,
    __global const float *lse, uint lse_off, __global const float *D, uint D_off, __global const int *klen,
    uint klen_off, int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo,
    int BQ, int qbeg, int qend, int accumulate, float scale, float p, float inv_keep, uint seed, uint step,
    uint tensor_id, uint group0, __local float *ks, __local float *vs, __local float *dks, __local float *dvs, __local float *qs,
    __local float *dos, __local float *ls, __local float *Ds) {
  int G = get_local_size(0), lid = get_local_id(0), tiles = (Tk + G - 1) / G;
  ATTF_GROUP(get_group_id(0), tiles, b, h, r0);
  int j = r0 + lid, kl = attf_klen(klen + klen_off, has_klen, b, Tk);
  attf_load_cols(ks, k + k_off + (b * Tk) * ldk + h * HS, ldk, r0, Tk, HS);
  attf_load_cols(vs, v + v_off + (b * Tk) * ldv + h * HS, ldv, r0, Tk, HS);
  for (int d = 0; d < HS; d++) dks[d * G + lid] = dvs[d * G + lid] = 0.0f;
  int qb = max(qbeg, attf_query_begin(r0, Tq, Tk, causal)), qe = r0 < kl ? qend : qb;  // keys past kl: nothing
  for (int t0 = qb; t0 < qe; t0 += BQ) {
    barrier(CLK_LOCAL_MEM_FENCE);
    int nq = min(BQ, qe - t0);
    attf_load_rows(qs, q + q_off + (b * Tq) * ldq + h * HS, ldq, t0, nq, Tq, HS);
    attf_load_rows(dos, dout + dout_off + (b * Tq) * ldo + h * HS, ldo, t0, nq, Tq, HS);
    for (int i = lid; i < nq; i += G) {
      ls[i] = lse[lse_off + bh_ * Tq + t0 + i];
      Ds[i] = D[D_off + bh_ * Tq + t0 + i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < nq; i++) {
      int t = t0 + i;
      float s = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; d++) {
        s += qs[i * HS + d] * ks[d * G + lid];
        dp += dos[i * HS + d] * vs[d * G + lid];
      }
      float pj = j < attf_key_end(t, Tq, Tk, causal, kl) ? exp(s * scale - ls[i]) : 0.0f, f = 1.0f;
      if (p > 0.0f) f = attf_keep((uint)(bh_ * Tq + t) * (uint)Tk + (uint)j, p, inv_keep, seed, step, tensor_id, group0);
      float ds = pj * (dp * f - Ds[i]), pd = pj * f;
      for (int d = 0; d < HS; d++) {
        dvs[d * G + lid] += pd * dos[i * HS + d];
        dks[d * G + lid] += ds * qs[i * HS + d];
      }
    }
  }
  if (j >= Tk) return;
  __global float *gk = dk + dk_off + (b * Tk + j) * ldk + h * HS, *gv = dv + dv_off + (b * Tk + j) * ldv + h * HS;
  for (int d = 0; d < HS; d++) {
    gk[d] = (accumulate ? gk[d] : 0.0f) + scale * dks[d * G + lid];
    gv[d] = (accumulate ? gv[d] : 0.0f) + dvs[d * G + lid];
  }
}

#endif

// ---------- both shapes ----------

// D[row] = sum_d dout * out over the row's HS channels: one item per (b, h, t).
__kernel void attention_fused_dot(__global float *D, uint D_off, __global const float *dout, uint dout_off,
                                  __global const float *out, uint out_off, int B, int NH, int Tq, int HS, int ldo) {
  int row = get_global_id(0);
  if (row >= B * NH * Tq) return;
  int t = row % Tq, h = (row / Tq) % NH, b = row / (Tq * NH), at = (b * Tq + t) * ldo + h * HS;
  float s = 0.0f;
  for (int d = 0; d < HS; d++) s += dout[dout_off + at + d] * out[out_off + at + d];
  D[D_off + row] = s;
}
