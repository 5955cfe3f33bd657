// The LoRA delta of one linear for every adapter of a step, in one call (mstar/models/lora):
// out[row] += (x[row] A_s) B_s for each token row of each adapter's group, s its slot.
//
// The torch path (a padded batch: gather, two batched matmuls, scatter-add) costs five ops per
// linear and multiplies whole slots, zeros included. Here each group reads its slot's A once per
// tile of rows and only its used width, and of each rank row of B only the output columns it
// touches (``spans``: a fused linear's B is block-diagonal, q's rank rows write q's columns), so
// a step reads what its adapters hold and no more.
//
//   x [T, K], out [T, N]           float32 or bfloat16 (out updated in place)
//   a [S, K, W], b [S, W, N]       the slots, stored transposed (A^T, B^T), x's dtype
//   spans [S, W, 2] int32          rank row r of slot s writes out columns [spans[s,r,0], spans[s,r,1])
//   widths [S] int32               slot s's used width (its adapter's ranks; 0: untouched)
//   order [R] int64                token rows, grouped: group g is order[starts[g] .. starts[g+1])
//   starts [G + 1] int64, group_slots [G] int64
//
// Float32 math; each out row is rounded once, after its whole delta (a tile's delta rows are
// summed in float32 first).
#pragma once
#include "fused_common.h"

namespace {

constexpr int64_t kLoraTileRows = 8;  // rows that share one pass over a slot's A and B

#ifdef MSTAR_X86
MSTAR_TARGET_PUSH("avx2,fma")
namespace lora_avx2 {
using namespace simd;

// The tile's row count is a template parameter (``NR``), so the sums below live in registers:
// with a run-time count the compiler keeps them in memory and every multiply-add is a load and a
// store.

// t[i, c:c+8*CH) = x[rows[i]] A[:, c:c+8*CH) for the tile's NR rows: each A row read once for
// the tile and its CH vectors; fewer rows take more vectors per pass (at most 8 sums).
template <int NR, int CH, typename T>
inline void times_a_cols(const T* const* xs, int64_t K, const T* a, int64_t W, int64_t w, int64_t c,
                         float* t) {
  __m256 acc[NR][CH];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < CH; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 av[CH];
    for (int j = 0; j < CH; ++j) av[j] = load_at(a + k * W, c + j * kLanes, w);
    for (int i = 0; i < NR; ++i) {
      const __m256 xv = _mm256_set1_ps(static_cast<float>(xs[i][k]));
      for (int j = 0; j < CH; ++j) acc[i][j] = _mm256_fmadd_ps(xv, av[j], acc[i][j]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < CH; ++j) store_at(t + i * w, c + j * kLanes, w, acc[i][j]);
}

template <int NR, typename T>
inline void times_a(const T* const* xs, int64_t K, const T* a, int64_t W, int64_t w, float* t) {
  constexpr int CH = NR <= 2 ? 4 : NR <= 4 ? 2 : 1;
  const int64_t vectors = (w + kLanes - 1) / kLanes;
  int64_t v = 0;
  for (; v + CH <= vectors; v += CH) times_a_cols<NR, CH>(xs, K, a, W, w, v * kLanes, t);
  for (; v < vectors; ++v) times_a_cols<NR, 1>(xs, K, a, W, w, v * kLanes, t);
}

// d[i, lo:hi) += t[i, r0:r1) B[r0:r1, lo:hi) for one block of B's rank rows that write the same
// columns (a fused linear's shard): 8 columns at a time, the NR rows' sums in registers. d has 8
// floats of room past each row's end, for the last partial vector (B reads zero past hi).
template <int NR, typename T>
inline void times_b(const float* t, int64_t w, const T* b, int64_t N, int64_t r0, int64_t r1,
                    int64_t lo, int64_t hi, float* d, int64_t d_stride) {
  for (int64_t c = lo; c < hi; c += kLanes) {
    __m256 acc[NR];
    for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t r = r0; r < r1; ++r) {
      const __m256 bv = load_at(b + r * N, c, hi);
      for (int i = 0; i < NR; ++i) acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(t[i * w + r]), bv, acc[i]);
    }
    for (int i = 0; i < NR; ++i) {
      float* di = d + i * d_stride + c;
      _mm256_storeu_ps(di, _mm256_add_ps(_mm256_loadu_ps(di), acc[i]));
    }
  }
}

template <int NR, typename T>
void tile_rows(const T* x, T* out, const T* a, const T* b, const int32_t* spans, const int64_t* rows,
               int64_t K, int64_t N, int64_t W, int64_t w) {
  const int64_t stride = N + kLanes;
  std::vector<float> t(NR * w), d(NR * stride, 0.f);
  const T* xs[NR];
  for (int i = 0; i < NR; ++i) xs[i] = x + rows[i] * K;
  times_a<NR>(xs, K, a, W, w, t.data());
  for (int64_t r0 = 0, r1; r0 < w; r0 = r1) {  // blocks of rank rows with one span
    for (r1 = r0 + 1; r1 < w && spans[2 * r1] == spans[2 * r0] && spans[2 * r1 + 1] == spans[2 * r0 + 1];) ++r1;
    times_b<NR>(t.data(), w, b, N, r0, r1, spans[2 * r0], spans[2 * r0 + 1], d.data(), stride);
  }
  for (int i = 0; i < NR; ++i) {  // out += d, rounded once
    T* o = out + rows[i] * N;
    const float* di = d.data() + i * stride;
    for (int64_t j = 0; j < N; j += kLanes)
      store_at(o, j, N, _mm256_add_ps(load_at(o, j, N), load_at(di, j, N)));
  }
}

static_assert(kLoraTileRows == 8, "tile() dispatches 1 to 8 rows");

template <typename T>
void tile(const T* x, T* out, const T* a, const T* b, const int32_t* spans, const int64_t* rows, int64_t n,
          int64_t K, int64_t N, int64_t W, int64_t w) {
  switch (n) {
    case 1: return tile_rows<1>(x, out, a, b, spans, rows, K, N, W, w);
    case 2: return tile_rows<2>(x, out, a, b, spans, rows, K, N, W, w);
    case 3: return tile_rows<3>(x, out, a, b, spans, rows, K, N, W, w);
    case 4: return tile_rows<4>(x, out, a, b, spans, rows, K, N, W, w);
    case 5: return tile_rows<5>(x, out, a, b, spans, rows, K, N, W, w);
    case 6: return tile_rows<6>(x, out, a, b, spans, rows, K, N, W, w);
    case 7: return tile_rows<7>(x, out, a, b, spans, rows, K, N, W, w);
    default: return tile_rows<8>(x, out, a, b, spans, rows, K, N, W, w);
  }
}

}  // namespace lora_avx2
MSTAR_TARGET_POP
#endif

