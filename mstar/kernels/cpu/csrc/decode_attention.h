// Paged decode attention: one query token per sequence attends to its cached K/V, read straight
// from the paged cache [2 (k/v), kv_heads, num_blocks, block_size, head_dim] through the
// sequence's block table, with no gather into a dense buffer and no mask tensor.
//
// Sequence s (context length n = context_lens[s], its query at position n - 1) and query head h
// (kv head h / (q_heads / kv_heads), GQA) see keys start .. n - 1, start = max(0, n - window) with
// a window, else 0:
//   score[p] = scale * dot(q[s, h], k[p]),  out[s, h] = sum_p softmax(score)[p] * v[p]
// Scores, softmax and the weighted sum run in float32 for float32 and bfloat16 caches; only the
// output is rounded to the query's dtype. The cache is in the queries' dtype, or bfloat16 under
// float32 queries (MSTAR_KV_CACHE_DTYPE: half the bytes a decode step reads from it).
#pragma once
#include "fused_common.h"

namespace {

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,f16c")
namespace decode_attention_avx2 {
using namespace simd;

constexpr int64_t kKeys = 8;  // keys scored together: one vector of scores
constexpr int64_t kAcc = 8;   // output vectors (64 dims: a common head in one pass) accumulated in registers

// [sum(v[0]), ..., sum(v[7])]: the eight horizontal sums in one vector.
inline __m256 hsum8(const __m256* v) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// One kv head's pages, read in position order: rows(p) walks the rows of positions p, p + 1, ...
// (one division to start, then a counter: a division per row would cost more than its dot product).
template <typename T>
struct Pages {
  const T* head;
  const int64_t* table;
  int64_t block_size, dim;

  struct Walk {
    const Pages& pages;
    int64_t block, offset;
    const T* next() {
      const T* row = pages.head + (pages.table[block] * pages.block_size + offset) * pages.dim;
      if (++offset == pages.block_size) offset = 0, ++block;
      return row;
    }
  };
  Walk rows(int64_t p) const { return Walk{*this, p / block_size, p % block_size}; }
};

// scores[j] = scale * dot(q, k[start + j]) for the n keys from start.
template <typename T>
void score(const float* q, const Pages<T>& keys, int64_t start, int64_t n, float scale, float* scores) {
  const int64_t dim = keys.dim;
  auto walk = keys.rows(start);
  for (int64_t j0 = 0; j0 < n; j0 += kKeys) {
    const int64_t count = std::min(kKeys, n - j0);
    const T* k[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) k[j] = j < count ? walk.next() : k[0];
    __m256 acc[kKeys];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += kLanes) {
      const __m256 qv = load_at(q, i, dim);
      for (int64_t j = 0; j < kKeys; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(qv, load_at(k[j], i, dim)));
    }
    store_at(scores + j0, 0, count, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
  }
}

// scores in place -> softmax(scores) over n, in float32.
inline void softmax(float* s, int64_t n) {
  float top = -INFINITY;
  for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j]);
  const __m256 top8 = _mm256_set1_ps(top);
  __m256 total = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += kLanes) {
    store_at(s, j, n, exp(_mm256_sub_ps(load_at(s, j, n), top8)));
    total = _mm256_add_ps(total, load_at(s, j, n));  // zero past n
  }
  const __m256 inv = _mm256_set1_ps(1.f / hsum(total));
  for (int64_t j = 0; j < n; j += kLanes) store_at(s, j, n, _mm256_mul_ps(load_at(s, j, n), inv));
}

// out[dim] = sum_j probs[j] * v[start + j].
template <typename T>
void weighted_sum(const float* probs, const Pages<T>& values, int64_t start, int64_t n, float* out) {
  const int64_t dim = values.dim;
  for (int64_t d0 = 0; d0 < dim; d0 += kAcc * kLanes) {
    const int64_t width = std::min(dim - d0, kAcc * kLanes);
    __m256 acc[kAcc];
    for (auto& a : acc) a = _mm256_setzero_ps();
    auto walk = values.rows(start);
    for (int64_t j = 0; j < n; ++j) {
      const T* v = walk.next() + d0;
      const __m256 p = _mm256_set1_ps(probs[j]);
      for (int64_t c = 0; c < kAcc; ++c)
        if (c * kLanes < width) acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(p, load_at(v, c * kLanes, width)));
    }
    for (int64_t c = 0; c * kLanes < width; ++c) store_at(out + d0, c * kLanes, width, acc[c]);
  }
}

// One query row (float32 [dim]) over the keys start .. end - 1 of its kv head into out (float32
// [dim]); scores is scratch of end - start floats.
template <typename T>
void attend_head(const float* q, const Pages<T>& keys, const Pages<T>& values, int64_t start, int64_t end,
                 float scale, float* scores, float* out) {
  score(q, keys, start, end - start, scale, scores);
  softmax(scores, end - start);
  weighted_sum(scores, values, start, end - start, out);
}

}  // namespace decode_attention_avx2
MSTAR_TARGET_POP
#endif

}  // namespace

