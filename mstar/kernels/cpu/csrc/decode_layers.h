// A Llama-layout decoder stack on decode rows in one call: the first layer's input norm, every
// layer's decode_layer (decode_layer.h) in order, then the final add + norm. The steps of
// LlamaModel.forward (mstar/models/families/llama.py) when every layer takes the one-call path,
// with the same C++ functions, so the same bits; only the interpreter between the layers is gone.
//
// All layers' parameters come as flat lists, prepared once into a DecodeStack object that the
// model holds (mstar/models/layers/decode_stack.py), so a step passes one object instead of some
// 330 tensors converted and boxed on every call:
//   norms: input and post-attention norm weights per layer, then the final norm (2 * layers + 1)
//   kinds, in_features: 4 per layer; weights: 8 per layer (decode_layer's linears)
//   kv_caches: one per layer; windows: one per layer (0: none); scales: one per layer
#pragma once
#include <torch/custom_class.h>

#include "decode_layer.h"

namespace {

at::Tensor decode_layers(at::Tensor& hidden_in, at::TensorList norms, at::IntArrayRef kinds,
                         at::TensorList weights, at::IntArrayRef in_features, at::TensorList kv_caches,
                         at::IntArrayRef windows, at::ArrayRef<double> scales, double eps, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                         const at::Tensor& context_lens, int64_t num_heads, int64_t num_kv_heads) {
  const int64_t layers = static_cast<int64_t>(kv_caches.size());
  TORCH_CHECK(layers >= 1 && static_cast<int64_t>(norms.size()) == 2 * layers + 1 &&
                  static_cast<int64_t>(kinds.size()) == kLayerLinears * layers &&
                  static_cast<int64_t>(in_features.size()) == kLayerLinears * layers &&
                  static_cast<int64_t>(weights.size()) == 2 * kLayerLinears * layers &&
                  static_cast<int64_t>(windows.size()) == layers && static_cast<int64_t>(scales.size()) == layers,
              "decode_layers takes, per layer: 2 norms, 4 kinds, 4 in_features, 8 weights, a cache, a window "
              "and a scale; and the final norm");
  at::Tensor residual = hidden_in;
  at::Tensor hidden = rms_norm(residual, norms[0], eps, false);
  for (int64_t i = 0; i < layers; ++i) {
    const std::optional<int64_t> window = windows[i] > 0 ? std::optional<int64_t>(windows[i]) : std::nullopt;
    at::Tensor kv_cache = kv_caches[i];
    hidden = decode_layer(hidden, residual, i == 0, norms[2 * i], norms[2 * i + 1], eps,
                          kinds.slice(kLayerLinears * i, kLayerLinears),
                          weights.slice(2 * kLayerLinears * i, 2 * kLayerLinears),
                          in_features.slice(kLayerLinears * i, kLayerLinears), cos, sin, kv_cache, slot_mapping,
                          block_tables, context_lens, window, scales[i], num_heads, num_kv_heads);
  }
  fused_add_rms_norm(hidden, residual, norms[2 * layers], eps, false);
  return hidden;
}

struct DecodeStack : torch::CustomClassHolder {
  std::vector<at::Tensor> norms, weights, kv_caches;
  std::vector<int64_t> kinds, in_features, windows;
  std::vector<double> scales;
  double eps;
  int64_t num_heads, num_kv_heads;

  DecodeStack(std::vector<at::Tensor> norms, std::vector<int64_t> kinds, std::vector<at::Tensor> weights,
              std::vector<int64_t> in_features, std::vector<at::Tensor> kv_caches, std::vector<int64_t> windows,
              std::vector<double> scales, double eps, int64_t num_heads, int64_t num_kv_heads)
      : norms(std::move(norms)), weights(std::move(weights)), kv_caches(std::move(kv_caches)),
        kinds(std::move(kinds)), in_features(std::move(in_features)), windows(std::move(windows)),
        scales(std::move(scales)), eps(eps), num_heads(num_heads), num_kv_heads(num_kv_heads) {}
};

// The model's output hidden states for the decode rows `hidden` (updated in place).
at::Tensor decode_stack(const c10::intrusive_ptr<DecodeStack>& stack, at::Tensor& hidden, const at::Tensor& cos,
                        const at::Tensor& sin, const at::Tensor& slot_mapping, const at::Tensor& block_tables,
                        const at::Tensor& context_lens) {
  const DecodeStack& s = *stack;
  return decode_layers(hidden, s.norms, s.kinds, s.weights, s.in_features, s.kv_caches, s.windows, s.scales, s.eps,
                       cos, sin, slot_mapping, block_tables, context_lens, s.num_heads, s.num_kv_heads);
}

}  // namespace
