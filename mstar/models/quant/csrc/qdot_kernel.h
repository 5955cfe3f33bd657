// Integer-dot kernels, included once per SIMD level by qdot.h inside that level's target region,
// with MSTAR_QDOT_NS (the level's namespace) and MSTAR_QDOT_DOT(w0, x0, w1, x1) defined: the 8
// int32 sums of 4 adjacent int16 products of the pairs (w0, x0) and (w1, x1) (vpmaddwd on AVX2,
// vpmaddwd + vpdpwssd with VNNI), and MSTAR_QDOT_ACC(acc, w, x): acc plus the 8 sums of 2 adjacent
// products of w and x (vpmaddwd + vpaddd, or vpdpwssd). No include guard on purpose.
namespace MSTAR_QDOT_NS {

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// x [M, K] -> q int16 [M, K], d [M, K/32] (scale: max|x| / 32767), s [M, K/32] (d * sum of q).
void quantize_rows(const float* x, int64_t M, int64_t K, int16_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < M * K / kQ4Block; ++b) {
    const float* src = x + b * kQ4Block;
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(src + 8 * j);
    const __m256 amax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    const float a = hmax_ps(amax);
    const __m256 inv = _mm256_set1_ps(a > 0.f ? kActMax / a : 0.f);
    __m256i i[4];
    for (int j = 0; j < 4; ++j)
      i[j] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[j], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const int total = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
    for (int h = 0; h < 2; ++h)  // packs interleaves the 128-bit lanes; permute4x64 restores the order
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ4Block + 16 * h),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(i[2 * h], i[2 * h + 1]), 0xD8));
    d[b] = a / kActMax;
    s[b] = d[b] * static_cast<float>(total);
  }
}

inline float load_half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// 32 nibbles of a Q4_1 block as int16 in weight order: w[0] weights 0..15 (the low nibbles), w[1] 16..31.
inline void unpack_q4(const uint8_t* qs, __m256i* w) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  w[0] = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, mask));
  w[1] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
}

inline void load_int8(const int8_t* p, __m256i* w) {
  w[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  w[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
}

inline __m256i load_act(const int16_t* p, int h) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * h));
}

