// What the fused per-token ops share (norm_ops.h, activation_ops.h, rope_ops.h,
// decode_attention.h): the CPU check, the dtype check and dispatch, and the rows of a tensor.
// Their SIMD helpers (8 floats loaded from float32 or bfloat16, stored back with torch's
// rounding, exp) are simd.h's.
//
// The fused ops have no scalar level: on a CPU without AVX2 the models keep their torch path
// (mstar/models/layers/fused_ops.py).
#pragma once
#include <c10/util/BFloat16.h>

#include <optional>

#include "cpu_level.h"
#include "simd.h"

namespace {

// The fused ops run on this CPU (AVX2 and F16C).
inline bool fused_ops_supported() { return (cpu_features() & kFeatAvx2) != 0; }

inline void check_fused_supported() {
  TORCH_CHECK(fused_ops_supported(), "the fused CPU ops need AVX2 (use the torch path on this CPU)");
}

inline void check_float_dtype(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16),
              name, " must be a float32 or bfloat16 CPU tensor");
}

// Calls body(T{}) with T the C++ type of a float32 or bfloat16 tensor.
template <typename Body>
void dispatch_float(at::ScalarType type, Body body) {
  if (type == at::kFloat)
    body(float{});
  else
    body(BFloat16{});
}

// Rows of the last dimension of a tensor of any rank whose rows are evenly spaced in at most two
// strides: row r starts at base + (r / inner) * outer_stride + (r % inner) * inner_stride.
struct Rows {
  char* base;
  int64_t count, inner, outer_stride, inner_stride, width;  // strides in elements

  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(base) + (r / inner) * outer_stride + (r % inner) * inner_stride;
  }
};

// The rows of t, or nullopt when its layout needs a copy first (last dim strided, or more than
// two distinct row strides).
inline std::optional<Rows> rows_of(const at::Tensor& t) {
  if (t.dim() == 0 || (t.size(-1) > 1 && t.stride(-1) != 1)) return std::nullopt;
  const int64_t width = t.size(-1), count = width ? t.numel() / width : 0;
  char* base = static_cast<char*>(t.data_ptr());
  if (t.dim() == 1) return Rows{base, count, 1, 0, 0, width};
  if (t.dim() == 2) return Rows{base, count, 1, t.stride(0), 0, width};
  if (t.dim() == 3) return Rows{base, count, std::max<int64_t>(t.size(1), 1), t.stride(0), t.stride(1), width};
  if (t.is_contiguous()) return Rows{base, count, 1, width, 0, width};
  return std::nullopt;
}

// Rows per parallel work item: about 16k elements, so small batches run on the calling thread.
inline int64_t row_grain(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)); }

}  // namespace
