// Integer-dot kernels, included once per SIMD level by qdot.h inside that level's target region,
// with MSTAR_QDOT_NS (the level's namespace) and MSTAR_QDOT_DOT(w0, x0, w1, x1) defined: the 8
// int32 sums of 4 adjacent int16 products of the pairs (w0, x0) and (w1, x1) (vpmaddwd on AVX2,
// vpmaddwd + vpdpwssd with VNNI), and MSTAR_QDOT_ACC(acc, w, x): acc plus the 8 sums of 2 adjacent
// products of w and x (vpmaddwd + vpaddd, or vpdpwssd). No include guard on purpose.
namespace MSTAR_QDOT_NS {

// x [M, K] -> q int16 [M, K], d [M, K/32] (scale: max|x| / 32767), s [M, K/32] (d * sum of q).
void quantize_rows(const float* x, int64_t M, int64_t K, int16_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < M * K / kQ4Block; ++b) {
    const float* src = x + b * kQ4Block;
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(src + 8 * j);
    const __m256 amax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    const float a = simd::hmax(amax);
    const __m256 inv = _mm256_set1_ps(a > 0.f ? kActMax / a : 0.f);
    __m256i i[4];
    for (int j = 0; j < 4; ++j)
      i[j] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[j], inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const int total = simd::hsum(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
    for (int h = 0; h < 2; ++h)  // packs interleaves the 128-bit lanes; permute4x64 restores the order
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ4Block + 16 * h),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(i[2 * h], i[2 * h + 1]), 0xD8));
    d[b] = a / kActMax;
    s[b] = d[b] * static_cast<float>(total);
  }
}

inline void load_int8(const int8_t* p, __m256i* w) {
  w[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  w[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
}

inline __m256i load_act(const int16_t* p, int h) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * h));
}

inline __m256i broadcast_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The first `rows` of 8 outputs to dst.
inline void store_outputs(__m256 v, int rows, float* dst) {
  if (rows == kGroupRows) return _mm256_storeu_ps(dst, v);
  float tmp[kGroupRows];
  _mm256_storeu_ps(tmp, v);
  std::memcpy(dst, tmp, rows * sizeof(float));
}

// MT rows of x (from row i0) times NG consecutive x8 groups of Q4_1 W (q4_layout.h): 8 outputs per
// row and group, to out[i][0..8 NG) (the last group's first `rows`). Per block each chunk is unpacked
// once for all MT rows into two words (pairs j and j + 8 of the 8 rows), each multiplied with the
// broadcast activation pair (shared by the NG groups); then one convert and two fmas per 8 outputs.
// A lone row and group keeps two int32 sums (low, high nibbles) for shorter add chains.
template <int MT, int NG>
void q4x8_tile(const Activations& a, int64_t i0, const uint8_t* group, int rows, float* out, int64_t ldo) {
  constexpr int kSums = MT == 1 && NG == 1 ? 2 : 1;
  const int64_t K = a.K, nb = K / kQ4Block;
  const __m256i mask = _mm256_set1_epi16(0x0F);
  __m256 acc[NG][MT];
  for (int g = 0; g < NG; ++g)
    for (int i = 0; i < MT; ++i) acc[g][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int16_t* xb = a.q + i0 * K + b * kQ4Block;
    for (int g = 0; g < NG; ++g) {  // NG streams: the hardware prefetcher alone falls behind
      const char* ahead = reinterpret_cast<const char*>(group + (g * nb + b + kPrefetchBlocks) * kGroupBlockBytes);
      for (int line = 0; line < kGroupBlockBytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    __m256i dot[kSums][NG][MT];
    for (int h = 0; h < kSums; ++h)
      for (int g = 0; g < NG; ++g)
        for (int i = 0; i < MT; ++i) dot[h][g][i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < kGroupChunks; ++j) {
      __m256i wl[NG], wh[NG];
      for (int g = 0; g < NG; ++g) {
        const uint8_t* chunk = group + (g * nb + b) * kGroupBlockBytes + kGroupNibbles + 16 * j;
        const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk)));
        wl[g] = _mm256_and_si256(bytes, mask), wh[g] = _mm256_srli_epi16(bytes, 4);
      }
      for (int i = 0; i < MT; ++i) {
        const __m256i xl = broadcast_pair(xb + i * K + 2 * j), xh = broadcast_pair(xb + i * K + 2 * j + kQ4Block / 2);
        for (int g = 0; g < NG; ++g) {
          __m256i& lo = dot[0][g][i];
          __m256i& hi = dot[kSums - 1][g][i];
          lo = MSTAR_QDOT_ACC(lo, wl[g], xl);
          asm("" : "+x"(lo));  // a chain per sum, not a spilled tree (see panel_tile)
          hi = MSTAR_QDOT_ACC(hi, wh[g], xh);
          asm("" : "+x"(hi));
        }
      }
    }
    for (int g = 0; g < NG; ++g) {
      const uint8_t* gb = group + (g * nb + b) * kGroupBlockBytes;
      const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
      const __m256 wm = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 2 * kGroupRows)));
      for (int i = 0; i < MT; ++i) {
        const int64_t r = (i0 + i) * nb + b;
        const __m256i sum = kSums == 2 ? _mm256_add_epi32(dot[0][g][i], dot[kSums - 1][g][i]) : dot[0][g][i];
        acc[g][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(wd, _mm256_set1_ps(a.d[r])), acc[g][i]);
        acc[g][i] = _mm256_fmadd_ps(wm, _mm256_set1_ps(a.s[r]), acc[g][i]);
      }
    }
  }
  for (int g = 0; g < NG; ++g)
    for (int i = 0; i < MT; ++i)
      store_outputs(acc[g][i], g == NG - 1 ? rows : kGroupRows, out + (i0 + i) * ldo + g * kGroupRows);
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
    for (int j = 0; j < NT; ++j) out[(i0 + i) * ldo + j] = simd::hsum(acc[i][j]);
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

