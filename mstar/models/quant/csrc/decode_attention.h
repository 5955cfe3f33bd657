// Paged decode attention: one query token per sequence attends to its cached K/V, read straight
// from the paged cache [2 (k/v), kv_heads, num_blocks, block_size, head_dim] through the
// sequence's block table, with no gather into a dense buffer and no mask tensor.
//
// Sequence s (context length n = context_lens[s], its query at position n - 1) and query head h
// (kv head h / (q_heads / kv_heads), GQA) see keys start .. n - 1, start = max(0, n - window) with
// a window, else 0:
//   score[p] = scale * dot(q[s, h], k[p]),  out[s, h] = sum_p softmax(score)[p] * v[p]
// Scores, softmax and the weighted sum run in float32 for float32 and bfloat16 caches; only the
// output is rounded to the query's dtype.
#pragma once
#include "fused_simd.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,f16c")
namespace decode_attention_avx2 {
using namespace fused_simd;

// One kv head of one sequence: `group` query rows (float32, [group, dim]) over the keys
// start .. end - 1; scores is scratch of group * (end - start) floats, acc of group * dim.
template <typename T>
void attend_head(const float* q, int64_t group, const T* k_head, const T* v_head, const int64_t* table,
                 int64_t block_size, int64_t dim, int64_t start, int64_t end, float scale, float* scores,
                 float* acc) {
  const int64_t n = end - start, block_elems = block_size * dim;
  auto row = [&](const T* head, int64_t p) { return head + table[p / block_size] * block_elems + (p % block_size) * dim; };
  for (int64_t p = start; p < end; ++p) {
    const T* k = row(k_head, p);
    for (int64_t g = 0; g < group; ++g) {
      __m256 sum = _mm256_setzero_ps();
      for (int64_t i = 0; i < dim; i += kLanes)
        sum = _mm256_add_ps(sum, _mm256_mul_ps(load_at(q + g * dim, i, dim), load_at(k, i, dim)));
      scores[g * n + p - start] = hsum(sum) * scale;
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores + g * n;
    float top = -INFINITY;
    for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j]);
    const __m256 top8 = _mm256_set1_ps(top);
    __m256 total8 = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j += kLanes) {
      const __m256 e = exp(_mm256_sub_ps(load_at(s, j, n), top8));
      store_at(s, j, n, e);
      total8 = _mm256_add_ps(total8, j + kLanes <= n ? e : load_at(s, j, n));
    }
    const float inv = 1.f / hsum(total8);
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  }
  std::fill(acc, acc + group * dim, 0.f);
  for (int64_t p = start; p < end; ++p) {
    const T* v = row(v_head, p);
    for (int64_t i = 0; i < dim; i += kLanes) {
      const __m256 vi = load_at(v, i, dim);
      for (int64_t g = 0; g < group; ++g) {
        float* a = acc + g * dim;
        store_at(a, i, dim, _mm256_add_ps(load_at(a, i, dim), _mm256_mul_ps(_mm256_set1_ps(scores[g * n + p - start]), vi)));
      }
    }
  }
}

}  // namespace decode_attention_avx2
MSTAR_TARGET_POP
#endif

void check_decode_attention(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                            const at::Tensor& context_lens) {
  check_fused_supported();
  check_float_dtype(q, "q");
  TORCH_CHECK(kv_cache.device().is_cpu() && kv_cache.dim() == 5 && kv_cache.size(0) == 2 &&
                  kv_cache.is_contiguous() && kv_cache.scalar_type() == q.scalar_type(),
              "kv_cache must be a contiguous CPU tensor [2, kv_heads, num_blocks, block_size, head_dim] in q's dtype");
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1 && q.size(2) == kv_cache.size(4) && q.size(1) % kv_cache.size(1) == 0,
              "q must be [seqs, q_heads, head_dim] (head_dim contiguous), q_heads a multiple of the cache's kv_heads");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.dim() == 2 && block_tables.stride(1) == 1 &&
                  block_tables.size(0) == q.size(0),
              "block_tables must be int64 [seqs, max_blocks], rows contiguous");
  TORCH_CHECK(context_lens.scalar_type() == at::kLong && context_lens.dim() == 1 && context_lens.size(0) == q.size(0),
              "context_lens must be int64 [seqs]");
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, std::optional<int64_t> window, double scale) {
  check_decode_attention(q, kv_cache, block_tables, context_lens);
  const int64_t seqs = q.size(0), q_heads = q.size(1), dim = q.size(2), kv_heads = kv_cache.size(1);
  const int64_t num_blocks = kv_cache.size(2), block_size = kv_cache.size(3), group = q_heads / kv_heads;
  const at::Tensor lens_t = context_lens.contiguous();
  const int64_t* lens = lens_t.data_ptr<int64_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  int64_t longest = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    TORCH_CHECK(lens[s] >= 1 && lens[s] <= block_tables.size(1) * block_size, "context length ", lens[s],
                " of sequence ", s, " is not covered by its block table");
    for (int64_t b = 0; b < (lens[s] + block_size - 1) / block_size; ++b) {
      const int64_t id = tables[s * block_tables.stride(0) + b];
      TORCH_CHECK(id >= 0 && id < num_blocks, "block ", id, " outside the cache's ", num_blocks, " blocks");
    }
    longest = std::max(longest, lens[s]);
  }
  TORCH_CHECK(!window || *window >= 1, "window must be at least 1");
  at::Tensor out = at::empty({seqs, q_heads, dim}, q.options());
#ifdef MSTAR_X86
  const float scale_f = static_cast<float>(scale);
  dispatch_float(q.scalar_type(), [&](auto type) {
    using T = decltype(type);
    const T* cache = static_cast<const T*>(kv_cache.data_ptr());
    const int64_t head_elems = num_blocks * block_size * dim, half = kv_heads * head_elems;
    T* op = static_cast<T*>(out.data_ptr());
    const T* qp = static_cast<const T*>(q.data_ptr());
    // Work items: (sequence, kv head); small batches at short context stay on the calling thread.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(longest * group * dim, 1));
    at::parallel_for(0, seqs * kv_heads, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> qf(group * dim), acc(group * dim), scores(group * longest);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t s = item / kv_heads, h = item % kv_heads, n = lens[s];
        const int64_t start = window ? std::max<int64_t>(0, n - *window) : 0;
        const T* q_rows = qp + s * q.stride(0) + h * group * q.stride(1);
        for (int64_t g = 0; g < group; ++g)
          for (int64_t i = 0; i < dim; ++i) qf[g * dim + i] = static_cast<float>(q_rows[g * q.stride(1) + i]);
        decode_attention_avx2::attend_head(qf.data(), group, cache + h * head_elems, cache + half + h * head_elems,
                                           tables + s * block_tables.stride(0), block_size, dim, start, n, scale_f,
                                           scores.data(), acc.data());
        T* o = op + (s * q_heads + h * group) * dim;
        for (int64_t i = 0; i < group * dim; ++i) o[i] = static_cast<T>(acc[i]);
      }
    });
  });
#endif
  return out;
}

}  // namespace
