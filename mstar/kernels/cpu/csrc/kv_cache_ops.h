// The paged KV-cache write of the torch attention backend in one call: token t's K and V heads go
// to slot slot_mapping[t] of a layer's cache [2 (k/v), kv_heads, num_blocks, block_size, head_dim]
// (the two index_copy_ calls over the flattened slots, with their transposes). A plain copy of
// head_dim elements per token and head, so any dtype the cache holds.
#pragma once
#include "common.h"

namespace {

void write_kv_cache(at::Tensor& kv_cache, const at::Tensor& k, const at::Tensor& v, const at::Tensor& slot_mapping) {
  TORCH_CHECK(kv_cache.device().is_cpu() && kv_cache.dim() == 5 && kv_cache.size(0) == 2 && kv_cache.is_contiguous(),
              "kv_cache must be a contiguous CPU tensor [2, kv_heads, num_blocks, block_size, head_dim]");
  const int64_t heads = kv_cache.size(1), slots = kv_cache.size(2) * kv_cache.size(3), dim = kv_cache.size(4);
  for (const at::Tensor* t : {&k, &v})
    TORCH_CHECK(t->dim() == 3 && t->size(1) == heads && t->size(2) == dim && t->stride(2) == 1 &&
                    t->scalar_type() == kv_cache.scalar_type(),
                "k and v must be [tokens, kv_heads, head_dim] in the cache's dtype, head_dim contiguous");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.dim() == 1 && k.size(0) == v.size(0) &&
                  slot_mapping.size(0) == k.size(0),
              "slot_mapping must be int64 [tokens]");
  const at::Tensor map = slot_mapping.contiguous();
  const int64_t* sp = map.data_ptr<int64_t>();
  const int64_t tokens = k.size(0);
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(sp[t] >= 0 && sp[t] < slots, "slot ", sp[t], " outside the cache's ", slots, " slots");
  const int64_t item = kv_cache.element_size(), row_bytes = dim * item;
  char* cache = static_cast<char*>(kv_cache.data_ptr());
  const int64_t half = heads * slots * row_bytes;  // bytes of the K (or V) half
  at::parallel_for(0, tokens, std::max<int64_t>(1, 4096 / std::max<int64_t>(heads * dim, 1)),
                   [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        char* dst = cache + (h * slots + sp[t]) * row_bytes;
        std::memcpy(dst, static_cast<const char*>(k.data_ptr()) + (t * k.stride(0) + h * k.stride(1)) * item, row_bytes);
        std::memcpy(dst + half, static_cast<const char*>(v.data_ptr()) + (t * v.stride(0) + h * v.stride(1)) * item,
                    row_bytes);
      }
  });
}

}  // namespace
