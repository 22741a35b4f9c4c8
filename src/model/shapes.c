/* The matrix products of one training step, the one list `bench gemm`, `bench step` and `tune` use,
 * and their FLOP count (the causal attention's zeros left out: cf_gemm_shape_flops). Must match what model.c issues: forward, the data and weight gradients of
 * every linear layer, and with materialised attention its six batched products per layer. */
#include <stdio.h>
#include "clformer/model.h"

/* An encoder-decoder's step at its largest batch (data.max_tokens a side): the blocks' products in
 * both stacks, the cross-attention's in the decoder's, the logits' once. */
int cf_model_gemm_shapes(const cf_config *cfg, cf_gemm_shape *sh) {
  int B, Tlen;
  cf_model_shape(cfg, &B, &Tlen);
  size_t N = (size_t)B * Tlen, C = (size_t)cfg->model.d_model;
  size_t F = (size_t)cfg->model.d_ff, V = (size_t)cfg->model.vocab, T = (size_t)Tlen;
  size_t NH = (size_t)(cfg->model.heads > 0 ? cfg->model.heads : 1), HS = C / NH;
  int layers = cfg->model.layers > 0 ? cfg->model.layers : 1, seq2seq = cfg->model.arch == CF_ARCH_ENCODER_DECODER;
  int blocks = layers + (seq2seq ? cfg->model.encoder_layers : 0);
  size_t BNH = (size_t)B * NH;
  struct { const char *name; size_t out, in; int per_step; } lin[] = {
      {"qkv", 3 * C, C, blocks}, {"proj", C, C, blocks}, {"fc1", F, C, blocks}, {"fc2", C, F, blocks},
      {"logits", V, C, 1},       {"cross q", C, C, layers}, {"cross kv", 2 * C, C, layers}, {"cross proj", C, C, layers}};
  int n = 0;
  for (int i = 0; i < (seq2seq ? 8 : 5); i++) {
    int per_step = lin[i].per_step;
    cf_gemm_shape f = {"", 0, 1, N, lin[i].out, lin[i].in, 1, 0.0f, per_step, CF_GEMM_FULL};
    cf_gemm_shape dw = {"", 1, 0, lin[i].out, lin[i].in, N, 1, 1.0f, per_step, CF_GEMM_FULL};
    cf_gemm_shape dx = {"", 0, 0, N, lin[i].in, lin[i].out, 1, 0.0f, per_step, CF_GEMM_FULL};
    snprintf(f.name, sizeof f.name, "%s fwd", lin[i].name);
    snprintf(dw.name, sizeof dw.name, "%s dW", lin[i].name);
    snprintf(dx.name, sizeof dx.name, "%s dx", lin[i].name);
    sh[n++] = f;
    sh[n++] = dw;
    sh[n++] = dx;
  }
  /* only the scores' lower triangles are read; the causal probabilities and their gradients are
   * lower triangles, their transposes upper */
  cf_gemm_shape att[] = {{"att q.kT", 0, 1, T, T, HS, BNH, 0.0f, layers, CF_GEMM_C_LOWER},
                         {"att p.v", 0, 0, T, HS, T, BNH, 0.0f, layers, CF_GEMM_A_LOWER},
                         {"att dv=pT.dy", 1, 0, T, HS, T, BNH, 0.0f, layers, CF_GEMM_A_UPPER},
                         {"att dp=dy.vT", 0, 1, T, T, HS, BNH, 0.0f, layers, CF_GEMM_C_LOWER},
                         {"att dq=ds.k", 0, 0, T, HS, T, BNH, 0.0f, layers, CF_GEMM_A_LOWER},
                         {"att dk=dsT.q", 1, 0, T, HS, T, BNH, 0.0f, layers, CF_GEMM_A_UPPER}};
  if (cfg->model.attention == CF_ATTENTION_MATERIALIZED)  /* fused attention runs no GEMM */
    for (size_t i = 0; i < sizeof att / sizeof *att; i++) sh[n++] = att[i];
  return n;
}

double cf_model_gemm_flops(const cf_config *cfg) {
  cf_gemm_shape sh[CF_GEMM_MAX_SHAPES];
  double flops = 0;
  for (int i = 0, n = cf_model_gemm_shapes(cfg, sh); i < n; i++)
    flops += cf_gemm_shape_flops(&sh[i]) * sh[i].per_step;
  return flops;
}

void cf_model_shape(const cf_config *c, int *B, int *T) { cf_config_model_shape(c, B, T); }
