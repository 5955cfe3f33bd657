// Shared pieces of the native CPU kernels (see ops.cpp): format constants and the macros that
// compile a region of code for one instruction-set level.
//
// One build serves every x86-64 CPU: SIMD code is compiled per function for its level
// (MSTAR_TARGET_PUSH/POP around a region) and only called after resolve_level() (cpu_level.h)
// found every feature of that level on the CPU, so the library never executes an instruction the
// CPU lacks.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MSTAR_X86 1
#endif

#define MSTAR_PRAGMA(x) _Pragma(#x)
#ifdef __clang__
#define MSTAR_TARGET_PUSH(t) \
  MSTAR_PRAGMA(clang attribute push(__attribute__((target(t))), apply_to = function))
#define MSTAR_TARGET_POP MSTAR_PRAGMA(clang attribute pop)
#else
#define MSTAR_TARGET_PUSH(t) MSTAR_PRAGMA(GCC push_options) MSTAR_PRAGMA(GCC target(t))
#define MSTAR_TARGET_POP MSTAR_PRAGMA(GCC pop_options)
#endif

namespace {

constexpr int64_t kQ4Block = 32;
constexpr int64_t kQ4BlockBytes = 20;

// Items 0 .. count - 1 in one parallel region whose threads claim them one at a time from a shared
// counter, rather than each running a fixed share: body(claim) runs once on each thread, and
// claim() returns the next unclaimed item, or count once none is left. Where items differ in cost
// (sequences of different lengths) or a thread is descheduled by another process (the API server
// and clients share the cores), the others take over its unstarted items instead of waiting for
// them at the region's end. Nested in another region it runs on the calling thread alone.
template <typename Body>
void claimed_parallel(int64_t count, const Body& body) {
  std::atomic<int64_t> next{0};
  const auto claim = [&] { return next.fetch_add(1, std::memory_order_relaxed); };
  at::parallel_for(0, std::min<int64_t>(count, at::get_num_threads()), 1,
                   [&](int64_t, int64_t) { body(claim); });
}

inline float half_to_float(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

}  // namespace
