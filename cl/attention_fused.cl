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
// On CPUs (PoCL runs the GPU shapes' barriers and transposed local tiles about 30x slower) no
// barriers and no sharing between items: a work-item takes 16 rows of its own side (query rows for
// the forward and dq, key rows for dk/dv) as the 16 lanes of float16 vectors, and the other side's
// rows 8 at a time from global memory (a head's K and V, or Q and dout, stay in cache). Its own rows
// and its accumulators are kept transposed in its slice of local memory (ATTF_LANES x HS floats
// each, lane i of vector d being row i's channel d), so an 8 x 16 tile of scores is 8 vector
// accumulators built from broadcasts of the other side's channels: no horizontal sum per
// (query, key) pair, and the softmax runs lane-wise. Same arguments and results as the GPU shapes
// up to the order of the sums; the host launches ceil(rows / 16) items per (sequence, head),
// ATTF_CPU_G to a group (cpu_group in src/ops/attention_fused.c), with ATTF_LANES x HS floats per
// item in each local array the kernel names (the others get one float).

#define ATTF_LANES 16  // rows of an item's own side: float16 lanes
#define ATTF_KB 8      // rows of the other side per register tile
#define ATTF_EACH8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

// exp(x) for x <= about 0 as cl/vecmath.clh's cf_exp16_neg (in registers; PoCL's exp on float16
// does not vectorise), but a NaN stays NaN (the clamp is a select, not fmax) and lanes are masked
// by the caller: exp(-inf) gives 2^-125 here, not 0.
inline float16 attf_exp16(float16 x) {
  float16 y = x * 1.44269504088896f;
  y = select(y, (float16)(-125.0f), y < -125.0f);
  float16 r = y + 12582912.0f;
  float16 u = y - (r - 12582912.0f);
  float16 q = 1.0f + u * (0.693147181f + u * (0.240226507f + u * (0.0555041087f + u * (0.00961812911f +
                                                                  u * (0.00133335581f + u * 0.000154035304f)))));
  return q * as_float16((as_int16(r) - 0x4B400000 + 127) << 23);
}

// The dropout factors of elements base + n * stride, lane n.
inline float16 attf_keep16(uint base, uint stride, float p, float inv_keep, uint seed, uint step, uint tensor_id,
                           uint group0) {
  float f[ATTF_LANES];
  for (int n = 0; n < ATTF_LANES; n++) f[n] = attf_keep(base + (uint)n * stride, p, inv_keep, seed, step, tensor_id, group0);
  return vload16(0, f);
}

// r[j] becomes column j of the 16 x 16 block whose rows were r[0..15] (lane i = row i): four
// rounds of the perfect shuffle (row i and row i + 8 interleaved into rows 2i, 2i + 1).
inline void attf_transpose16(float16 *r) {
  const uint16 lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const uint16 hi = (uint16)(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int round = 0; round < 4; round++) {
    float16 n[ATTF_LANES];
    for (int i = 0; i < ATTF_LANES / 2; i++) {
      n[2 * i] = shuffle2(r[i], r[i + 8], lo);
      n[2 * i + 1] = shuffle2(r[i], r[i + 8], hi);
    }
    for (int i = 0; i < ATTF_LANES; i++) r[i] = n[i];
  }
}

// dst[d*16 + i] = src row r0 + i, channel d (0 for rows >= rows_end): 16 rows as lanes, 16
// channels at a time transposed in registers (a scatter a float at a time took a third of the
// backward's time), the last HS % 16 channels a float at a time.
inline void attf_pack_lanes(__local float *dst, __global const float *src, int ld, int r0, int rows_end, int HS) {
  int n = clamp(rows_end - r0, 0, ATTF_LANES), d0 = 0;
  for (; d0 + 16 <= HS; d0 += 16) {
    float16 r[ATTF_LANES];
    for (int i = 0; i < ATTF_LANES; i++) r[i] = i < n ? vload16(0, src + (r0 + i) * ld + d0) : (float16)(0.0f);
    attf_transpose16(r);
    for (int j = 0; j < 16; j++) vstore16(r[j], d0 + j, dst);
  }
  for (int d = d0; d < HS; d++) {
    float f[ATTF_LANES];
    for (int i = 0; i < ATTF_LANES; i++) f[i] = i < n ? src[(r0 + i) * ld + d] : 0.0f;
    vstore16(vload16(0, f), d, dst);
  }
}

