// Paged decode attention on AVX-512 (decode_attention.h chooses it): the query heads of one kv
// head (a GQA group) attend together, so each cached key and value row is loaded once for the
// whole group instead of once per query head, and multiplied by 16-lane FMAs.
//
// The AVX2 kernel runs one (sequence, query head) at a time with separate multiplies and adds; at
// 32 streams of 100 tokens of the built-in model (9 query heads on 3 kv heads) it took 418 us a
// layer on one thread, about a quarter of the decode step. Same math: float32 scores, softmax and
// weighted sums for float32 and bfloat16 caches; only the summation order differs.
// Included by decode_attention.h after its AVX2 kernel, whose softmax it shares.
#pragma once
#include "fused_common.h"

namespace {

constexpr int64_t kAttnLanes = 16;   // float32 per zmm
constexpr int64_t kAttnMaxDim = 256; // head_dim this kernel takes (16 zmm of one row)
constexpr int64_t kAttnMaxGroup = 8; // query heads per kv head it takes together

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma,f16c,avx512f,avx512vl,avx512bw")
namespace decode_attention_avx512 {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const at::BFloat16* p) {  // bf16 is float32's upper half
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// The group's `heads` query rows (float32 [heads][dim]) over the keys start .. end - 1 of one kv
// head into out (float32 [heads][dim]); scores is scratch of heads * (end - start) floats.
// kVecs is dim / 16 when the compiler is to know it (0: read from dim). With a count known only at
// run time, GCC compiles the loads of a key row into its register array as a call to memcpy (a
// copy to the stack and loads back, per row): 6% of a c=32 decode step went there.
template <typename T, int64_t kVecs>
void attend_group_of(const float* q, int64_t heads, const T* keys_head, const T* values_head, const int64_t* table,
                     int64_t block_size, int64_t dim, int64_t start, int64_t end, float scale, float* scores,
                     float* out) {
  const int64_t n = end - start, vecs = kVecs ? kVecs : dim / kAttnLanes;
  // rows of positions start, start + 1, ...: one division to begin, then counters (a division per
  // row costs more than its dot product)
  struct Walk {
    const T* head;
    const int64_t *table, block_size, dim;
    int64_t block, offset;
    const T* next() {
      const T* row = head + (table[block] * block_size + offset) * dim;
      if (++offset == block_size) offset = 0, ++block;
      return row;
    }
  };
  Walk keys{keys_head, table, block_size, dim, start / block_size, start % block_size};
  // scores[h][j] = scale * dot(q[h], k[start + j])
  for (int64_t j = 0; j < n; ++j) {
    const T* k = keys.next();
    __m512 kv[kAttnMaxDim / kAttnLanes];
    for (int64_t v = 0; v < vecs; ++v) kv[v] = load16(k + v * kAttnLanes);
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + h * dim;
      __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(qh), kv[0]);
      for (int64_t v = 1; v < vecs; ++v) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + v * kAttnLanes), kv[v], acc);
      scores[h * n + j] = scale * _mm512_reduce_add_ps(acc);
    }
  }
  for (int64_t h = 0; h < heads; ++h) decode_attention_avx2::softmax(scores + h * n, n);  // float32
  // out[h] = sum_j probs[h][j] * v[start + j], a quarter of the row's vectors at a time so that
  // the group's sums stay in registers (heads * 4 <= 32 zmm)
  for (int64_t v0 = 0; v0 < vecs; v0 += 4) {
    const int64_t width = std::min<int64_t>(4, vecs - v0);
    __m512 acc[kAttnMaxGroup][4];
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t v = 0; v < 4; ++v) acc[h][v] = _mm512_setzero_ps();
    Walk values{values_head, table, block_size, dim, start / block_size, start % block_size};
    for (int64_t j = 0; j < n; ++j) {
      const T* vr = values.next() + v0 * kAttnLanes;
      __m512 vv[4];
      for (int64_t v = 0; v < width; ++v) vv[v] = load16(vr + v * kAttnLanes);
      for (int64_t h = 0; h < heads; ++h) {
        const __m512 p = _mm512_set1_ps(scores[h * n + j]);
        for (int64_t v = 0; v < width; ++v) acc[h][v] = _mm512_fmadd_ps(p, vv[v], acc[h][v]);
      }
    }
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t v = 0; v < width; ++v) _mm512_storeu_ps(out + h * dim + (v0 + v) * kAttnLanes, acc[h][v]);
  }
}

// attend_group_of with the head sizes of the families served (64 and 128) known at compile time.
template <typename T>
void attend_group(const float* q, int64_t heads, const T* keys_head, const T* values_head, const int64_t* table,
                  int64_t block_size, int64_t dim, int64_t start, int64_t end, float scale, float* scores,
                  float* out) {
  switch (dim) {
    case 64:
      return attend_group_of<T, 4>(q, heads, keys_head, values_head, table, block_size, dim, start, end, scale,
                                   scores, out);
    case 128:
      return attend_group_of<T, 8>(q, heads, keys_head, values_head, table, block_size, dim, start, end, scale,
                                   scores, out);
    default:
      return attend_group_of<T, 0>(q, heads, keys_head, values_head, table, block_size, dim, start, end, scale,
                                   scores, out);
  }
}

}  // namespace decode_attention_avx512
MSTAR_TARGET_POP
#endif

// Whether this kernel takes a call: AVX-512 (F, BW, VL) on the CPU, head_dim a multiple of 16 up
// to 256, at most 8 query heads per kv head.
inline bool grouped_attention_runs(int64_t dim, int64_t group) {
  return (cpu_features() & kFeatAvx512Vnni) && dim % kAttnLanes == 0 && dim <= kAttnMaxDim &&
         group <= kAttnMaxGroup;
}

}  // namespace