// MT rows of x times NT rows of Q4_1 W: out = sum over blocks of dw dx (qw . qx) + mw sx.
template <int MT, int NT>
void q4_tile(const Activations& a, int64_t i0, const uint8_t* w, int64_t row_bytes, float* out, int64_t ldo) {
  const int64_t K = a.K, nb = K / kQ4Block;
  __m256 acc[MT][NT];
  float mins[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps(), mins[i][j] = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[NT][2];
    float wd[NT], wm[NT];
    for (int j = 0; j < NT; ++j) {
      const uint8_t* block = w + j * row_bytes + b * kQ4BlockBytes;
      wd[j] = load_half(block), wm[j] = load_half(block + 2);
      unpack_q4(block + 4, wq[j]);
    }
    for (int i = 0; i < MT; ++i) {
      const int64_t row = i0 + i;
      const int16_t* xb = a.q + row * K + b * kQ4Block;
      const __m256i x0 = load_act(xb, 0), x1 = load_act(xb, 1);
      const float dx = a.d[row * nb + b], sx = a.s[row * nb + b];
      for (int j = 0; j < NT; ++j) {
        const __m256 dot = _mm256_cvtepi32_ps(MSTAR_QDOT_DOT(wq[j][0], x0, wq[j][1], x1));
        acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(wd[j] * dx), acc[i][j]);
        mins[i][j] += wm[j] * sx;
      }
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[(i0 + i) * ldo + j] = hsum_ps(acc[i][j]) + mins[i][j];
}

// The same for int8 W with a float scale per group of `group` weights (a multiple of 32).
template <int MT, int NT>
void int8_tile(const Activations& a, int64_t i0, const int8_t* w, const float* scales, int64_t groups,
               float* out, int64_t ldo) {
  const int64_t K = a.K, nb = K / kQ4Block, per_group = nb / groups;
  __m256 acc[MT][NT];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t g = per_group == nb ? 0 : b / per_group;  // no division per block when G = 1
    __m256i wq[NT][2];
    float wd[NT];
    for (int j = 0; j < NT; ++j) {
      load_int8(w + j * K + b * kQ4Block, wq[j]);
      wd[j] = scales[j * groups + g];
    }
    for (int i = 0; i < MT; ++i) {
      const int64_t row = i0 + i;
      const int16_t* xb = a.q + row * K + b * kQ4Block;
      const __m256i x0 = load_act(xb, 0), x1 = load_act(xb, 1);
      const float dx = a.d[row * nb + b];
      for (int j = 0; j < NT; ++j) {
        const __m256 dot = _mm256_cvtepi32_ps(MSTAR_QDOT_DOT(wq[j][0], x0, wq[j][1], x1));
        acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(wd[j] * dx), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j) out[(i0 + i) * ldo + j] = hsum_ps(acc[i][j]);
}

// Every row of x times W rows [n_begin, n_end): tiles of kQdotMT x kQdotNT, then the tails.
template <int NT, typename Tile>
void rows_by_tiles(int64_t M, Tile tile) {
  int64_t i = 0;
  for (; i + kQdotMT <= M; i += kQdotMT) tile.template run<kQdotMT, NT>(i);
  switch (M - i) {
    case 3: tile.template run<3, NT>(i); break;
    case 2: tile.template run<2, NT>(i); break;
    case 1: tile.template run<1, NT>(i); break;
    default: break;
  }
}

struct Q4Tile {
  const Activations& a;
  const uint8_t* w;
  int64_t row_bytes;
  float* out;
  int64_t ldo;
  template <int MT, int NT>
  void run(int64_t i0) const { q4_tile<MT, NT>(a, i0, w, row_bytes, out, ldo); }
};

struct Int8Tile {
  const Activations& a;
  const int8_t* w;
  const float* scales;
  int64_t groups;
  float* out;
  int64_t ldo;
  template <int MT, int NT>
  void run(int64_t i0) const { int8_tile<MT, NT>(a, i0, w, scales, groups, out, ldo); }
};

// Output columns [n_begin, n_end) in groups of NT rows of W (then one at a time).
template <int NT, typename MakeTile>
void columns(int64_t M, int64_t n_begin, int64_t n_end, MakeTile make) {
  int64_t n = n_begin;
  for (; n + NT <= n_end; n += NT) rows_by_tiles<NT>(M, make(n));
  for (; n < n_end; ++n) rows_by_tiles<1>(M, make(n));
}

#include "qdot_panel.h"

void q4_rows(const Activations& a, const uint8_t* blocks, int64_t n_begin, int64_t n_end, float* out,
             int64_t N) {
  const int64_t nb = a.K / kQ4Block, row_bytes = nb * kQ4BlockBytes;
  const auto make = [&](int64_t n) { return Q4Tile{a, blocks + n * row_bytes, row_bytes, out + n, N}; };
  if (a.M < kQdotMT) return columns<1>(a.M, n_begin, n_end, make);
  if (a.M < kPanelRows) return columns<kQdotNT>(a.M, n_begin, n_end, make);
  const Panel panel = panel_scratch(nb);
  for (int64_t n = n_begin; n < n_end; n += kPanelCols) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelCols, n_end - n));
    q4_panel(blocks + n * row_bytes, row_bytes, rows, nb, panel);
    panel_rows<true>(a, panel, rows, out + n, N);
  }
}

void int8_rows(const Activations& a, const int8_t* weight, const float* scales, int64_t groups,
               int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const auto make = [&](int64_t n) {
    return Int8Tile{a, weight + n * a.K, scales + n * groups, groups, out + n, N};
  };
  if (a.M < kQdotMT) return columns<1>(a.M, n_begin, n_end, make);
  if (a.M < kPanelRows) return columns<kQdotNT>(a.M, n_begin, n_end, make);
  const Panel panel = panel_scratch(a.K / kQ4Block);
  for (int64_t n = n_begin; n < n_end; n += kPanelCols) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelCols, n_end - n));
    int8_panel(weight + n * a.K, scales + n * groups, groups, a.K, rows, panel);
    panel_rows<false>(a, panel, rows, out + n, N);
  }
}

}  // namespace MSTAR_QDOT_NS