// Rows r0 + i < rows_end of dst = (accumulate ? dst : 0) + mul * lane i of src, 16 channels at a
// time transposed in registers.
inline void attf_unpack_lanes(__global float *dst, int ld, int r0, int rows_end, __local const float *src, float mul,
                              int accumulate, int HS) {
  int n = clamp(rows_end - r0, 0, ATTF_LANES), d0 = 0;
  for (; d0 + 16 <= HS; d0 += 16) {
    float16 r[ATTF_LANES];
    for (int j = 0; j < 16; j++) r[j] = mul * vload16(d0 + j, src);
    attf_transpose16(r);
    for (int i = 0; i < n; i++) {
      __global float *row = dst + (r0 + i) * ld + d0;
      vstore16(accumulate ? vload16(0, row) + r[i] : r[i], 0, row);
    }
  }
  for (int d = d0; d < HS; d++) {
    float f[ATTF_LANES];
    vstore16(mul * vload16(d, src), 0, f);
    for (int i = 0; i < n; i++) dst[(r0 + i) * ld + d] = (accumulate ? dst[(r0 + i) * ld + d] : 0.0f) + f[i];
  }
}

// Lane i of x to dst[i] for i < n (n <= 16).
inline void attf_store_lanes(__global float *dst, float16 x, int n) {
  float f[ATTF_LANES];
  vstore16(x, 0, f);
  for (int i = 0; i < n; i++) dst[i] = f[i];
}

// dst[i] as lane i for i < n, `fill` in the others.
inline float16 attf_load_lanes(__global const float *src, int n, float fill) {
  float f[ATTF_LANES];
  for (int i = 0; i < ATTF_LANES; i++) f[i] = i < n ? src[i] : fill;
  return vload16(0, f);
}

// D[i] = sum_d dout * out over row i's HS channels (rows `at` + i * ldo), for i < n: the dq
// kernel's own rows, in attention_fused_dot's order (the same bits), for the dk/dv kernel after it.
inline void attf_dot_rows(__global float *D, __global const float *dout, __global const float *out, int at, int ldo,
                          int n, int HS) {
  for (int i = 0; i < n; i++, at += ldo) {
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s += dout[at + d] * out[at + d];
    D[i] = s;
  }
}

// The item's (sequence, head) and first own row; 0 when the item is past the grid's end.
#define ATTF_CPU_ITEM(rows, bh, b, h, r0)                                         \
  int tiles_ = ((rows) + ATTF_LANES - 1) / ATTF_LANES, item_ = get_global_id(0); \
  if (item_ >= B * NH * tiles_) return;                                           \
  int bh = item_ / tiles_, b = bh / NH, h = bh % NH, r0 = (item_ % tiles_) * ATTF_LANES

// The 8 rows j0.. of the other side (row pointers clamped to xlast: rows past it are masked).
#define ATTF_ROW(r) __global const float *x##r = xb + min(j0 + r, xlast) * ldx, *y##r = yb + min(j0 + r, xlast) * ldy;
// s_r += a . x_r and u_r += c . y_r over the channels: a and c lane vectors, x_r and y_r broadcast.
#define ATTF_DECL(r) float16 s##r = (float16)(0.0f), u##r = (float16)(0.0f);
#define ATTF_FMA_S(r) s##r = fma(a, (float16)(x##r[d]), s##r);
#define ATTF_FMA_SU(r) \
  s##r = fma(a, (float16)(x##r[d]), s##r);   \
  u##r = fma(c, (float16)(y##r[d]), u##r);

