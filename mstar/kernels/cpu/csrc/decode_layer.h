// One Llama-layout decoder layer for a batch of decode rows (one token per sequence), in one call:
//   hidden, residual = add_rms_norm(hidden, residual)     (skipped for the first layer: normed)
//   qkv = qkv_proj(hidden); rope on its q and k heads; k, v into the paged cache
//   attn = paged_decode_attention(q); hidden = o_proj(attn)
//   hidden, residual = add_rms_norm(hidden, residual); return down(silu(gate) * up)
// the steps of DecoderLayer.forward (mstar/models/families/llama.py) with the fused ops, calling
// the same C++ functions, so the result is the same to the bit; only the interpreter between
// them is gone. Included by ops.cpp after the quantized linears it calls.
//
// A linear is (kind, weight, scales, in_features): kind 0 q4 blocks (q4_linear), 1 int8 weight
// and scales (int8_linear), 2 bf16 weight (bf16_linear); no bias. The quantized kinds run their
// wide path (dequant_gemm.h) from wide_rows rows, as QuantLinear does, on float32 or bf16 rows.
#pragma once
#include "activation_ops.h"
#include "bf16_linear.h"
#include "decode_attention.h"
#include "kv_cache_ops.h"
#include "norm_ops.h"
#include "rope_ops.h"

namespace {

enum LinearKind : int64_t { kQ4Linear = 0, kInt8Linear = 1, kBf16Linear = 2 };
constexpr int64_t kLayerLinears = 4;  // qkv_proj, o_proj, gate_up_proj, down_proj

at::Tensor layer_linear(const at::Tensor& x, int64_t kind, const at::Tensor& weight, const at::Tensor& scales,
                        int64_t in_features) {
  // the rule of QuantLinear.forward, so that both compute the same bits: bf16 activations are
  // widened to float32 for the quantized kernels (and the wide path rounds them back, exactly)
  const bool wide = x.size(0) >= wide_rows(kind == kQ4Linear, -1);
  if (kind != kBf16Linear && x.scalar_type() != at::kFloat)
    return layer_linear(x.to(at::kFloat), kind, weight, scales, in_features);
  if (kind == kQ4Linear)
    return wide ? q4_linear_wide(x, weight, in_features, -1) : q4_linear(x, weight, in_features, -1);
  if (kind == kInt8Linear)
    return wide ? int8_linear_wide(x, weight, scales, -1) : int8_linear(x, weight, scales, -1);
  TORCH_CHECK(kind == kBf16Linear, "unknown linear kind ", kind);
  return bf16_linear(x, weight, c10::nullopt, -1);
}

at::Tensor decode_layer(at::Tensor& hidden, at::Tensor& residual, bool normed, const at::Tensor& input_norm,
                        const at::Tensor& post_norm, double eps, at::IntArrayRef kinds, at::TensorList weights,
                        at::IntArrayRef in_features, const at::Tensor& cos, const at::Tensor& sin,
                        at::Tensor& kv_cache, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                        const at::Tensor& context_lens, std::optional<int64_t> window, double scale,
                        int64_t num_heads, int64_t num_kv_heads) {
  TORCH_CHECK(kinds.size() == kLayerLinears && in_features.size() == kLayerLinears &&
                  weights.size() == 2 * kLayerLinears,
              "a layer has 4 linears: 4 kinds, 4 in_features and 8 weight tensors (weight, scales)");
  auto linear = [&](const at::Tensor& x, int64_t i) {
    return layer_linear(x, kinds[i], weights[2 * i], weights[2 * i + 1], in_features[i]);
  };
  if (!normed) fused_add_rms_norm(hidden, residual, input_norm, eps, false);
  const int64_t tokens = hidden.size(0), head_dim = kv_cache.size(4);
  at::Tensor qkv = linear(hidden, 0).to(hidden.scalar_type()).view({tokens, num_heads + 2 * num_kv_heads, head_dim});
  at::Tensor qk = qkv.narrow(1, 0, num_heads + num_kv_heads);
  rotary_embedding(qk, cos, sin);
  write_kv_cache(kv_cache, qkv.narrow(1, num_heads, num_kv_heads), qkv.narrow(1, num_heads + num_kv_heads, num_kv_heads),
                 slot_mapping);
  const at::Tensor attn = paged_decode_attention(qkv.narrow(1, 0, num_heads), kv_cache, block_tables, context_lens,
                                                 window, scale);
  at::Tensor out = linear(attn.view({tokens, num_heads * head_dim}), 1).to(hidden.scalar_type());
  fused_add_rms_norm(out, residual, post_norm, eps, false);
  const at::Tensor act = silu_and_mul(linear(out, 2).to(hidden.scalar_type()));
  return linear(act, 3).to(hidden.scalar_type());
}

}  // namespace
