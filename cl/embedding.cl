// Token + position embeddings and their backward. Every pointer comes with an element offset.
// Token ids outside [0, V) never index wte: their token part is 0 and they add nothing to dwte.

// Sinusoidal position (t, c) of C channels (Vaswani et al. 2017, section 3.5):
// pos[t, 2i] = sin(t * w_i), pos[t, 2i+1] = cos(t * w_i), w_i = 10000^(-2i/C).
// fp32: w_i carries a relative error of a few 1e-7 (the rounded exponent), so the angle
// t * w_i is off by up to ~3e-7 * t radians; the tests' tolerance says so.
inline float sinusoid(int t, int c, int C) {
  float w = exp((float)(c & ~1) * (-9.210340371976184f / (float)C));  // -ln(10000) * 2i / C
  float a = (float)t * w;
  return (c & 1) ? cos(a) : sin(a);
}

// out[b, t, c] = token_scale * wte[tokens[b, t], c] + pos[t, c]. One work-item per (c, t) walks
// the B sequences, so each position value is computed (sinusoids) or read (wpe) once. On CPUs
// (embedding_forward_cpu) an item takes 16 channels at once: the position's 16 values as one vector
// (the sinusoids' exp, sin and cos in vector registers), then 64-byte loads and stores per sequence;
// measured against the per-channel kernel at 1024 tokens x 256 channels: see src/ops/embedding.c.
inline float token_value(__global const int *tokens, __global const float *wte, size_t n, int c, int C, int V,
                         float token_scale) {
  int tok = tokens[n];
  return (tok >= 0 && tok < V) ? token_scale * wte[(size_t)tok * C + c] : 0.0f;
}

__kernel void embedding_forward(__global float *out, uint out_off,
                                __global const int *tokens, uint tokens_off,
                                __global const float *wte, uint wte_off,
                                __global const float *wpe, uint wpe_off,
                                int learned, int B, int T, int C, int V, float token_scale) {
  int c = get_global_id(0), t = get_global_id(1);
  if (c >= C || t >= T) return;
  float p = learned ? wpe[wpe_off + (size_t)t * C + c] : sinusoid(t, c, C);
  for (int b = 0; b < B; b++) {
    size_t n = (size_t)b * T + t;
    out[out_off + n * C + c] = token_value(tokens + tokens_off, wte + wte_off, n, c, C, V, token_scale) + p;
  }
}

// The sinusoids of channels c0 .. c0+15 at position t, as sinusoid() computes each.
inline float16 sinusoid16(int t, int c0, int C) {
  int16 c = (int16)(c0) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  float16 w = exp(convert_float16(c & (int16)(~1)) * (-9.210340371976184f / (float)C));
  float16 a = (float)t * w;
  return select(sin(a), cos(a), (c & (int16)(1)) != (int16)(0));
}

// global (ceil(C / 16), T), local (1, 1): channels past a multiple of 16 one at a time.
__kernel void embedding_forward_cpu(__global float *out, uint out_off,
                                    __global const int *tokens, uint tokens_off,
                                    __global const float *wte, uint wte_off,
                                    __global const float *wpe, uint wpe_off,
                                    int learned, int B, int T, int C, int V, float token_scale) {
  int c0 = get_global_id(0) * 16, t = get_global_id(1);
  if (c0 >= C || t >= T) return;
  __global const int *tok = tokens + tokens_off;
  if (c0 + 16 <= C) {
    float16 p = learned ? vload16(0, wpe + wpe_off + (size_t)t * C + c0) : sinusoid16(t, c0, C);
    for (int b = 0; b < B; b++) {
      size_t n = (size_t)b * T + t;
      int id = tok[n];
      float16 e = (id >= 0 && id < V) ? token_scale * vload16(0, wte + wte_off + (size_t)id * C + c0) : (float16)(0.0f);
      vstore16(e + p, 0, out + out_off + n * C + c0);
    }
    return;
  }
  for (int c = c0; c < C; c++) {
    float p = learned ? wpe[wpe_off + (size_t)t * C + c] : sinusoid(t, c, C);
    for (int b = 0; b < B; b++) {
      size_t n = (size_t)b * T + t;
      out[out_off + n * C + c] = token_value(tok, wte + wte_off, n, c, C, V, token_scale) + p;
    }
  }
}