inline void check_lora_index(const at::Tensor& t, at::ScalarType type, int64_t dims, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == type && t.dim() == dims && t.is_contiguous(),
              name, " must be a contiguous CPU tensor of ", dims, " dimension(s) of ", c10::toString(type));
}

void lora_delta(at::Tensor& out, const at::Tensor& x_in, const at::Tensor& a, const at::Tensor& b,
                const at::Tensor& spans, const at::Tensor& widths, const at::Tensor& order,
                const at::Tensor& starts, const at::Tensor& group_slots) {
  check_fused_supported();
  check_float_dtype(out, "out");
  const at::Tensor x = x_in.contiguous();
  TORCH_CHECK(out.dim() == 2 && out.is_contiguous() && x.dim() == 2 && x.size(0) == out.size(0),
              "x must be [T, K] and out a contiguous [T, N]");
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.is_contiguous() && b.is_contiguous() &&
                  a.size(0) == b.size(0) && a.size(1) == x.size(1) && a.size(2) == b.size(1) &&
                  b.size(2) == out.size(1),
              "a must be contiguous [S, K, W] and b [S, W, N]");
  for (const at::Tensor* t : {&x, &a, &b})
    TORCH_CHECK(t->scalar_type() == out.scalar_type(), "x, a and b must be in out's dtype");
  check_lora_index(spans, at::kInt, 3, "spans");
  check_lora_index(widths, at::kInt, 1, "widths");
  for (const auto& [t, name] : {std::pair{&order, "order"}, {&starts, "starts"}, {&group_slots, "group_slots"}})
    check_lora_index(*t, at::kLong, 1, name);
  const int64_t T = out.size(0), N = out.size(1), K = x.size(1), S = a.size(0), W = a.size(2);
  const int64_t G = group_slots.size(0);
  TORCH_CHECK(spans.size(0) == S && spans.size(1) == W && spans.size(2) == 2 && widths.size(0) == S,
              "spans must be [S, W, 2] and widths [S]");
  TORCH_CHECK(starts.size(0) == G + 1, "starts must be [groups + 1]");
  const int64_t *op = order.data_ptr<int64_t>(), *sp = starts.data_ptr<int64_t>(),
                *gp = group_slots.data_ptr<int64_t>();
  const int32_t *wp = widths.data_ptr<int32_t>(), *pp = spans.data_ptr<int32_t>();
  TORCH_CHECK(sp[0] == 0 && sp[G] == order.size(0), "starts must run from 0 to the rows of order");
  std::vector<std::tuple<int64_t, int64_t, int64_t>> items;  // (group, first, end) per tile
  for (int64_t g = 0; g < G; ++g) {
    TORCH_CHECK(sp[g] <= sp[g + 1] && gp[g] >= 0 && gp[g] < S, "group ", g, ": bad rows or slot");
    TORCH_CHECK(wp[gp[g]] >= 0 && wp[gp[g]] <= W, "slot ", gp[g], ": width outside [0, ", W, "]");
    for (int64_t r = 0; r < wp[gp[g]]; ++r) {
      const int32_t lo = pp[(gp[g] * W + r) * 2], hi = pp[(gp[g] * W + r) * 2 + 1];
      TORCH_CHECK(0 <= lo && lo <= hi && hi <= N, "slot ", gp[g], " rank row ", r, ": span outside the output");
    }
    for (int64_t i = sp[g]; i < sp[g + 1]; ++i) TORCH_CHECK(op[i] >= 0 && op[i] < T, "row ", op[i], " outside x");
    if (wp[gp[g]] > 0)
      for (int64_t i = sp[g]; i < sp[g + 1]; i += kLoraTileRows)
        items.emplace_back(g, i, std::min(i + kLoraTileRows, sp[g + 1]));
  }
#ifdef MSTAR_X86
  dispatch_float(out.scalar_type(), [&](auto type) {
    using D = decltype(type);
    const D *xp = x.data_ptr<D>(), *ap = a.data_ptr<D>(), *bp = b.data_ptr<D>();
    D* outp = out.data_ptr<D>();
    at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t it = begin; it < end; ++it) {
        const auto [g, first, last] = items[it];
        const int64_t s = gp[g];
        lora_avx2::tile(xp, outp, ap + s * K * W, bp + s * W * N, pp + s * W * 2, op + first, last - first, K, N,
                        W, wp[s]);
      }
    });
  });
#endif
}

}  // namespace
