// Row-major SGEMM for CPU devices (PoCL): C = alpha * op(A) * op(B) + beta * C, plain and
// strided-batched. Work-groups of one work-item; a work-item computes a GEMM_MR x 64 tile of C at
// a time in 4*GEMM_MR float16 accumulators and, per k, loads 64 values of op(B) and broadcasts
// GEMM_MR values of op(A). No local memory: the vector types map onto AVX-512 (or AVX2) FMAs. A 6 x 64
// tile beat 12 x 32 (the same 24 accumulators) by 5-20% at the model's shapes: half the rows of A
// to stream and broadcast per k, and row pointers that fit in registers.
//
// op(B) is read as 64-column panels: panel p holds columns 64p..64p+63 for every k, row k at
// b_ld floats after row k-1. A non-transposed B whose N is a multiple of 64 is read in place
// (b_ld ldb); any other op(B) is packed into zero-padded panels (b_ld 64): by gemm_an_strips's
// items themselves, or for gemm_at by gemm_pack_b. A transposed A (K, M) is read in place (row k
// of a tile's op(A) being 6 consecutive floats of A's row k) or packed into K x 6 panels: by
// gemm_at_rows's items themselves, or for gemm_at by gemm_pack_at.
//
// Where B is read in place, the kernels that walk column strips (gemm_an_strips, gemm_at_strips,
// gemm_at_rows) run a long K as slices of kc: every tile of an item's strip takes a slice before
// any takes the next, so the slice of B's panel stays in cache across them, and C, accumulating
// (beta 1 after the first slice), stays in the cache of the core that runs the item. Data written
// by one core and read by another is what costs most on a machine whose cores share no cache:
// on the 2-core VM we measure on, a core-to-core round trip took 120-170 ns at some times and
// 430-500 ns at others, and a product reading A^T packed by a separate kernel ran up to 1.4x
// slower than on the same panels packed earlier. That is also why gemm_at_rows packs its own A^T.
//
// The same three kernels take tri, a triangle of a causal attention's products to skip
// (GEMM_K_RANGE), and run each tile's k loop over the rest only.

#define GEMM_MR 6
#define GEMM_NR 64

// Loop trips are kept few in the partial panels (nn < 64, or the last kn < 16 rows): Mesa's llvmpipe
// (rusticl's CPU device) stops every loop of a work-item once its loops have run 65535 trips in all
// (gallivm's loop limiter, LP_MAX_TGSI_LOOP_ITERATIONS), silently. A float at a time, one item's pack
// of a 1031 x 1 panel took 66k trips and the product ran on a truncated panel (issue 17); the host
// also splits work so that no item's loops pass the limit the device shows (src/gemm/gemm.c).
#define GEMM_ZERO_ROW(d)                                                                           \
  {                                                                                                \
    vstore16((float16)0.0f, 0, d);                                                                 \
    vstore16((float16)0.0f, 1, d);                                                                 \
    vstore16((float16)0.0f, 2, d);                                                                 \
    vstore16((float16)0.0f, 3, d);                                                                 \
  }
// x.s0 .. x.sf to d[0], d[64], .. d[15 * 64]: 16 k of one column of a panel
#define GEMM_SCATTER16(d, x)                                                                       \
  {                                                                                                \
    (d)[0] = (x).s0; (d)[64] = (x).s1; (d)[128] = (x).s2; (d)[192] = (x).s3;                       \
    (d)[256] = (x).s4; (d)[320] = (x).s5; (d)[384] = (x).s6; (d)[448] = (x).s7;                    \
    (d)[512] = (x).s8; (d)[576] = (x).s9; (d)[640] = (x).sa; (d)[704] = (x).sb;                    \
    (d)[768] = (x).sc; (d)[832] = (x).sd; (d)[896] = (x).se; (d)[960] = (x).sf;                    \
  }