__kernel void attention_fused_forward(__global float *out, uint out_off, __global float *lse, uint lse_off,
                                      __global float *lsum, uint lsum_off, __global const float *q, uint q_off,
                                      __global const float *k, uint k_off, __global const float *v, uint v_off,
                                      __global const int *klen, uint klen_off, int has_klen, int B, int NH, int Tq,
                                      int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo, int BK, int kbeg,
                                      int kend, int first, int last, float scale, float p, float inv_keep, uint seed,
                                      uint step, uint tensor_id, uint group0, __local float *qs, __local float *acc,
                                      __local float *ks, __local float *vs, __local float *ss) {
  ATTF_CPU_ITEM(Tq, bh, b, h, t0);
  __local float *qT = qs + get_local_id(0) * ATTF_LANES * HS, *oT = acc + get_local_id(0) * ATTF_LANES * HS;
  int kl = attf_klen(klen + klen_off, has_klen, b, Tk), n = min(ATTF_LANES, Tq - t0);
  int16 t = t0 + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int16 kend_l = min((int16)(min(kl, kend)), causal ? t + (Tk - Tq + 1) : (int16)(Tk));
  kend_l = select(kend_l, (int16)(0), t >= Tq);
  int kend_blk = min(kend, attf_key_end(t0 + n - 1, Tq, Tk, causal, kl)), xlast = kend_blk - 1;
  __global const float *xb = k + k_off + (b * Tk) * ldk + h * HS, *yb = v + v_off + (b * Tk) * ldv + h * HS;
  int ldx = ldk, ldy = ldv;
  __global float *o = out + out_off + (b * Tq) * ldo + h * HS;
  attf_pack_lanes(qT, q + q_off + (b * Tq) * ldq + h * HS, ldq, t0, Tq, HS);
  float16 m = (float16)(-INFINITY), l = (float16)(0.0f);
  if (first) {
    for (int d = 0; d < HS; d++) vstore16((float16)(0.0f), d, oT);
  } else {
    attf_pack_lanes(oT, o, ldo, t0, Tq, HS);
    m = attf_load_lanes(lse + lse_off + bh * Tq + t0, n, -INFINITY);
    l = attf_load_lanes(lsum + lsum_off + bh * Tq + t0, n, 0.0f);
  }
  for (int j0 = kbeg; j0 < kend_blk; j0 += ATTF_KB) {
    ATTF_EACH8(ATTF_ROW)
    ATTF_EACH8(ATTF_DECL)
    for (int d = 0; d < HS; d++) {
      float16 a = vload16(d, qT);
      ATTF_EACH8(ATTF_FMA_S)
    }
#define ATTF_MASK(r) s##r = select(s##r * scale, (float16)(-INFINITY), (int16)(j0 + r) >= kend_l);
    ATTF_EACH8(ATTF_MASK)
    float16 mn = fmax(m, fmax(fmax(fmax(s0, s1), fmax(s2, s3)), fmax(fmax(s4, s5), fmax(s6, s7))));
    float16 corr = select(attf_exp16(m - mn), (float16)(0.0f), m == (float16)(-INFINITY));
#define ATTF_PROB(r) u##r = select(attf_exp16(s##r - mn), (float16)(0.0f), s##r == (float16)(-INFINITY));
    ATTF_EACH8(ATTF_PROB)
    l = l * corr + (((u0 + u1) + (u2 + u3)) + ((u4 + u5) + (u6 + u7)));
    if (p > 0.0f) {
      uint base = (uint)(bh * Tq + t0) * (uint)Tk;
#define ATTF_DROP(r) u##r *= attf_keep16(base + (uint)(j0 + r), (uint)Tk, p, inv_keep, seed, step, tensor_id, group0);
      ATTF_EACH8(ATTF_DROP)
    }
    for (int d = 0; d < HS; d++) {
      float16 x = vload16(d, oT) * corr;
#define ATTF_PV(r) x = fma(u##r, (float16)(y##r[d]), x);
      ATTF_EACH8(ATTF_PV)
      vstore16(x, d, oT);
    }
    m = mn;
  }
  if (last) {
    float16 inv = select(1.0f / l, (float16)(0.0f), l <= 0.0f);
    for (int d = 0; d < HS; d++) vstore16(vload16(d, oT) * inv, d, oT);
    attf_store_lanes(lse + lse_off + bh * Tq + t0, select(m + log(l), (float16)(0.0f), l <= 0.0f), n);
  } else {
    attf_store_lanes(lse + lse_off + bh * Tq + t0, m, n);
    attf_store_lanes(lsum + lsum_off + bh * Tq + t0, l, n);
  }
  attf_unpack_lanes(o, ldo, t0, Tq, oT, 1.0f, 0, HS);
}

