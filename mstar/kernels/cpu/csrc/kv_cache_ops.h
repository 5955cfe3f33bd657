// The paged KV-cache write of the torch attention backend in one call: token t's K and V heads go
// to slot slot_mapping[t] of a layer's cache [2 (k/v), kv_heads, num_blocks, block_size, head_dim]
// (the two index_copy_ calls over the flattened slots, with their transposes). A plain copy of
// head_dim elements per token and head, so any dtype the cache holds; float32 K and V into a
// bfloat16 cache (MSTAR_KV_CACHE_DTYPE) are rounded on the way.
#pragma once
#include "common.h"

namespace {

void write_kv_cache(at::Tensor& kv_cache, const at::Tensor& k, const at::Tensor& v, const at::Tensor& slot_mapping) {
  TORCH_CHECK(kv_cache.device().is_cpu() && kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.is_contiguous(),
              "kv_cache must be a contiguous CPU tensor [2, kv_heads, num_blocks, block_size, head_dim]");
  const int64_t heads = kv_cache.size(1), slots = kv_cache.size(2) * kv_cache.size(3), dim = kv_cache.size(4);
  for (const at::Tensor* t : {&k, &v})
    TORCH_CHECK(t->dim() == 3 && t->size(1) == heads && t->size(2) == dim && t->stride(2) == 1 &&
                    (t->scalar_type() == kv_cache.scalar_type() ||
                     (t->scalar_type() == at::kFloat && kv_cache.scalar_type() == at::kBFloat16)),
                "k and v must be [tokens, kv_heads, head_dim] in the cache's dtype (or float32 into a bfloat16 "
                "cache), head_dim contiguous");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.dim() == 1 && k.size(0) == v.size(0) &&
                  slot_mapping.size(0) == k.size(0),
              "slot_mapping must be int64 [tokens]");
  const at::Tensor map = slot_mapping.contiguous();
  const int64_t* sp = map.data_ptr<int64_t>();
  const int64_t tokens = k.size(0);
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(sp[t] >= 0 && sp[t] < slots, "slot ", sp[t], " outside the cache's ", slots, " slots");
  const int64_t item = kv_cache.element_size(), row_bytes = dim * item, in_item = k.element_size();
  char* cache = static_cast<char*>(kv_cache.data_ptr());
  const int64_t half = heads * slots * row_bytes;  // bytes of the K (or V) half
  // a row copied, or rounded from float32 to bf16 (to nearest even, as Tensor.to) for a bf16 cache
  const auto put = [&](char* dst, const char* src) {
    if (in_item == item) {
      std::memcpy(dst, src, row_bytes);
      return;
    }
    const float* from = reinterpret_cast<const float*>(src);
    c10::BFloat16* to = reinterpret_cast<c10::BFloat16*>(dst);
    for (int64_t i = 0; i < dim; ++i) to[i] = c10::BFloat16(from[i]);
  };
  at::parallel_for(0, tokens, std::max<int64_t>(1, 4096 / std::max<int64_t>(heads * dim, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        char* dst = cache + (h * slots + sp[t]) * row_bytes;
        put(dst, static_cast<const char*>(k.data_ptr()) + (t * k.stride(0) + h * k.stride(1)) * in_item);
        put(dst + half, static_cast<const char*>(v.data_ptr()) + (t * v.stride(0) + h * v.stride(1)) * in_item);
      }
  });
}

}  // namespace
