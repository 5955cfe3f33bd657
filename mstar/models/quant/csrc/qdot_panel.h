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

// r[c] holds 8 dwords of row c; afterwards dst[8 p + c] = dword p of row c.
inline void transpose8x8(const __m256i* r, int32_t* dst) {
  __m256i t[8], u[8];
  for (int c = 0; c < 8; c += 2) {
    t[c] = _mm256_unpacklo_epi32(r[c], r[c + 1]);      // dwords 0 1 | 4 5 of rows c, c + 1
    t[c + 1] = _mm256_unpackhi_epi32(r[c], r[c + 1]);  // dwords 2 3 | 6 7
  }
  for (int c = 0; c < 8; c += 4)
    for (int h = 0; h < 2; ++h) {
      u[c + 2 * h] = _mm256_unpacklo_epi64(t[c + h], t[c + h + 2]);      // dword 2h | 2h + 4 of 4 rows
      u[c + 2 * h + 1] = _mm256_unpackhi_epi64(t[c + h], t[c + h + 2]);  // dword 2h + 1 | 2h + 5
    }
  for (int p = 0; p < 4; ++p) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8 * p), _mm256_permute2x128_si256(u[p], u[p + 4], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8 * (p + 4)),
                        _mm256_permute2x128_si256(u[p], u[p + 4], 0x31));
  }
}

// Block b of `rows` (<= 8) rows of W, given as 2 vectors of 16 int16 weights per row, into the panel.
inline void store_panel_block(__m256i (*wq)[2], int64_t b, Panel panel) {
  __m256i half[8];
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < kPanelCols; ++c) half[c] = wq[c][h];
    transpose8x8(half, panel.w + (b * kPairsPerBlock + 8 * h) * kPanelCols);
  }
}

void q4_panel(const uint8_t* w, int64_t row_bytes, int rows, int64_t nb, Panel panel) {
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[kPanelCols][2];
    for (int c = 0; c < kPanelCols; ++c) {
      if (c >= rows) {
        wq[c][0] = wq[c][1] = _mm256_setzero_si256();
        panel.d[b * kPanelCols + c] = panel.m[b * kPanelCols + c] = 0.f;
        continue;
      }
      const uint8_t* block = w + c * row_bytes + b * kQ4BlockBytes;
      panel.d[b * kPanelCols + c] = load_half(block);
      panel.m[b * kPanelCols + c] = load_half(block + 2);
      unpack_q4(block + 4, wq[c]);
    }
    store_panel_block(wq, b, panel);
  }
}

void int8_panel(const int8_t* w, const float* scales, int64_t groups, int64_t K, int rows, Panel panel) {
  const int64_t nb = K / kQ4Block, per_group = nb / groups;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i wq[kPanelCols][2];
    for (int c = 0; c < kPanelCols; ++c) {
      if (c >= rows) {
        wq[c][0] = wq[c][1] = _mm256_setzero_si256();
        panel.d[b * kPanelCols + c] = 0.f;
        continue;
      }
      load_int8(w + c * K + b * kQ4Block, wq[c]);
      panel.d[b * kPanelCols + c] = scales[c * groups + b / per_group];
    }
    store_panel_block(wq, b, panel);
  }
}

inline __m256i broadcast_pair(const int16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
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
  for (int i = 0; i < MT; ++i) {
    float* dst = out + (i0 + i) * ldo;
    if (rows == kPanelCols) {
      _mm256_storeu_ps(dst, acc[i]);
    } else {
      float tmp[kPanelCols];
      _mm256_storeu_ps(tmp, acc[i]);
      std::memcpy(dst, tmp, rows * sizeof(float));
    }
  }
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