#if CF_DEVICE_IS_CPU

// dwte[v, c] += token_scale * sum of dout[n, c] over the rows n with tokens[n] == v, in
// increasing n, compensated (Kahan: a frequent token, a space in byte-level text, repeats
// thousands of times per batch, and a plain fp32 running sum then loses ~1e-4 of the result when
// terms cancel). On CPUs one work-item (a work-group of one) per (128-column chunk j, range of VT
// token ids r): global (ceil(C / 128), ceil(V / VT)). It first sorts the rows of its token range
// by token (a counting sort of the N token ids into local memory: `list`, n increasing within a
// token), then walks each token's rows with the whole chunk's sums in registers (16-float
// vectors) and adds them into dwte once. dout is read once in all (each row chunk by the one
// item that owns its token), 512 contiguous bytes at a time; no barriers, no atomics,
// bit-identical on every run.
#define EMB_CHUNK 128
__kernel void embedding_backward_wte_cpu(__global float *dwte, uint dwte_off,
                                         __global const float *dout, uint dout_off,
                                         __global const int *tokens, uint tokens_off,
                                         __local int *list,   // (N): rows, grouped by token
                                         __local int *start,  // (VT + 2)
                                         int VT, int N, int C, int V, float token_scale) {
  int c0 = get_global_id(0) * EMB_CHUNK, v0 = get_global_id(1) * VT;
  if (c0 >= C || v0 >= V) return;
  int nv = min(VT, V - v0), nc = min(EMB_CHUNK, C - c0), n16 = nc / 16;
  __global const int *tok = tokens + tokens_off;
  // counting sort: start[k + 1] counts token v0 + k, then its end, then (placing rows from the
  // last) its beginning; so token k's rows are list[start[k + 1] .. start[k + 2])
  for (int k = 0; k < nv + 2; k++) start[k] = 0;
  for (int n = 0; n < N; n++) {
    int k = tok[n] - v0;
    if (k >= 0 && k < nv) start[k + 1]++;
  }
  for (int k = 0; k < nv; k++) start[k + 1] += start[k];
  int total = start[nv];
  for (int n = N - 1; n >= 0; n--) {
    int k = tok[n] - v0;
    if (k >= 0 && k < nv) list[--start[k + 1]] = n;
  }
  start[nv + 1] = total;
  __global const float *d0 = dout + dout_off + c0;
  for (int k = 0; k < nv; k++) {
    int b = start[k + 1], e = start[k + 2];
    if (b == e) continue;
    __global float *w = dwte + dwte_off + (size_t)(v0 + k) * C + c0;
    if (n16 == EMB_CHUNK / 16) {  // a whole chunk: constant trip counts, the sums stay in registers
      float16 acc[EMB_CHUNK / 16], comp[EMB_CHUNK / 16];
      for (int i = 0; i < EMB_CHUNK / 16; i++) acc[i] = comp[i] = (float16)(0.0f);
      for (int r = b; r < e; r++) {
        __global const float *d = d0 + (size_t)list[r] * C;
#pragma unroll
        for (int i = 0; i < EMB_CHUNK / 16; i++) {
          float16 y = vload16(i, d) - comp[i], s = acc[i] + y;
          comp[i] = (s - acc[i]) - y;
          acc[i] = s;
        }
      }
#pragma unroll
      for (int i = 0; i < EMB_CHUNK / 16; i++) vstore16(vload16(i, w) + token_scale * acc[i], i, w);
      continue;
    }
    for (int i = 0; i < n16; i++) {  // the last chunk of a C that is not a multiple of 128
      float16 acc = (float16)(0.0f), comp = acc;
      for (int r = b; r < e; r++) {
        float16 y = vload16(i, d0 + (size_t)list[r] * C) - comp, s = acc + y;
        comp = (s - acc) - y;
        acc = s;
      }
      vstore16(vload16(i, w) + token_scale * acc, i, w);
    }
    for (int c = 16 * n16; c < nc; c++) {
      float acc = 0.0f, comp = 0.0f;
      for (int r = b; r < e; r++) {
        float y = d0[(size_t)list[r] * C + c] - comp, s = acc + y;
        comp = (s - acc) - y;
        acc = s;
      }
      w[c] += token_scale * acc;
    }
  }
}