__kernel void attention_fused_backward_dq(__global float *dq, uint dq_off, __global const float *dout, uint dout_off,
                                          __global const float *q, uint q_off, __global const float *k, uint k_off,
                                          __global const float *v, uint v_off, __global const float *lse, uint lse_off,
                                          __global float *D, uint D_off, __global const float *out, uint out_off,
                                          int make_D, __global const int *klen, uint klen_off,
                                          int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq,
                                          int ldk, int ldv, int ldo, int BK, int kbeg, int kend, int accumulate,
                                          float scale, float p, float inv_keep, uint seed, uint step, uint tensor_id,
                                          uint group0, __local float *qs, __local float *dos, __local float *dqs,
                                          __local float *ks, __local float *vs) {
  ATTF_CPU_ITEM(Tq, bh, b, h, t0);
  int lo = get_local_id(0) * ATTF_LANES * HS;
  __local float *qT = qs + lo, *doT = dos + lo, *gT = dqs + lo;
  int kl = attf_klen(klen + klen_off, has_klen, b, Tk), n = min(ATTF_LANES, Tq - t0);
  int16 t = t0 + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int16 kend_l = min((int16)(min(kl, kend)), causal ? t + (Tk - Tq + 1) : (int16)(Tk));
  kend_l = select(kend_l, (int16)(0), t >= Tq);
  int kend_blk = min(kend, attf_key_end(t0 + n - 1, Tq, Tk, causal, kl)), xlast = kend_blk - 1;
  __global const float *xb = k + k_off + (b * Tk) * ldk + h * HS, *yb = v + v_off + (b * Tk) * ldv + h * HS;
  int ldx = ldk, ldy = ldv;
  attf_pack_lanes(qT, q + q_off + (b * Tq) * ldq + h * HS, ldq, t0, Tq, HS);
  attf_pack_lanes(doT, dout + dout_off + (b * Tq) * ldo + h * HS, ldo, t0, Tq, HS);
  for (int d = 0; d < HS; d++) vstore16((float16)(0.0f), d, gT);
  if (make_D) attf_dot_rows(D + D_off + bh * Tq + t0, dout + dout_off, out + out_off, (b * Tq + t0) * ldo + h * HS,
                            ldo, n, HS);
  float16 L = attf_load_lanes(lse + lse_off + bh * Tq + t0, n, 0.0f);
  float16 Dt = attf_load_lanes(D + D_off + bh * Tq + t0, n, 0.0f);
  for (int j0 = kbeg; j0 < kend_blk; j0 += ATTF_KB) {
    ATTF_EACH8(ATTF_ROW)
    ATTF_EACH8(ATTF_DECL)
    for (int d = 0; d < HS; d++) {
      float16 a = vload16(d, qT), c = vload16(d, doT);
      ATTF_EACH8(ATTF_FMA_SU)
    }
    // s_r: P (0 where masked); u_r: dS = P (dP * dropout - D)
#define ATTF_DS(r)                                                                                           \
  s##r = select(attf_exp16(s##r * scale - L), (float16)(0.0f), (int16)(j0 + r) >= kend_l);                   \
  if (p > 0.0f) u##r *= attf_keep16(base + (uint)(j0 + r), (uint)Tk, p, inv_keep, seed, step, tensor_id, group0); \
  u##r = s##r * (u##r - Dt);
    uint base = (uint)(bh * Tq + t0) * (uint)Tk;
    ATTF_EACH8(ATTF_DS)
    for (int d = 0; d < HS; d++) {
      float16 x = vload16(d, gT);
#define ATTF_DSK(r) x = fma(u##r, (float16)(x##r[d]), x);
      ATTF_EACH8(ATTF_DSK)
      vstore16(x, d, gT);
    }
  }
  attf_unpack_lanes(dq + dq_off + (b * Tq) * ldq + h * HS, ldq, t0, Tq, gT, scale, accumulate, HS);
}

