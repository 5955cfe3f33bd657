// The argument checks of the quantized linears, one per rule: the integer-dot kernels (ops.cpp)
// and the wide-batch path (dequant_gemm.h) take the same tensors.
#pragma once
#include "common.h"

namespace {

void check_input(const at::Tensor& x, int64_t K) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.dim() == 2,
              "x must be a 2-d float32 CPU tensor");
  TORCH_CHECK(x.size(1) == K, "x has ", x.size(1), " features, the weight ", K, " features");
}

void check_q4(const at::Tensor& blocks, int64_t K) {
  TORCH_CHECK(K % kQ4Block == 0, "q4 needs in_features divisible by 32");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.dim() == 2 && blocks.is_contiguous() &&
                  blocks.size(1) == K / kQ4Block * kQ4BlockBytes,
              "q4 blocks must be contiguous uint8 [N, K / 32 * 20]");
}

void check_int8(const at::Tensor& weight, const at::Tensor& scales) {
  TORCH_CHECK(weight.scalar_type() == at::kChar && weight.dim() == 2 && weight.is_contiguous(),
              "int8 weight must be contiguous int8 [N, K]");
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.dim() == 2 && scales.is_contiguous() &&
                  scales.size(0) == N && K % scales.size(1) == 0 && (K / scales.size(1)) % kQ4Block == 0,
              "int8 scales must be contiguous float32 [N, G], groups of a multiple of 32 weights");
}

}  // namespace
