/* Launchers for the embedding kernels (cl/embedding.cl): argument checks and launch shapes. */
#include "clformer/embedding.h"
#include "internal.h"

static cf_status check_dims(int B, int T, int C, int V) {
  if (B <= 0 || T <= 0 || C <= 0 || V <= 0)
    return CF_FAIL(CF_ERR_INVALID_ARG, "embedding: B=%d T=%d C=%d V=%d must be positive", B, T, C, V);
  if ((long long)B * T > 0x7fffffff || (long long)V * C > 0xffffffffLL || (long long)B * T * C > 0xffffffffLL)
    return CF_FAIL(CF_ERR_INVALID_ARG, "embedding: B*T*C = %lld or V*C = %lld too large", (long long)B * T * C,
                   (long long)V * C);
  return CF_OK;
}

cf_status cf_embedding_forward(cf_context *ctx, cf_mem out, cf_mem tokens, cf_mem wte, cf_mem wpe, int B, int T,
                               int C, int V, float token_scale) {
  CF_TRY(check_dims(B, T, C, V));
  cf_launch L;
  cf_launch_begin(&L, ctx, "embedding", "embedding_forward");
  cf_arg_mem(&L, out);
  cf_arg_mem(&L, tokens);
  cf_arg_mem(&L, wte);
  cf_arg_mem(&L, wpe);  /* a NULL buffer is a valid (unused) argument when positions are sinusoidal */
  cf_arg_int(&L, wpe.buf != NULL);
  cf_arg_int(&L, B);
  cf_arg_int(&L, T);
  cf_arg_int(&L, C);
  cf_arg_int(&L, V);
  cf_arg_float(&L, token_scale);
  size_t lx = C >= 64 ? 64 : (C >= 16 ? 16 : 4);
  size_t global[2] = {(size_t)C, (size_t)T}, local[2] = {lx, 4};
  return cf_launch_run(&L, 2, global, local);
}

cf_status cf_embedding_backward(cf_context *ctx, cf_mem dwte, cf_mem dwpe, cf_mem dout, cf_mem tokens, int B, int T,
                                int C, int V, float token_scale) {
  CF_TRY(check_dims(B, T, C, V));
  size_t wg = cf_context_wg(ctx);
  cf_launch L;
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wte");
  cf_arg_mem(&L, dwte);
  cf_arg_mem(&L, dout);
  cf_arg_mem(&L, tokens);
  cf_arg_int(&L, B * T);
  cf_arg_int(&L, C);
  cf_arg_float(&L, token_scale);
  size_t global[2] = {cf_round_up((size_t)C, wg), (size_t)V}, local[2] = {wg, 1};
  if (ctx->info.type & CL_DEVICE_TYPE_CPU) {  /* one item per (128 columns, v): cl/embedding.cl */
    global[0] = ((size_t)C + 127) / 128;
    local[0] = 1;
  }
  CF_TRY(cf_launch_run(&L, 2, global, local));
  if (!dwpe.buf) return CF_OK;
  cf_launch_begin(&L, ctx, "embedding", "embedding_backward_wpe");
  cf_arg_mem(&L, dwpe);
  cf_arg_mem(&L, dout);
  cf_arg_int(&L, B);
  cf_arg_int(&L, T);
  cf_arg_int(&L, C);
  size_t lx = C >= 64 ? 64 : (C >= 16 ? 16 : 4);
  size_t g2[2] = {(size_t)C, (size_t)T}, l2[2] = {lx, 4};
  return cf_launch_run(&L, 2, g2, l2);
}

long cf_embedding_check_tokens(const int *tokens, size_t n, int V) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V) return (long)i;
  return -1;
}