#include "decode_attention_avx512.h"

namespace {

void check_decode_attention(const at::Tensor& q, const at::Tensor& kv_cache, const at::Tensor& block_tables,
                            const at::Tensor& context_lens) {
  check_fused_supported();
  check_float_dtype(q, "q");
  TORCH_CHECK(kv_cache.device().is_cpu() && kv_cache.dim() == 5 && kv_cache.size(0) == 2 &&
                  kv_cache.is_contiguous() &&
                  (kv_cache.scalar_type() == q.scalar_type() || kv_cache.scalar_type() == at::kBFloat16),
              "kv_cache must be a contiguous CPU tensor [2, kv_heads, num_blocks, block_size, head_dim] in q's dtype "
              "or bfloat16");
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
  // T: the queries' and output's dtype; C: the cache's (T, or bfloat16 under float32 queries)
  dispatch_float(q.scalar_type(), [&](auto type) {
    dispatch_float(kv_cache.scalar_type(), [&](auto cache_type) {
      using T = decltype(type);
      using C = decltype(cache_type);
      const C* cache = static_cast<const C*>(kv_cache.data_ptr());
      const int64_t head_elems = num_blocks * block_size * dim, half = kv_heads * head_elems;
      T* op = static_cast<T*>(out.data_ptr());
      const T* qp = static_cast<const T*>(q.data_ptr());
      // On AVX-512 (decode_attention_avx512.h) a work item is a (sequence, kv head): its group of
      // query heads reads each key and value row once.
      // The threads claim units of `grain` items (claimed_parallel): the sequences of a batch differ
      // in length, and a fixed half each left one thread waiting for the other (in a continuous
      // batch the first sequences, admitted earliest, are the longest).
      if (grouped_attention_runs(dim, group)) {
        const int64_t items = seqs * kv_heads;
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(longest * dim * group, 1));
        claimed_parallel((items + grain - 1) / grain, [&](const auto& claim) {
          std::vector<float> qf(group * dim), acc(group * dim), scores(group * longest);
          for (int64_t unit = claim(); unit * grain < items; unit = claim()) {
            const int64_t last = std::min(items, (unit + 1) * grain);
            for (int64_t item = unit * grain; item < last; ++item) {
              const int64_t s = item / kv_heads, h = item % kv_heads, n = lens[s];
              const int64_t start = window ? std::max<int64_t>(0, n - *window) : 0;
              for (int64_t g = 0; g < group; ++g) {
                const T* q_row = qp + s * q.stride(0) + (h * group + g) * q.stride(1);
                for (int64_t i = 0; i < dim; ++i) qf[g * dim + i] = static_cast<float>(q_row[i]);
              }
              decode_attention_avx512::attend_group(qf.data(), group, cache + h * head_elems,
                                                    cache + half + h * head_elems, tables + s * block_tables.stride(0),
                                                    block_size, dim, start, n, scale_f, scores.data(), acc.data());
              T* o = op + (s * q_heads + h * group) * dim;
              for (int64_t i = 0; i < group * dim; ++i) o[i] = static_cast<T>(acc[i]);
            }
          }
        });
        return;
      }
      // Work items: (sequence, query head), every head on its own (the same sums in the same order
      // as a whole group at a time), so that two threads share even one sequence's nine heads; small
      // batches at short context stay on the calling thread.
      const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(longest * dim, 1));
      at::parallel_for(0, seqs * q_heads, grain, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(dim), acc(dim), scores(longest);
        for (int64_t item = begin; item < end; ++item) {
          const int64_t s = item / q_heads, head = item % q_heads, h = head / group, n = lens[s];
          const int64_t start = window ? std::max<int64_t>(0, n - *window) : 0;
          const T* q_row = qp + s * q.stride(0) + head * q.stride(1);
          for (int64_t i = 0; i < dim; ++i) qf[i] = static_cast<float>(q_row[i]);
          const int64_t* table = tables + s * block_tables.stride(0);
          const decode_attention_avx2::Pages<C> keys{cache + h * head_elems, table, block_size, dim};
          const decode_attention_avx2::Pages<C> values{cache + half + h * head_elems, table, block_size, dim};
          decode_attention_avx2::attend_head(qf.data(), keys, values, start, n, scale_f, scores.data(), acc.data());
          T* o = op + (s * q_heads + head) * dim;
          for (int64_t i = 0; i < dim; ++i) o[i] = static_cast<T>(acc[i]);
        }
      });
    });
  });
#endif
  return out;
}

}  // namespace