// dwpe[t, c] += sum over b of dout[b, t, c], b in order (the arithmetic of
// embedding_backward_wpe). On CPUs one work-item per t: 256 columns at a time in 16 vectors.
__kernel void embedding_backward_wpe_cpu(__global float *dwpe, uint dwpe_off,
                                         __global const float *dout, uint dout_off,
                                         int B, int T, int C) {
  int t = get_global_id(0);
  if (t >= T) return;
  __global float *w = dwpe + dwpe_off + (size_t)t * C;
  __global const float *d0 = dout + dout_off + (size_t)t * C;
  size_t stride = (size_t)T * C;
  int c = 0;
  for (; c + 256 <= C; c += 256) {
    float16 acc[16];
    for (int i = 0; i < 16; i++) acc[i] = (float16)(0.0f);
    for (int b = 0; b < B; b++) {
#pragma unroll
      for (int i = 0; i < 16; i++) acc[i] += vload16(i, d0 + b * stride + c);
    }
#pragma unroll
    for (int i = 0; i < 16; i++) vstore16(vload16(i, w + c) + acc[i], i, w + c);
  }
  for (; c + 16 <= C; c += 16) {
    float16 acc = (float16)(0.0f);
    for (int b = 0; b < B; b++) acc += vload16(0, d0 + b * stride + c);
    vstore16(vload16(0, w + c) + acc, 0, w + c);
  }
  for (; c < C; c++) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += d0[b * stride + c];
    w[c] += acc;
  }
}

#endif

// Elsewhere, and on CPUs when the token list would not fit in local memory: one work-group per
// (column tile, v).

// dwte[v, c] += token_scale * sum of dout[n, c] over the rows n with tokens[n] == v, in
// increasing n. One work-group per (column tile, v): it walks the tokens CF_WG at a time, finds
// the matching rows with a prefix sum over flags (local memory, fixed order) and every
// work-item adds those rows' column c. No atomics: bit-identical on every run. The sum is
// compensated (Kahan): a frequent token (a space in byte-level text) repeats thousands of times
// per batch, and a plain fp32 running sum then loses ~1e-4 of the result when terms cancel.
__kernel __attribute__((reqd_work_group_size(CF_WG, 1, 1)))
void embedding_backward_wte(__global float *dwte, uint dwte_off,
                            __global const float *dout, uint dout_off,
                            __global const int *tokens, uint tokens_off,
                            int N, int C, float token_scale) {
  __local int scan[CF_WG];
  __local int rows[CF_WG];
  int lid = get_local_id(0);
  int c = get_group_id(0) * CF_WG + lid;
  int v = get_group_id(1);
  float acc = 0.0f, comp = 0.0f;
  for (int base = 0; base < N; base += CF_WG) {
    int n = base + lid;
    int flag = (n < N && tokens[tokens_off + n] == v) ? 1 : 0;
    scan[lid] = flag;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = 1; d < CF_WG; d <<= 1) {  // inclusive Hillis-Steele scan
      int add = lid >= d ? scan[lid - d] : 0;
      barrier(CLK_LOCAL_MEM_FENCE);
      scan[lid] += add;
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    int count = scan[CF_WG - 1];
    if (flag) rows[scan[lid] - 1] = n;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (c < C)
      for (int k = 0; k < count; k++) {
        float y = dout[dout_off + (size_t)rows[k] * C + c] - comp;
        float s = acc + y;
        comp = (s - acc) - y;
        acc = s;
      }
    barrier(CLK_LOCAL_MEM_FENCE);  // rows and scan are rewritten by the next chunk
  }
  if (c < C) dwte[dwte_off + (size_t)v * C + c] += token_scale * acc;
}

// dwpe[t, c] += sum over b of dout[b, t, c], b in order. One work-item per (c, t).
__kernel void embedding_backward_wpe(__global float *dwpe, uint dwpe_off,
                                     __global const float *dout, uint dout_off,
                                     int B, int T, int C) {
  int c = get_global_id(0), t = get_global_id(1);
  if (c >= C || t >= T) return;
  float acc = 0.0f;
  for (int b = 0; b < B; b++) acc += dout[dout_off + ((size_t)b * T + t) * C + c];
  dwpe[dwpe_off + (size_t)t * C + c] += acc;
}
