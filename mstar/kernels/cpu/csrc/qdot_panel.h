// The panel kernels for batches of kPanelRows rows and more (qdot.h), included by qdot_kernel.h
// inside each SIMD level's namespace (MSTAR_QDOT_ACC defined there). No include guard on purpose.
//
// Panels: 8 rows of W repacked so that one 256-bit word holds a pair of adjacent int16
// weights of each of the 8 rows; then x's pair (2p, 2p + 1) broadcast to 8 lanes times word p is
// vpmaddwd's 8 partial dot products, one per output.

struct Panel {
  int32_t* w;  // [nb][16 pairs][8 rows] int16 pairs
  float* d;    // [nb][8] weight scales
  float* m;    // [nb][8] Q4_1 minimums (q4 only)
};

// 16-bit words: r[c] holds 8 words of row c; afterwards t[p] holds word p of rows 0..7.
inline void transpose8x8_epi16(const __m128i* r, __m128i* t) {
  __m128i a[8], b[8];
  for (int c = 0; c < 8; c += 2) {
    a[c] = _mm_unpacklo_epi16(r[c], r[c + 1]);      // words 0..3 of rows c, c + 1
    a[c + 1] = _mm_unpackhi_epi16(r[c], r[c + 1]);  // words 4..7
  }
  for (int c = 0; c < 8; c += 4)
    for (int h = 0; h < 2; ++h) {
      b[c + 2 * h] = _mm_unpacklo_epi32(a[c + h], a[c + h + 2]);      // words 4h, 4h + 1 of 4 rows
      b[c + 2 * h + 1] = _mm_unpackhi_epi32(a[c + h], a[c + h + 2]);  // words 4h + 2, 4h + 3
    }
  for (int q = 0; q < 4; ++q) {  // b[q] holds words 2q, 2q + 1 of rows 0..3, b[q + 4] of rows 4..7
    t[2 * q] = _mm_unpacklo_epi64(b[q], b[q + 4]);
    t[2 * q + 1] = _mm_unpackhi_epi64(b[q], b[q + 4]);
  }
}

// q4: an x8 group (q4_layout.h) is a panel already, but for its nibbles: chunk j widens to pairs j
// (low nibbles) and j + 8 (high ones) of the 8 rows.
void q4_panel(const uint8_t* group, int64_t nb, Panel panel) {
  const __m256i mask = _mm256_set1_epi16(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* gb = group + b * kGroupBlockBytes;
    _mm256_storeu_ps(panel.d + b * kPanelCols, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb))));
    _mm256_storeu_ps(panel.m + b * kPanelCols,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 2 * kGroupRows))));
    int32_t* dst = panel.w + b * kPairsPerBlock * kPanelCols;
    for (int j = 0; j < kGroupChunks; ++j) {
      const __m256i bytes =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + kGroupNibbles + 16 * j)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * kPanelCols), _mm256_and_si256(bytes, mask));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (j + 8) * kPanelCols), _mm256_srli_epi16(bytes, 4));
    }
  }
}

// int8: the 16-bit word p of a block's 32 bytes is pair p as it is, sign-extended.
void int8_panel(const int8_t* w, const float* scales, int64_t groups, int64_t K, int rows, Panel panel) {
  const int64_t nb = K / kQ4Block, per_group = nb / groups;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t* dst = panel.w + b * kPairsPerBlock * kPanelCols;
    for (int h = 0; h < 2; ++h) {  // pairs 8h .. 8h + 7
      __m128i r[kPanelCols], t[kPanelCols];
      for (int c = 0; c < kPanelCols; ++c)
        r[c] = c < rows ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c * K + b * kQ4Block + 16 * h))
                        : _mm_setzero_si128();
      transpose8x8_epi16(r, t);
      for (int p = 0; p < 8; ++p)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (8 * h + p) * kPanelCols), _mm256_cvtepi8_epi16(t[p]));
    }
    for (int c = 0; c < kPanelCols; ++c)
      panel.d[b * kPanelCols + c] = c < rows ? scales[c * groups + b / per_group] : 0.f;
  }
}

// MT rows of x (from row i0) times a panel: 8 outputs per row, to out[i][0..rows).
template <int MT, bool kMinimum>
void panel_tile(const Activations& a, int64_t i0, const Panel& panel, int rows, float* out, int64_t ldo) {
  const int64_t K = a.K, nb = K / kQ4Block;
  __m256 acc[MT];
  for (int i = 0; i < MT; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i dot[MT];
    for (int i = 0; i < MT; ++i) dot[i] = _mm256_setzero_si256();
    const int32_t* wb = panel.w + b * kPairsPerBlock * kPanelCols;
    const int16_t* xb = a.q + i0 * K + b * kQ4Block;
#pragma GCC unroll 16
    for (int p = 0; p < kPairsPerBlock; ++p) {
      const __m256i wp = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + p * kPanelCols));
      for (int i = 0; i < MT; ++i) {
        dot[i] = MSTAR_QDOT_ACC(dot[i], wp, broadcast_pair(xb + i * K + 2 * p));
        // keeps each sum in its register: otherwise GCC reassociates the unrolled chain into a
        // tree of all 16 x MT products, spilled to the stack
        asm("" : "+x"(dot[i]));
      }
    }
    const __m256 wd = _mm256_loadu_ps(panel.d + b * kPanelCols);
    for (int i = 0; i < MT; ++i) {
      const int64_t r = (i0 + i) * nb + b;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(wd, _mm256_set1_ps(a.d[r])), acc[i]);
      if (kMinimum) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(panel.m + b * kPanelCols), _mm256_set1_ps(a.s[r]), acc[i]);
    }
  }
  for (int i = 0; i < MT; ++i) store_outputs(acc[i], rows, out + (i0 + i) * ldo);
}

// Every row of x times one panel, in tiles of kPanelMT rows, then the tail.
template <bool kMinimum>
void panel_rows(const Activations& a, const Panel& panel, int rows, float* out, int64_t ldo) {
  int64_t i = 0;
  for (; i + kPanelMT <= a.M; i += kPanelMT) panel_tile<kPanelMT, kMinimum>(a, i, panel, rows, out, ldo);
  switch (a.M - i) {
    case 3: panel_tile<3, kMinimum>(a, i, panel, rows, out, ldo); break;
    case 2: panel_tile<2, kMinimum>(a, i, panel, rows, out, ldo); break;
    case 1: panel_tile<1, kMinimum>(a, i, panel, rows, out, ldo); break;
    default: break;
  }
}

// This thread's panel scratch for K / 32 blocks.
inline Panel panel_scratch(int64_t nb) {
  thread_local std::vector<int32_t> words;
  thread_local std::vector<float> scales;
  words.resize(nb * kPairsPerBlock * kPanelCols);
  scales.resize(2 * nb * kPanelCols);
  return Panel{words.data(), scales.data(), scales.data() + nb * kPanelCols};
}