// Rows k0..k0+15 (fewer at K's end) of op(B)'s zero-padded panel starting at column n0, from b
// (one matrix of B: (K, N), or (N, K) when trans_b), into p (row k0 of the panel, rows 64 apart).
// One text for both destinations: the global scratch (gemm_pack_block) and a work-group's local memory
// (gemm_pack_block_local, gemm_an_strips's panel where it fits).
#define GEMM_PACK_BLOCK_FN(NAME, AS)                                                                                   \
void NAME(AS float *p, __global const float *b, int trans_b, uint K, uint N, uint ldb, uint k0, uint n0) {             \
  uint kn = min(16u, K - k0), nn = min((uint)GEMM_NR, N - n0);                                                         \
  if (!trans_b) {  /* B (K, N): row k of op(B) is row k of B */                                                        \
    for (uint k = 0; k < kn; k++) {                                                                                    \
      __global const float *row = b + (size_t)(k0 + k) * ldb + n0;                                                     \
      AS float *dst = p + k * GEMM_NR;                                                                                 \
      if (nn == GEMM_NR) {                                                                                             \
        for (uint v = 0; v < GEMM_NR / 16; v++) vstore16(vload16(v, row), v, dst);                                     \
      } else {  /* whole vectors, then at most 15 floats, then zeros (few loop trips: see GEMM_ZERO_ROW) */            \
        uint v16 = nn / 16;                                                                                            \
        GEMM_ZERO_ROW(dst)                                                                                             \
        for (uint v = 0; v < v16; v++) vstore16(vload16(v, row), v, dst);                                              \
        for (uint j = 16 * v16; j < nn; j++) dst[j] = row[j];                                                          \
      }                                                                                                                \
    }                                                                                                                  \
  } else {  /* B (N, K): column n of op(B) is row n of B */                                                            \
    __global const float *col = b + (size_t)n0 * ldb + k0;                                                             \
    if (nn == GEMM_NR && kn == 16) {                                                                                   \
      /* 4 x 4 blocks transposed in registers: each row of B is read as whole vectors (one cache */                    \
      /* line for 16 k), never gathered a float at a time, which with rows 4 KiB apart made every */                   \
      /* gathered float a fresh L1 miss (the rows share one cache set). */                                             \
      for (uint j = 0; j < GEMM_NR; j += 4) {                                                                          \
        __global const float *r = col + (size_t)j * ldb;                                                               \
        for (uint kb = 0; kb < 16; kb += 4) {                                                                          \
          float4 r0 = vload4(0, r + kb), r1 = vload4(0, r + ldb + kb), r2 = vload4(0, r + 2 * ldb + kb),               \
                 r3 = vload4(0, r + 3 * ldb + kb);                                                                     \
          float4 lo01 = shuffle2(r0, r1, (uint4)(0, 4, 1, 5)), hi01 = shuffle2(r0, r1, (uint4)(2, 6, 3, 7));           \
          float4 lo23 = shuffle2(r2, r3, (uint4)(0, 4, 1, 5)), hi23 = shuffle2(r2, r3, (uint4)(2, 6, 3, 7));           \
          AS float *d = p + kb * GEMM_NR + j;                                                                          \
          vstore4(shuffle2(lo01, lo23, (uint4)(0, 1, 4, 5)), 0, d);                                                    \
          vstore4(shuffle2(lo01, lo23, (uint4)(2, 3, 6, 7)), 0, d + GEMM_NR);                                          \
          vstore4(shuffle2(hi01, hi23, (uint4)(0, 1, 4, 5)), 0, d + 2 * GEMM_NR);                                      \
          vstore4(shuffle2(hi01, hi23, (uint4)(2, 3, 6, 7)), 0, d + 3 * GEMM_NR);                                      \
        }                                                                                                              \
      }                                                                                                                \
    } else {  /* zero the rows, then per column of op(B) (a row of B) 16 k at once, or the last kn < 16 */             \
      for (uint k = 0; k < kn; k++) GEMM_ZERO_ROW(p + k * GEMM_NR)                                                     \
      for (uint j = 0; j < nn; j++) {                                                                                  \
        __global const float *r = col + (size_t)j * ldb;                                                               \
        if (kn == 16) {                                                                                                \
          float16 x = vload16(0, r);                                                                                   \
          GEMM_SCATTER16(p + j, x)                                                                                     \
        } else {                                                                                                       \
          for (uint k = 0; k < kn; k++) p[k * GEMM_NR + j] = r[k];                                                     \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }                                                                                                                    \
}
GEMM_PACK_BLOCK_FN(gemm_pack_block, __global)
GEMM_PACK_BLOCK_FN(gemm_pack_block_local, __local)

// P (batch, ceil(N/64), K, 64) = op(B) (batch, K, N), zero-padded, for gemm_at; one 16 x 64 block
// per item. global: (ceil(K/16), ceil(N/64), batch)
__kernel void gemm_pack_b(__global float *P, uint p_off, __global const float *B, uint b_off, int trans_b, uint K,
                          uint N, uint ldb, uint stride_b, uint stride_p) {
  uint k0 = 16 * get_global_id(0), panel = get_global_id(1), bi = get_global_id(2);
  if (k0 >= K || GEMM_NR * panel >= N) return;
  gemm_pack_block(P + p_off + (size_t)bi * stride_p + (size_t)panel * K * GEMM_NR + (size_t)k0 * GEMM_NR,
                  B + b_off + (size_t)bi * stride_b, trans_b, K, N, ldb, k0, GEMM_NR * panel);
}

// Rows 0..kn-1 of 8 consecutive K x 6 panels of A^T (panel floats apart) from 48 consecutive floats
// of each of A's rows 0..kn-1 (lda apart): whole cache lines, each read once.
void gemm_pack_at8(__global float *p, __global const float *a, uint kn, uint lda, size_t panel) {
  for (uint k = 0; k < kn; k++, a += lda, p += GEMM_MR) {
    // written out rather than looped over a private array of the 48 values: PoCL put that array
    // on the stack, and the pack ran 1.6x slower (33 against 53 GB/s at 1024 x 1024)
    float16 x = vload16(0, a), y = vload16(1, a), z = vload16(2, a);
    vstore4(x.s0123, 0, p);
    vstore2(x.s45, 0, p + 4);
    vstore4(x.s6789, 0, p + panel);
    vstore2(x.sab, 0, p + panel + 4);
    vstore4(x.scdef, 0, p + 2 * panel);
    vstore2(y.s01, 0, p + 2 * panel + 4);
    vstore4(y.s2345, 0, p + 3 * panel);
    vstore2(y.s67, 0, p + 3 * panel + 4);
    vstore4(y.s89ab, 0, p + 4 * panel);
    vstore2(y.scd, 0, p + 4 * panel + 4);
    vstore2(y.sef, 0, p + 5 * panel);
    vstore4(z.s0123, 0, p + 5 * panel + 2);
    vstore4(z.s4567, 0, p + 6 * panel);
    vstore2(z.s89, 0, p + 6 * panel + 4);
    vstore4(z.sabcd, 0, p + 7 * panel);
    vstore2(z.sef, 0, p + 7 * panel + 4);
  }
}

// P (batch, ceil(M/6), K, 6) = op(A) = A^T as 6-row panels, A (batch, K, M); rows past M are zero.
// An item packs 8 panels over 64 k: per k it reads 48 consecutive floats of A's row k (whole cache
// lines, each read once) and writes 6 to each panel. global: (ceil(K/64), ceil(M/48), batch)
__kernel void gemm_pack_at(__global float *P, uint p_off, __global const float *A, uint a_off, uint K, uint M,
                           uint lda, uint stride_a, uint stride_p) {
  uint k0 = 64 * get_global_id(0), tm0 = 8 * get_global_id(1), bi = get_global_id(2);
  if (k0 >= K || GEMM_MR * tm0 >= M) return;
  uint kn = min(64u, K - k0), mn = min(8u * GEMM_MR, M - GEMM_MR * tm0);
  __global const float *a = A + a_off + (size_t)bi * stride_a + (size_t)k0 * lda + GEMM_MR * tm0;
  __global float *p = P + p_off + (size_t)bi * stride_p + (size_t)tm0 * K * GEMM_MR + (size_t)k0 * GEMM_MR;
  size_t panel = (size_t)K * GEMM_MR;
  if (mn == 8 * GEMM_MR) {
    gemm_pack_at8(p, a, kn, lda, panel);
  } else {
    uint tiles = (mn + GEMM_MR - 1) / GEMM_MR;
    for (uint k = 0; k < kn; k++, a += lda, p += GEMM_MR)
      for (uint t = 0; t < tiles; t++)
        for (uint i = 0; i < GEMM_MR; i++) p[t * panel + i] = t * GEMM_MR + i < mn ? a[t * GEMM_MR + i] : 0.0f;
  }
}

// One row of the tile: p (nn) = alpha * (x|y|z|w) + beta * p; beta == 0 never reads p. A macro,
// not a function: PoCL kept the function out of line, and its calls spilled all 24 accumulators
// first. With c_al (every row of the tile 64-byte aligned) full rows are stored as float16s:
// PoCL splits a vstore16 into four 16-byte stores, and the tile's stores were a third of a
// K = 256 product's fixed cost per tile.
#define GEMM_STORE_ROW(p, x, y, z, w)                                                             \
  if (nn == GEMM_NR && c_al) {                                                                    \
    __global float16 *q_ = (__global float16 *)(p);                                               \
    if (beta == 0.0f) {                                                                           \
      q_[0] = alpha * (x);                                                                        \
      q_[1] = alpha * (y);                                                                        \
      q_[2] = alpha * (z);                                                                        \
      q_[3] = alpha * (w);                                                                        \
    } else {                                                                                      \
      q_[0] = alpha * (x) + beta * q_[0];                                                         \
      q_[1] = alpha * (y) + beta * q_[1];                                                         \
      q_[2] = alpha * (z) + beta * q_[2];                                                         \
      q_[3] = alpha * (w) + beta * q_[3];                                                         \
    }                                                                                             \
  } else if (nn == GEMM_NR) {                                                                     \
    if (beta == 0.0f) {                                                                           \
      vstore16(alpha * (x), 0, p);                                                                \
      vstore16(alpha * (y), 1, p);                                                                \
      vstore16(alpha * (z), 2, p);                                                                \
      vstore16(alpha * (w), 3, p);                                                                \
    } else {                                                                                      \
      vstore16(alpha * (x) + beta * vload16(0, p), 0, p);                                         \
      vstore16(alpha * (y) + beta * vload16(1, p), 1, p);                                         \
      vstore16(alpha * (z) + beta * vload16(2, p), 2, p);                                         \
      vstore16(alpha * (w) + beta * vload16(3, p), 3, p);                                         \
    }                                                                                             \
  } else {                                                                                        \
    float t_[GEMM_NR];                                                                            \
    vstore16(x, 0, t_);                                                                           \
    vstore16(y, 1, t_);                                                                           \
    vstore16(z, 2, t_);                                                                           \
    vstore16(w, 3, t_);                                                                           \
    for (uint j = 0; j < nn; j++) p[j] = beta == 0.0f ? alpha * t_[j] : alpha * t_[j] + beta * p[j]; \
  }

#define GEMM_REP(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define GEMM_ACC(i) float16 c##i##a = 0.0f, c##i##b = 0.0f, c##i##c = 0.0f, c##i##d = 0.0f;
#define GEMM_FMA(i)                       \
  {                                       \
    float16 a_ = (float16)(GEMM_A(i));    \
    c##i##a = fma(a_, b0, c##i##a);       \
    c##i##b = fma(a_, b1, c##i##b);       \
    c##i##c = fma(a_, b2, c##i##c);       \
    c##i##d = fma(a_, b3, c##i##d);       \
  }
// Accumulator row i is row r0 + i of C; rows before m0 belong to the tile above (see gemm_at).
#define GEMM_STORE(i)                                 \
  if (r0 + i >= m0 && r0 + i < M) {                   \
    __global float *p##i = c + (size_t)(r0 + i) * ldc; \
    GEMM_STORE_ROW(p##i, c##i##a, c##i##b, c##i##c, c##i##d)  \
  }
#define GEMM_EPILOGUE                                               \
  int c_al = ((size_t)c & 63) == 0 && ldc % 16 == 0;                \
  GEMM_REP(GEMM_STORE)

// The k loop (n trips) over op(B)'s panel at bp, with GEMM_A(i) the value of op(A) at row i, column k.
#define GEMM_KLOOP(n)                                 \
  for (uint k = 0; k < (n); k++, bp += b_ld GEMM_ASTEP) { \
    float16 b0 = vload16(0, bp), b1 = vload16(1, bp), b2 = vload16(2, bp), b3 = vload16(3, bp); \
    GEMM_REP(GEMM_FMA)                                \
  }

// The columns [lo, hi) of the slice [k0, k0 + K) that a tile of op(A)'s rows r0..r0+5 and C's
// columns n0..n0+63 needs, leaving out what tri (cf_gemm_tri) says: 1, op(A) lower (op(A)[i][k] = 0
// for k > i: the attention's causal probabilities and their gradients), k < r0 + 6; 2, upper
// (k < i: their transposes), k >= r0; 3, only C's lower triangle wanted (the scores), none for a
// tile wholly above it (its stores then write beta C). The terms left out are exact zeros, or
// unwanted, so the wanted sums keep their bits.
#define GEMM_A_LOWER 1u
#define GEMM_A_UPPER 2u
#define GEMM_C_LOWER 3u
#define GEMM_K_RANGE(r0)                                                                         \
  uint lo = tri == GEMM_A_UPPER ? clamp((uint)(r0), k0, k0 + K) : k0;                           \
  uint hi = tri == GEMM_A_LOWER ? clamp((uint)(r0) + GEMM_MR, k0, k0 + K)                       \
          : tri == GEMM_C_LOWER && n0 >= (uint)(r0) + GEMM_MR ? lo : k0 + K;

// Tile t of the batch's matrix: groups of group_m row tiles, and within a group the row tiles
// vary fastest, so a group of A's rows stays in cache while B's panels stream past.
#define GEMM_PROLOGUE                                                                   \
  uint t = get_global_id(0), bi = get_global_id(1);                                     \
  uint mt = (M + GEMM_MR - 1) / GEMM_MR, nt = (N + GEMM_NR - 1) / GEMM_NR;              \
  if (t >= mt * nt) return;                                                             \
  uint per_group = group_m * nt, g = t / per_group, idx = t - g * per_group;            \
  uint first = g * group_m, gsize = min(group_m, mt - first);                           \
  uint m0 = GEMM_MR * (first + idx % gsize), n0 = GEMM_NR * (idx / gsize);              \
  uint nn = min((uint)GEMM_NR, N - n0);                                                 \
  __global const float *a = A + a_off + (size_t)bi * stride_a;                          \
  __global const float *bp = B + b_off + (size_t)bi * stride_b + (size_t)(n0 / GEMM_NR) * b_panel; \
  __global float *c = C + c_off + (size_t)bi * stride_c + n0;                           \
  GEMM_REP(GEMM_ACC)

#define GEMM_ARGS                                                                                          \
  __global float *C, uint c_off, __global const float *A, uint a_off, __global const float *B, uint b_off, \
      uint M, uint N, uint K, uint lda, uint ldc, uint b_ld, uint b_panel, uint stride_a, uint stride_b,   \
      uint stride_c, float alpha, float beta, uint group_m

// A tile whose op(A) is A (gemm_an_strips) reads through a pointer per row of the tile (rows past M
// read row M-1; their results are not stored, so the loop has no branches).
#define GEMM_ROWPTR(i) __global const float *a##i = a + (size_t)min(m0 + i, M - 1) * lda;
#define GEMM_A(i) a##i[k]
#define GEMM_ASTEP

// The start of a column-strip item (gemm_an_strips, gemm_at_strips): item w takes column panel
// p = w % nt and row tiles t0..t1-1, part w / nt of the parts; c is the panel's first column of C.
// The batch may be nested (the heads of a (B, T, NH * HS) tensor read in place): matrix (bo, bi)
// of get_global_size(2) x get_global_size(1) starts bo * outer_x + bi * stride_x elements in; ib
// numbers it in the whole batch.
#define GEMM_STRIP_ITEM                                                                     \
  uint w = get_global_id(0), bi = get_global_id(1), bo = get_global_id(2);                  \
  size_t ib = (size_t)bo * get_global_size(1) + bi;                                         \
  uint mt = (M + GEMM_MR - 1) / GEMM_MR, nt = (N + GEMM_NR - 1) / GEMM_NR;                   \
  uint p = w % nt, part = w / nt;                                                           \
  if (part >= parts) return;                                                                \
  uint n0 = GEMM_NR * p, nn = min((uint)GEMM_NR, N - n0);                                    \
  uint t0 = (uint)((ulong)part * mt / parts), t1 = (uint)(((ulong)part + 1) * mt / parts);   \
  __global float *c = C + c_off + (size_t)bo * outer_c + (size_t)bi * stride_c + n0;

// The forward linear layer's epilogue in gemm_an_strips (cf_gemm_nt_bias_act): y = x W^T + bias
// added to the accumulators before the first slice's stores (alpha 1, beta 0), and dropout(act(y))
// written to a second matrix from the rows just stored (still in this core's cache) after the last
// slice: one pass over y where the separate bias, bias + activation and dropout kernels took three.
#define GEMM_EPI_BIAS 1u
#define GEMM_EPI_ACT 2u
typedef float16 floatv;
#include "activation.clh"
#include "philox.clh"
#include "dropout.clh"

// The bias's 64 columns of this panel into t (zeros past N: those columns are not stored), then
// added to the tile's accumulators by a macro (a function taking the accumulators' addresses could
// keep them in memory through the k loop).
void gemm_bias_row(float *t, __global const float *bias, uint nn) {
  if (nn == GEMM_NR) {
    for (uint v = 0; v < GEMM_NR / 16; v++) vstore16(vload16(v, bias), v, t);
  } else {
    GEMM_ZERO_ROW(t)
    for (uint j = 0; j < nn; j++) t[j] = bias[j];
  }
}
#define GEMM_ADD_BIAS(i)                                                     \
  c##i##a += vload16(0, bt_); c##i##b += vload16(1, bt_); c##i##c += vload16(2, bt_); \
  c##i##d += vload16(3, bt_);

// The dropout after the activation (p 0: none), its mask over the (M, ld) output: element (r, c) is
// flat element r * ld + c (cl/dropout.clh).
typedef struct gemm_dropout {
  float p, scale;
  uint seed, step, tensor_id, group0;
} gemm_dropout;

// f (64) = the mask's factors of flat elements e0 .. e0 + nn - 1: one 16-lane Philox call for an
// aligned block of 64, else group by group.
void gemm_drop_factors(float16 *f, const gemm_dropout *d, uint e0, uint nn) {
  if (nn == GEMM_NR && e0 % 64u == 0u) {
    cf_dropout_factors64(d->seed, d->step, d->tensor_id, d->group0, e0 / 4u, d->p, d->scale, f);
    return;
  }
  float t[GEMM_NR];
  for (uint j = 0; j < nn; j++) {
    uint e = e0 + j;
    float4 g = cf_dropout_factors(d->seed, d->step, d->tensor_id, d->group0, e / 4u, d->p, d->scale);
    uint k = e % 4u;
    t[j] = k == 0u ? g.x : k == 1u ? g.y : k == 2u ? g.z : g.w;
  }
  for (uint j = nn; j < GEMM_NR; j++) t[j] = 0.0f;
  for (uint v = 0; v < GEMM_NR / 16; v++) f[v] = vload16(v, t);
}

// dst (rows x nn, row stride ld) = dropout(act(src)), as vectors of 16 (a partial panel through a
// private row, so every column sees the same vector code as activation.cl's kernels); row i is row
// r0 + i of the output, for the mask.
void gemm_act_rows(__global float *dst, __global const float *src, uint rows, uint ld, uint nn, int act, uint r0,
                   uint n0, const gemm_dropout *d) {
  for (uint i = 0; i < rows; i++, dst += ld, src += ld) {
    float16 f[4] = {(float16)(1.0f), (float16)(1.0f), (float16)(1.0f), (float16)(1.0f)};
    if (d->p > 0.0f) gemm_drop_factors(f, d, (r0 + i) * ld + n0, nn);
    if (nn == GEMM_NR) {
      vstore16(act_forward(vload16(0, src), act) * f[0], 0, dst);
      vstore16(act_forward(vload16(1, src), act) * f[1], 1, dst);
      vstore16(act_forward(vload16(2, src), act) * f[2], 2, dst);
      vstore16(act_forward(vload16(3, src), act) * f[3], 3, dst);
    } else {
      float t[GEMM_NR];
      GEMM_ZERO_ROW(t)
      for (uint j = 0; j < nn; j++) t[j] = src[j];
      for (uint v = 0; v < GEMM_NR / 16; v++) vstore16(act_forward(vload16(v, t), act) * f[v], v, t);
      for (uint j = 0; j < nn; j++) dst[j] = t[j];
    }
  }
}

// The tiles of a gemm_an_strips item against its panel of op(B) (PANEL_AS: the panel's address space).
#define GEMM_AN_TILES(PANEL_AS, panel)                                                                             \
  for (uint k0 = 0; k0 < k_all; k0 += kc) { /* K and beta below are the slice's */                              \
    uint K = min(kc, k_all - k0);                                                                                \
    float beta = k0 ? 1.0f : beta_all;                                                                           \
    for (uint tt = t0; tt < t1; tt++) {                                                                          \
      uint m0 = GEMM_MR * tt, r0 = m0;                                                                           \
      GEMM_K_RANGE(m0)                                                                                           \
      PANEL_AS const float *bp = (panel) + (size_t)lo * b_ld;                                                    \
      __global const float *a = a_all + lo;                                                                      \
      GEMM_REP(GEMM_ACC)                                                                                         \
      GEMM_REP(GEMM_ROWPTR)                                                                                      \
      GEMM_KLOOP(hi - lo)                                                                                        \
      if ((epi & GEMM_EPI_BIAS) && k0 == 0) {                                                                    \
        float bt_[GEMM_NR];                                                                                      \
        gemm_bias_row(bt_, bias + bias_off + n0, nn);                                                            \
        GEMM_REP(GEMM_ADD_BIAS)                                                                                  \
      }                                                                                                          \
      GEMM_EPILOGUE                                                                                              \
      if ((epi & GEMM_EPI_ACT) && k0 + K == k_all) {                                                             \
        gemm_dropout d = {drop_p, drop_scale, drop_seed, drop_step, drop_tensor, drop_group0};                   \
        gemm_act_rows(act_out + act_off + (size_t)bo * outer_c + (size_t)bi * stride_c + n0 + (size_t)m0 * ldc,  \
                      c + (size_t)m0 * ldc, min((uint)GEMM_MR, M - m0), ldc, nn, act, m0, n0, &d);               \
      }                                                                                                          \
    }                                                                                                            \
  }

// C (batch, M, N) = A (batch, M, K) op(B) by column strips: item w computes row tiles
// part * mt / parts .. (part + 1) * mt / parts - 1 (part = w / panels) of column panel
// p = w % panels one after another, so the panel stays in cache across them, and items next to
// each other share a part's rows of A. op(B) is read in place when it is B with N a multiple of 64;
// otherwise (B^T: every forward product) the item first packs its panel: into its work-group's local
// memory (lpanel, use_local) where 64 x K floats fit there, else into its own region of S (64 x K
// floats at ((bi * parts + part) * panels + p) * 64 * K). On a CPU device local memory is a region
// of each worker thread, used again by every work-group the thread runs: the packs stay in that
// core's cache, where regions of S, one an item, spill out of it once there are more than it holds
// (the attention's q.k^T with 256 packs of 64 x 64 ran at 109 GFLOP/s from S, against 175 for the
// same product unpacked). Measured against one item per tile: forward products 12-14% faster (no
// gemm_pack_b launch, no per-tile work-group start), the attention's q.k^T 1.6x, in-place products
// with K = 256 2-4%. With B in place the host runs a K over 768 as slices of kc (see the top;
// measured against slices run as separate launches: 4-5% faster at K = 1024 and 2048).
// global: (panels * parts, batch, outer batch), local (1, 1, 1)
__kernel void gemm_an_strips(__global float *C, uint c_off, __global const float *A, uint a_off,
                             __global const float *B, uint b_off, __global float *S, uint M, uint N, uint K, uint lda,
                             uint ldb, uint ldc, uint stride_a, uint stride_b, uint stride_c, uint outer_a,
                             uint outer_b, uint outer_c, int trans_b, uint parts, float alpha, float beta, uint kc,
                             uint tri, uint epi, __global const float *bias, uint bias_off, __global float *act_out, uint act_off,
                             int act, float drop_p, float drop_scale, uint drop_seed, uint drop_step, uint drop_tensor,
                             uint drop_group0, __local float *lpanel, int use_local) {
  GEMM_STRIP_ITEM
  __global const float *b = B + b_off + (size_t)bo * outer_b + (size_t)bi * stride_b;
  __global const float *a_all = A + a_off + (size_t)bo * outer_a + (size_t)bi * stride_a;
  uint k_all = K, b_ld = ldb;
  float beta_all = beta;
  if ((trans_b || N % GEMM_NR) && use_local) {
    for (uint k0 = 0; k0 < K; k0 += 16)
      gemm_pack_block_local(lpanel + (size_t)k0 * GEMM_NR, b, trans_b, K, N, ldb, k0, n0);
    b_ld = GEMM_NR;
    GEMM_AN_TILES(__local, lpanel)
    return;
  }
  __global const float *panel = b + n0;
  if (trans_b || N % GEMM_NR) {
    __global float *own = S + ((ib * parts + part) * nt + p) * GEMM_NR * K;
    for (uint k0 = 0; k0 < K; k0 += 16) gemm_pack_block(own + (size_t)k0 * GEMM_NR, b, trans_b, K, N, ldb, k0, n0);
    panel = own;
    b_ld = GEMM_NR;
  }
  GEMM_AN_TILES(__global, panel)
}
#undef GEMM_ASTEP
#undef GEMM_A

// dbias[m0 .. m0+5] (fewer at M) += the sums over k of op(A) = A^T's rows, A (K, M): the bias
// gradient of a weight-gradient product (cf_gemm_tn_dbias), each summed from 0 in k's order, as
// bias_backward sums a column, so the two give the same bits.
void gemm_dbias_rows(__global float *dbias, __global const float *a, uint K, uint lda, uint m0, uint M) {
  float s[GEMM_MR] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  uint rows = min((uint)GEMM_MR, M - m0);
  a += m0;
  for (uint k = 0; k < K; k++, a += lda)
    for (uint i = 0; i < rows; i++) s[i] += a[i];
  for (uint i = 0; i < rows; i++) dbias[m0 + i] += s[i];
}

// C (batch, M, N) = A^T B, A (batch, K, M) read in place (lda >= M >= 6), B (batch, K, N) read in
// place (N a multiple of 64): gemm_an_strips's column strips and slices of kc. The tile reads
// op(A)'s rows r0..r0+5, r0 = min(m0, M - 6): the last row tile slides up to end at row M - 1
// rather than read past A's rows (rows r0..m0-1 are the tile above's and are not stored), so one
// branch-free loop serves every tile (two loops, full and clamped, made PoCL's register allocator
// spill accumulators). Against gemm_at (one item per tile, slices as separate launches), run
// alternately with that build (medians of 4 runs each, cores 500 ns apart): the model's weight
// gradients 768 x 256 x 1024 26% faster, 256 x 256 x 1024 13%, 256 x 1024 x 1024 1%; in one process
// with the cores 120-170 ns apart, 0-11%. with_dbias (one matrix): the items of column panel 0 also
// add op(A)'s row sums to dbias (gemm_dbias_rows) before their products.
// global: (panels * parts, batch, outer batch), local (1, 1, 1)
__kernel void gemm_at_strips(__global float *C, uint c_off, __global const float *A, uint a_off,
                             __global const float *B, uint b_off, uint M, uint N, uint K, uint lda, uint ldb, uint ldc,
                             uint stride_a, uint stride_b, uint stride_c, uint outer_a, uint outer_b, uint outer_c,
                             uint parts, float alpha, float beta, uint kc, uint tri, __global float *dbias,
                             uint dbias_off, int with_dbias) {
  GEMM_STRIP_ITEM
  if (with_dbias && p == 0)  // the first column panel's items also sum their rows of op(A) into dbias
    for (uint tt = t0; tt < t1; tt++) gemm_dbias_rows(dbias + dbias_off, A + a_off, K, lda, GEMM_MR * tt, M);
  __global const float *panel = B + b_off + (size_t)bo * outer_b + (size_t)bi * stride_b + n0;
  __global const float *a = A + a_off + (size_t)bo * outer_a + (size_t)bi * stride_a;
  uint k_all = K, b_ld = ldb;
  float beta_all = beta;
  for (uint k0 = 0; k0 < k_all; k0 += kc) {  // K and beta below are the slice's
    uint K = min(kc, k_all - k0);
    float beta = k0 ? 1.0f : beta_all;
    for (uint tt = t0; tt < t1; tt++) {
      uint m0 = GEMM_MR * tt, r0 = min(m0, M - GEMM_MR);
      GEMM_K_RANGE(r0)
      __global const float *bp = panel + (size_t)lo * b_ld, *ak = a + (size_t)lo * lda + r0;
      GEMM_REP(GEMM_ACC)
#define GEMM_A(i) ak[i]
#define GEMM_ASTEP , ak += lda
      GEMM_KLOOP(hi - lo)
#undef GEMM_ASTEP
#undef GEMM_A
      GEMM_EPILOGUE
    }
  }
}

// C (batch, M, N) = A^T B, B read in place as in gemm_at_strips, A^T packed by the item that reads
// it: item (part, g) takes row tiles part * per .. part * per + per - 1 and column group g of
// groups (panels g * nt / groups .. (g + 1) * nt / groups - 1), packs the K x 6 panels of A^T for its
// tiles (zero past row M) into its own region of S (per * 6 * K floats at ((bi * groups + g) * parts
// + part) * that), then computes them against each of its column panels in turn, in slices of kc.
// For an A whose rows lie a multiple of 4 KiB apart (read in place, a tile's k loop would put
// every row in the same cache sets) or M < 6. Against gemm_pack_at then gemm_at: 1024 x 256 x 1024
// 20% faster, run alternately with that build as above; in one process 7-13% (and 1024 x 1024 x
// 1024 6%). Eight row tiles an item beat 4 and 16 by 8-12%; column groups (each packing the same
// rows again) only where the row parts alone would leave compute units idle.
// global: (parts * groups, batch), local (1, 1)
__kernel void gemm_at_rows(__global float *C, uint c_off, __global const float *A, uint a_off,
                           __global const float *B, uint b_off, __global float *S, uint M, uint N, uint K, uint lda,
                           uint ldb, uint ldc, uint stride_a, uint stride_b, uint stride_c, uint per, uint groups,
                           float alpha, float beta, uint kc, uint tri) {
  uint w = get_global_id(0), bi = get_global_id(1);
  uint mt = (M + GEMM_MR - 1) / GEMM_MR, nt = (N + GEMM_NR - 1) / GEMM_NR, parts = (mt + per - 1) / per;
  uint part = w % parts, g = w / parts;
  if (g >= groups) return;
  uint t0 = part * per, t1 = min(t0 + per, mt), m_lo = GEMM_MR * t0, mn = min(GEMM_MR * t1, M) - m_lo;
  size_t a_panel = (size_t)GEMM_MR * K;
  __global float *own = S + (((size_t)bi * groups + g) * parts + part) * per * a_panel;
  __global const float *a = A + a_off + (size_t)bi * stride_a + m_lo;
  uint t8 = mn / (8 * GEMM_MR) * 8;  // tiles packed 8 at a time, then the rest one at a time
  for (uint t = 0; t < t8; t += 8) gemm_pack_at8(own + t * a_panel, a + GEMM_MR * t, K, lda, a_panel);
  for (uint t = t8; t < t1 - t0; t++) {
    __global const float *src = a + GEMM_MR * t;
    __global float *dst = own + t * a_panel;
    if (GEMM_MR * t + GEMM_MR <= mn) {
      for (uint k = 0; k < K; k++, src += lda, dst += GEMM_MR) {
        vstore4(vload4(0, src), 0, dst);
        vstore2(vload2(0, src + 4), 0, dst + 4);
      }
    } else {
      for (uint k = 0; k < K; k++, src += lda, dst += GEMM_MR)
        for (uint i = 0; i < GEMM_MR; i++) dst[i] = GEMM_MR * t + i < mn ? src[i] : 0.0f;
    }
  }
  uint k_all = K, b_ld = ldb;
  float beta_all = beta;
  for (uint p = (uint)((ulong)g * nt / groups); p < (uint)(((ulong)g + 1) * nt / groups); p++) {
    uint n0 = GEMM_NR * p, nn = min((uint)GEMM_NR, N - n0);
    __global const float *panel = B + b_off + (size_t)bi * stride_b + n0;
    __global float *c = C + c_off + (size_t)bi * stride_c + n0;
    for (uint k0 = 0; k0 < k_all; k0 += kc) {  // K and beta below are the slice's
      uint K = min(kc, k_all - k0);
      float beta = k0 ? 1.0f : beta_all;
      for (uint tt = t0; tt < t1; tt++) {
        uint m0 = GEMM_MR * tt, r0 = m0;
        GEMM_K_RANGE(m0)
        __global const float *bp = panel + (size_t)lo * b_ld, *ak = own + (tt - t0) * a_panel + (size_t)lo * GEMM_MR;
        GEMM_REP(GEMM_ACC)
#define GEMM_A(i) ak[i]
#define GEMM_ASTEP , ak += GEMM_MR
        GEMM_KLOOP(hi - lo)
#undef GEMM_ASTEP
#undef GEMM_A
        GEMM_EPILOGUE
      }
    }
  }
}

// C (batch, M, N) with op(A) = A^T, A (batch, K, M), where op(B) needs packing (gemm_pack_b), or
// any op(A) when K = 0 (C = beta C, nothing read): lda 6 means packed by gemm_pack_at (row tile
// m0 / 6 is the zero-padded K x 6 panel at m0 * K; the host packs every A^T with M < 6 or rows a
// multiple of 4 KiB apart), else A is read in place with row stride lda (>= M >= 6; lda 6 in
// place is M = 6, one tile, the same layout) from row r0 = min(m0, M - 6), as in gemm_at_strips.
// global: (tiles, batch), local (1, 1)
__kernel void gemm_at(GEMM_ARGS) {
  GEMM_PROLOGUE
  uint r0 = lda == GEMM_MR ? m0 : min(m0, M - GEMM_MR);
  __global const float *ak = a + (lda == GEMM_MR ? (size_t)m0 * K : r0);
#define GEMM_A(i) ak[i]
#define GEMM_ASTEP , ak += lda
  GEMM_KLOOP(K)
#undef GEMM_ASTEP
#undef GEMM_A
  GEMM_EPILOGUE
}

// The device's fp32 FMA rate: 16 independent float16 chains per item, iters rounds each.
// out (items) receives a sum so nothing is optimised away. flops = items * iters * 16 * 16 * 2.
__kernel void gemm_fma_peak(__global float *out, uint out_off, uint iters, float x) {
  float16 m = (float16)(x), d = (float16)(1.0f - x);
#define PEAK_DECL(i) float16 r##i = (float16)(x * (i + 1));
#define PEAK_STEP(i) r##i = fma(r##i, m, d);
#define PEAK_REP(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
  PEAK_REP(PEAK_DECL)
  for (uint i = 0; i < iters; i++) {
    PEAK_REP(PEAK_STEP)
  }
  float16 s = r0 + r1 + r2 + r3 + r4 + r5 + r6 + r7 + r8 + r9 + r10 + r11 + r12 + r13 + r14 + r15;
  out[out_off + get_global_id(0)] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 + s.sa +
                                    s.sb + s.sc + s.sd + s.se + s.sf;
}

// How many loop trips one work-item may run: out[0] = the trips a loop of n made, each reading
// in[c & 1] (both 1), so no compiler can count the loop away. Where that is less than n the device
// stops loops early (Mesa's llvmpipe: after 65535 trips of all of an item's loops together).
// global: (1), local (1)
__kernel void gemm_loop_probe(__global uint *out, uint out_off, __global const uint *in, uint in_off, uint n) {
  uint c = 0;
  for (uint i = 0; i < n; i++) c += in[in_off + (c & 1)];
  out[out_off] = c;
}