__kernel void attention_fused_backward_dkv(
    __global float *dk, uint dk_off, __global float *dv, uint dv_off, __global const float *dout, uint dout_off,
    __global const float *q, uint q_off, __global const float *k, uint k_off, __global const float *v, uint v_off,
    __global const float *lse, uint lse_off, __global const float *D, uint D_off, __global const int *klen,
    uint klen_off, int has_klen, int B, int NH, int Tq, int Tk, int HS, int causal, int ldq, int ldk, int ldv, int ldo,
    int BQ, int qbeg, int qend, int accumulate, float scale, float p, float inv_keep, uint seed, uint step,
    uint tensor_id, uint group0, __local float *ks, __local float *vs, __local float *dks, __local float *dvs,
    __local float *qs, __local float *dos, __local float *ls, __local float *Ds) {
  ATTF_CPU_ITEM(Tk, bh, b, h, j0k);
  int lo = get_local_id(0) * ATTF_LANES * HS;
  __local float *kT = ks + lo, *vT = vs + lo, *gkT = dks + lo, *gvT = dvs + lo;
  int kl = attf_klen(klen + klen_off, has_klen, b, Tk);
  int16 jl = j0k + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __global const float *xb = q + q_off + (b * Tq) * ldq + h * HS, *yb = dout + dout_off + (b * Tq) * ldo + h * HS;
  int ldx = ldq, ldy = ldo;
  attf_pack_lanes(kT, k + k_off + (b * Tk) * ldk + h * HS, ldk, j0k, Tk, HS);
  attf_pack_lanes(vT, v + v_off + (b * Tk) * ldv + h * HS, ldv, j0k, Tk, HS);
  for (int d = 0; d < HS; d++) {
    vstore16((float16)(0.0f), d, gkT);
    vstore16((float16)(0.0f), d, gvT);
  }
  // queries [qb, qe) see at least one of the keys; a padded key is seen by no query
  int qb = max(qbeg, attf_query_begin(j0k, Tq, Tk, causal)), qe = j0k < kl ? qend : qb, xlast = qe - 1;
  for (int j0 = qb; j0 < qe; j0 += ATTF_KB) {  // j0: the first of 8 query rows
    ATTF_EACH8(ATTF_ROW)
    ATTF_EACH8(ATTF_DECL)
    for (int d = 0; d < HS; d++) {
      float16 a = vload16(d, kT), c = vload16(d, vT);
      ATTF_EACH8(ATTF_FMA_SU)
    }
    // query t = j0 + r: s_r becomes P * dropout (for dv), u_r dS = P (dP * dropout - D) (for dk)
#define ATTF_DKV(r)                                                                                               \
  {                                                                                                               \
    int tr = min(j0 + r, xlast), row = bh * Tq + tr;                                                               \
    int ke = j0 + r <= xlast ? attf_key_end(tr, Tq, Tk, causal, kl) : 0;                                           \
    float16 P = select(attf_exp16(s##r * scale - lse[lse_off + row]), (float16)(0.0f), jl >= ke);                 \
    float16 f = p > 0.0f ? attf_keep16((uint)row * (uint)Tk + (uint)j0k, 1u, p, inv_keep, seed, step, tensor_id,  \
                                       group0)                                                                    \
                         : (float16)(1.0f);                                                                       \
    s##r = P * f;                                                                                                 \
    u##r = P * (u##r * f - D[D_off + row]);                                                                       \
  }
    ATTF_EACH8(ATTF_DKV)
    for (int d = 0; d < HS; d++) {
      float16 gv = vload16(d, gvT), gk = vload16(d, gkT);
#define ATTF_DKV_ACC(r)                    \
  gv = fma(s##r, (float16)(y##r[d]), gv); \
  gk = fma(u##r, (float16)(x##r[d]), gk);
      ATTF_EACH8(ATTF_DKV_ACC)
      vstore16(gv, d, gvT);
      vstore16(gk, d, gkT);
    }
  }
  attf_unpack_lanes(dk + dk_off + (b * Tk) * ldk + h * HS, ldk, j0k, Tk, gkT, scale, accumulate, HS);
  attf_unpack_lanes(dv + dv_off + (b * Tk) * ldv + h * HS, ldv, j0k, Tk, gvT, 1.0f, accumulate, HS);
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
                                          __global float *D, uint D_off, __global const float *out, uint out_off,
                                          int make_D, __global const int *klen, uint klen_off,
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
