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
// the B sequences, so each position value is computed (sinusoids) or read (wpe) once.
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
    int tok = tokens[tokens_off + n];
    float e = (tok >= 0 && tok < V) ? token_scale * wte[wte_off + (size_t)tok * C + c] : 0.0f;
    out[out_off + n * C + c] = e + p;
  }
}

#if CF_DEVICE_IS_CPU

// dwte[v, c] += token_scale * sum of dout[n, c] over the rows n with tokens[n] == v, in
// increasing n, compensated (Kahan) as below. On CPUs one work-item per (128-column chunk j, v)
// (global (ceil(C / 128), V), local (1, 1)): it scans the tokens itself, 16 at a time, and adds
// each matching row's 128 columns with 16-float vectors (a whole chunk: constant trip counts, the
// sums stay in registers); no barriers, no atomics, bit-identical on every run.
#define EMB_CHUNK 128
__kernel void embedding_backward_wte(__global float *dwte, uint dwte_off,
                                     __global const float *dout, uint dout_off,
                                     __global const int *tokens, uint tokens_off,
                                     int N, int C, float token_scale) {
  int c0 = get_global_id(0) * EMB_CHUNK, v = get_global_id(1);
  if (c0 >= C) return;
  int nv = min(EMB_CHUNK, C - c0) / 16, cend = min(C, c0 + EMB_CHUNK);  // whole vectors, then a tail
  float16 acc[EMB_CHUNK / 16], comp[EMB_CHUNK / 16];
  float tacc[16], tcomp[16];
  for (int k = 0; k < EMB_CHUNK / 16; k++) acc[k] = comp[k] = (float16)(0.0f);
  for (int k = 0; k < 16; k++) tacc[k] = tcomp[k] = 0.0f;
  __global const int *tok = tokens + tokens_off;
  for (int n0 = 0; n0 < N; n0 += 16) {
    // 16 tokens at a time: most blocks hold no v at all (a vector compare skips them)
    if (n0 + 16 <= N && !any(vload16(0, tok + n0) == (int16)(v))) continue;
    for (int n = n0; n < min(N, n0 + 16); n++) {
      if (tok[n] != v) continue;
      __global const float *d = dout + dout_off + (size_t)n * C + c0;
      if (nv == EMB_CHUNK / 16) {
#pragma unroll
        for (int k = 0; k < EMB_CHUNK / 16; k++) {
          float16 y = vload16(k, d) - comp[k], s = acc[k] + y;
          comp[k] = (s - acc[k]) - y;
          acc[k] = s;
        }
        continue;
      }
      for (int k = 0; k < nv; k++) {
        float16 y = vload16(k, d) - comp[k], s = acc[k] + y;
        comp[k] = (s - acc[k]) - y;
        acc[k] = s;
      }
      for (int c = c0 + 16 * nv; c < cend; c++) {
        int k = c - c0 - 16 * nv;
        float y = d[c - c0] - tcomp[k], s = tacc[k] + y;
        tcomp[k] = (s - tacc[k]) - y;
        tacc[k] = s;
      }
    }
  }
  __global float *w = dwte + dwte_off + (size_t)v * C + c0;
  for (int k = 0; k < nv; k++) vstore16(vload16(k, w) + token_scale * acc[k], k, w);
  for (int c = c0 + 16 * nv; c < cend; c++) w[c - c0] += token_scale * tacc[c - c0 - 16 * nv];
}

#else  // one work-group per (column tile, v)

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

#endif

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