// Every row of x times NG x8 groups, in tiles of kQ4TileRows rows (the groups re-read from L1).
template <int NG>
void q4x8_rows(const Activations& a, const uint8_t* groups, int rows, float* out, int64_t ldo) {
  int64_t i = 0;
  for (; i + kQ4TileRows <= a.M; i += kQ4TileRows) q4x8_tile<kQ4TileRows, NG>(a, i, groups, rows, out, ldo);
  if (i < a.M) q4x8_tile<1, NG>(a, i, groups, rows, out, ldo);
}

// Output rows [n_begin, n_end) (n_begin a multiple of 8): one row of x, a group at a time as stored
// (one weight stream: 1.1-1.5x faster than two with the weights in L3); 2 to kPanelRows - 1 rows, two
// full x8 groups at a time as stored (then the last group alone); from kPanelRows rows, a group at a time
// expanded to an int16 panel in L1 first, which every tile of kPanelMT rows then reuses.
void q4_rows(const Activations& a, const uint8_t* blocks, int64_t n_begin, int64_t n_end, float* out,
             int64_t N) {
  const int64_t nb = a.K / kQ4Block;
  const Panel panel = a.M < kPanelRows ? Panel{} : panel_scratch(nb);
  for (int64_t n = n_begin; n < n_end; n += kGroupRows) {
    if (a.M > 1 && a.M < kPanelRows && n + 2 * kGroupRows <= std::min(n_end, N)) {
      q4x8_rows<2>(a, blocks + n * nb * kQ4BlockBytes, kGroupRows, out + n, N);
      n += kGroupRows;
      continue;
    }
    int rows;
    const uint8_t* group = group_at(blocks, n, N, nb, &rows);
    if (a.M < kPanelRows) {
      q4x8_rows<1>(a, group, rows, out + n, N);
    } else {
      q4_panel(group, nb, panel);
      panel_rows<true>(a, panel, rows, out + n, N);
    }
  }
}

void int8_rows(const Activations& a, const int8_t* weight, const float* scales, int64_t groups,
               int64_t n_begin, int64_t n_end, float* out, int64_t N) {
  const auto make = [&](int64_t n) {
    return Int8Tile{a, weight + n * a.K, scales + n * groups, groups, out + n, N};
  };
  // Under kQdotMT rows, eight rows of W at a time: eight independent accumulators instead of one
  // FMA chain per output (1 row of x, one thread, the built-in model's int8 LM head 49152 x 576:
  // 2325 -> 1401 us with avx512_bf16 code, 3674 -> 2894 us with AVX2 code; docs/engine.rst).
  if (a.M < kQdotMT) return columns<8>(a.M, n_begin, n_end, make);
  if (a.M < kPanelRows) return columns<kQdotNT>(a.M, n_begin, n_end, make);
  const Panel panel = panel_scratch(a.K / kQ4Block);
  for (int64_t n = n_begin; n < n_end; n += kPanelCols) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelCols, n_end - n));
    int8_panel(weight + n * a.K, scales + n * groups, groups, a.K, rows, panel);
    panel_rows<false>(a, panel, rows, out + n, N);
  }
}

}  // namespace MSTAR_QDOT_NS
