// Which SIMD level this CPU runs, read once with cpuid (through the compiler's builtins).
#pragma once
#include "common.h"

#if defined(MSTAR_X86)
#include <cpuid.h>
#endif

namespace {

// Ordered: each level's kernels use only instructions every higher level also has.
enum Level : int64_t { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3 };

int64_t detect_level() {
#if defined(MSTAR_X86)
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers.
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return kScalar;
  unsigned eax, ebx, ecx, edx;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  if (!f16c) return kScalar;
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw"))
    return kAvx512Vnni;
  // AVX-VNNI: CPUID.(EAX=7, ECX=1):EAX bit 4 (its registers are the AVX ones checked above).
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4))) return kAvxVnni;
  return kAvx2;
#else
  return kScalar;
#endif
}

int64_t cpu_level() {
  static const int64_t level = detect_level();
  return level;
}

// The level a call runs at: the CPU's best, or `requested` (tests force each level) if the CPU has it.
int64_t resolve_level(int64_t requested) {
  if (requested < 0) return cpu_level();
  TORCH_CHECK(requested <= cpu_level(), "kernel level ", requested, " is not supported by this CPU (best ",
              cpu_level(), ")");
  return requested;
}

}  // namespace
