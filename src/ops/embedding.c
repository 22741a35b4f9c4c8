/* Launchers for the embedding kernels (cl/embedding.cl): argument checks and launch shapes. */
#include "clformer/ops.h"
#include "runtime/runtime.h"

static cf_status check_dims(int B, int T, int C, int V) {
  if (B <= 0 || T <= 0 || C <= 0 || V <= 0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "embedding: B=%d T=%d C=%d V=%d must be positive", B, T, C, V);
  if ((long long)B * T > 0x7fffffff || (long long)V * C > 0xffffffffLL || (long long)B * T * C > 0xffffffffLL)
    return CF_FAIL(CF_ERR_INVALID_ARG, "embedding: B*T*C = %lld or V*C = %lld too large", (long long)B * T * C,
                   (long long)V * C);
  return CF_OK;
}

/* Work-groups of (channels, positions) for the per-(c, t) kernels: up to 64 x 4, within the
 * device's work-group limit (Oclgrind's can be 64). */
static void channel_groups(cf_context *ctx, int C, size_t local[2]) {
  size_t lx = C >= 64 ? 64 : (C >= 16 ? 16 : 4), ly = 4, cap = cf_program_wg(ctx, "embedding");
  while (lx * ly > cap && ly > 1) ly /= 2;
  while (lx * ly > cap && lx > 1) lx /= 2;
  local[0] = lx;
  local[1] = ly;
}

cf_status cf_embedding_forward(cf_context *ctx, cf_mem out, cf_mem tokens, cf_mem wte, cf_mem wpe, int B, int T,
                               int C, int V, float token_scale) {
  CF_TRY(check_dims(B, T, C, V));
  int cpu = cf_context_cpu_shapes(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "embedding", cpu ? "embedding_forward_cpu" : "embedding_forward");
  CF_ARG_MEMS(&L, out, tokens, wte, wpe);  /* a NULL buffer is a valid (unused) argument when positions are sinusoidal */
  CF_ARG_INTS(&L, wpe.buf != NULL, B, T, C, V);
  cf_arg_float(&L, token_scale);
  size_t global[2] = {(size_t)C, (size_t)T}, local[2] = {1, 1};
  if (cpu) global[0] = ((size_t)C + 15) / 16;
  else channel_groups(ctx, C, local);
  return cf_launch_run(&L, 2, global, local);
}

/* CPU kernels (cl/embedding.cl): dwte by one work-item per (128 columns, VT token ids), with the
 * range's rows sorted by token in local memory (N + VT + 2 ints); VT splits the vocabulary into
 * enough ranges for ~8 work-items (load balance on a few cores) and keeps the arrays within half
 * the local memory. dwpe by one work-item per t. */
static cf_status backward_cpu(cf_context *ctx, cf_mem dwte, cf_mem dwpe, cf_mem dout, cf_mem tokens, int B, int T,
                              int C, int V, float token_scale, size_t VT) {
  cf_launch L;
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wte_cpu");
  CF_ARG_MEMS(&L, dwte, dout, tokens);
  cf_arg_local(&L, (size_t)B * T * sizeof(int));
  cf_arg_local(&L, (VT + 2) * sizeof(int));
  CF_ARG_INTS(&L, (int)VT, B * T, C, V);
  cf_arg_float(&L, token_scale);
  size_t global[2] = {((size_t)C + 127) / 128, ((size_t)V + VT - 1) / VT}, local[2] = {1, 1};
  CF_TRY(cf_launch_run(&L, 2, global, local));
  if (!dwpe.buf) return CF_OK;
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wpe_cpu");
  cf_arg_mem(&L, dwpe);
  cf_arg_mem(&L, dout);
  CF_ARG_INTS(&L, B, T, C);
  size_t g = (size_t)T, l = 1;
  return cf_launch_run(&L, 1, &g, &l);
}

/* The token range of one CPU work-item, or 0 when even one token's list does not fit. */
static size_t cpu_range(const cf_context *ctx, int N, int C, int V) {
  size_t chunks = ((size_t)C + 127) / 128, ranges = chunks >= 8 ? 1 : (8 + chunks - 1) / chunks;
  size_t VT = ((size_t)V + ranges - 1) / ranges, room = (size_t)(ctx->info.local_mem / 2 / sizeof(int));
  if (room < (size_t)N + 3) return 0;
  if (VT > room - N - 2) VT = room - N - 2;
  return VT;
}

cf_status cf_embedding_backward(cf_context *ctx, cf_mem dwte, cf_mem dwpe, cf_mem dout, cf_mem tokens, int B, int T,
                                int C, int V, float token_scale) {
  CF_TRY(check_dims(B, T, C, V));
  size_t VT = cf_context_cpu_shapes(ctx) ? cpu_range(ctx, B * T, C, V) : 0;
  if (VT) return backward_cpu(ctx, dwte, dwpe, dout, tokens, B, T, C, V, token_scale, VT);
  cf_launch L;
  size_t wg = cf_program_wg(ctx, "embedding");
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wte");
  CF_ARG_MEMS(&L, dwte, dout, tokens);
  cf_arg_int(&L, B * T);
  cf_arg_int(&L, C);
  cf_arg_float(&L, token_scale);
  size_t global[2] = {cf_round_up((size_t)C, wg), (size_t)V}, local[2] = {wg, 1};
  CF_TRY(cf_launch_run(&L, 2, global, local));
  if (!dwpe.buf) return CF_OK;
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wpe");
  cf_arg_mem(&L, dwpe);
  cf_arg_mem(&L, dout);
  CF_ARG_INTS(&L, B, T, C);
  size_t g2[2] = {(size_t)C, (size_t)T}, l2[2];
  channel_groups(ctx, C, l2);
  return cf_launch_run(&L, 2, g2, l2);
}

long cf_embedding_check_tokens(const int *tokens, size_t n, int V) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V) return (long)i;
  return -1;
}
