// Weight-only quantized linear layers for CPU: y = x @ dequantize(W)^T, x and y float32.
//
// Each thread takes a tile of output rows, dequantizes them into a small float32 scratch that
// stays in L1/L2, then runs a register-blocked FMA micro-kernel over every row of x. The weights
// are read from memory once per call, whatever the batch size. Batches of 4 rows and more
// transpose the tile into a k-major panel and broadcast x (no horizontal sums), the layout BLAS
// kernels use; smaller ones dequantize in registers (see block_dots).
//
// q4: GGUF Q4_1 blocks of 20 bytes per 32 weights: fp16 scale d, fp16 minimum m, 16 bytes of
//     nibbles (byte j holds weight j in its low nibble and weight j + 16 in its high nibble);
//     weight = q * d + m.
// int8: int8 weights [N, K] with float32 scales [N, G], one per group of K / G weights.
#include "common.h"
#include "small_batch.h"
#include "tiled.h"

namespace {

void check_input(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 2,
              "x must be a 2-d float32 CPU tensor");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " features, the weight ", K);
}

at::Tensor q4_linear(const at::Tensor& x_in, const at::Tensor& blocks, int64_t K) {
  TORCH_CHECK(K % kQ4Block == 0, "q4 needs in_features divisible by 32");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 2 && blocks.is_contiguous() &&
                  blocks.size(1) == K / kQ4Block * kQ4BlockBytes,
              "q4 blocks must be contiguous uint8 [N, K / 32 * 20]");
  at::Tensor x = x_in.contiguous();
  check_input(x, K);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  const int64_t row_bytes = blocks.size(1);
#ifdef MSTAR_AVX2
  if (x.size(0) < kPanelMinRows) {
    const int64_t M = x.size(0), N = blocks.size(0);
    at::Tensor out = at::empty({M, N}, x.options());
    const float* xp = x.data_ptr<float>();
    const std::vector<float> sums = block_sums(xp, M, K);
    float* op = out.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      q4_small_batch(xp, sums, M, K, bp, begin, end, op, N);
    });
    return out;
  }
#endif
  return tiled_linear(x, blocks.size(0),
                      [&](int64_t n, float* dst) { dequant_q4_row(bp + n * row_bytes, K, dst); });
}

at::Tensor int8_linear(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(weight.scalar_type() == at::kChar && weight.dim() == 2 && weight.is_contiguous(),
              "int8 weight must be contiguous int8 [N, K]");
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(K % 8 == 0, "int8 needs in_features divisible by 8");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.dim() == 2 && scales.is_contiguous() &&
                  scales.size(0) == N && K % scales.size(1) == 0,
              "int8 scales must be contiguous float32 [N, G] with G dividing in_features");
  at::Tensor x = x_in.contiguous();
  check_input(x, K);
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  const int64_t groups = scales.size(1), group = K / groups;
#ifdef MSTAR_AVX2
  if (x.size(0) < kPanelMinRows && group % kQ4Block == 0) {
    const int64_t M = x.size(0);
    at::Tensor out = at::empty({M, N}, x.options());
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      int8_small_batch(xp, M, K, wp, sp, groups, begin, end, op, N);
    });
    return out;
  }
#endif
  return tiled_linear(x, N, [&](int64_t n, float* dst) {
    dequant_int8_row(wp + n * K, sp + n * groups, K, group, dst);
  });
}

}  // namespace

TORCH_LIBRARY(mstar_quant, m) {
  m.def("q4_linear(Tensor x, Tensor blocks, int in_features) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor weight, Tensor scales) -> Tensor");
}

TORCH_LIBRARY_IMPL(mstar_quant, CPU, m) {
  m.impl("q4_linear", &q4_linear);
  m.impl("int8_linear", &int8_linear);
}
