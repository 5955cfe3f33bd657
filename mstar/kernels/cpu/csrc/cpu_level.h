// Which instruction-set features this CPU has, each detected on its own with cpuid, and the
// kernel levels they allow.
//
// A level is a set of features, not a rung of a ladder: AVX-512 VNNI does not imply AVX-VNNI (the
// VEX-encoded vpdpwssd; Zen 4, Ice Lake and Cascade Lake have the first without the second), nor
// the reverse (Alder Lake). A level runs only on a CPU that has every feature it needs; the kernels
// of each family choose their code by the features of the level (level_uses), never by comparing
// level numbers. Python mirrors this table in mstar/kernels/cpu/levels.py (a test compares them).
#pragma once
#include "common.h"

#if defined(MSTAR_X86)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace {

// One bit per feature, in the order of kFeatureNames.
enum Feature : int64_t {
  kFeatAvx2 = 1,         // AVX2 + FMA + F16C: every SIMD kernel's base
  kFeatAvxVnni = 2,      // AVX-VNNI (VEX vpdpwssd on 256-bit registers)
  kFeatAvx512Vnni = 4,   // AVX-512 F + BW + VL + VNNI (EVEX vpdpwssd)
  kFeatAvx512Bf16 = 8,   // AVX-512 BF16 (vdpbf16ps: the bf16 decode linear, bf16_dot.h)
  kFeatAmx = 16,         // AMX tiles with bf16 and int8 (the quantized wide path, dequant_amx.h)
};
constexpr const char* kFeatureNames[] = {"avx2+fma+f16c", "avx_vnni", "avx512_vnni+bw+vl", "avx512_bf16", "amx"};
constexpr int kFeatureCount = sizeof(kFeatureNames) / sizeof(kFeatureNames[0]);

// The kernel levels a test can force, and what each needs.
// avx512_bf16 comes with AVX-512 VNNI on every CPU that has it (Cooper Lake, Sapphire Rapids, Zen 4):
// its level runs the integer-dot kernels at avx512_vnni and the bf16 linear on vdpbf16ps.
// amx runs every kernel as avx512_bf16 does but the quantized linears' wide path (dequant_amx.h).
enum Level : int64_t { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3, kAvx512Bf16 = 4, kAmx = 5 };
constexpr const char* kLevelNames[] = {"scalar", "avx2", "avx_vnni", "avx512_vnni", "avx512_bf16", "amx"};
constexpr int64_t kLevelFeatures[] = {0, kFeatAvx2, kFeatAvx2 | kFeatAvxVnni, kFeatAvx2 | kFeatAvx512Vnni,
                                      kFeatAvx2 | kFeatAvx512Vnni | kFeatAvx512Bf16,
                                      kFeatAvx2 | kFeatAvx512Vnni | kFeatAvx512Bf16 | kFeatAmx};
constexpr int64_t kLevelCount = sizeof(kLevelFeatures) / sizeof(kLevelFeatures[0]);
// The level a call runs at when none is forced: the first of these that the CPU has.
constexpr int64_t kPreferred[] = {kAmx, kAvx512Bf16, kAvx512Vnni, kAvxVnni, kAvx2, kScalar};

#if defined(MSTAR_X86)
// The XCR0 bits the OS sets when it saves a register state (xgetbv needs OSXSAVE, checked first).
inline uint64_t os_saved_state() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return 0;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Linux lends a process the AMX tile registers only when asked (arch_prctl ARCH_REQ_XCOMP_PERM
// for XFEATURE_XTILEDATA); a tile instruction before that is SIGILL. True when granted (asking
// again is harmless: oneDNN asks too).
inline bool amx_permitted() {
#if defined(__linux__)
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

inline bool cpuid_bit(unsigned leaf, unsigned sub, int reg, unsigned bit) {
  unsigned r[4];
  return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]) && (r[reg] & (1u << bit));
}
#endif

int64_t detect_features() {
  int64_t features = 0;
#if defined(MSTAR_X86)
  __builtin_cpu_init();
  enum { kEax = 0, kEbx = 1, kEcx = 2, kEdx = 3 };
  // __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 registers.
  const bool avx = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx && cpuid_bit(1, 0, kEcx, 29)) features |= kFeatAvx2;              // F16C
  if (avx && cpuid_bit(7, 1, kEax, 4)) features |= kFeatAvxVnni;            // AVX-VNNI
  if (avx512 && __builtin_cpu_supports("avx512vnni")) features |= kFeatAvx512Vnni;
  if (avx512 && cpuid_bit(7, 1, kEax, 5)) features |= kFeatAvx512Bf16;      // AVX512_BF16
  const uint64_t tile_state = (1u << 17) | (1u << 18);                    // XTILECFG, XTILEDATA
  if (cpuid_bit(7, 0, kEdx, 24) && cpuid_bit(7, 0, kEdx, 22) && cpuid_bit(7, 0, kEdx, 25) &&
      (os_saved_state() & tile_state) == tile_state && amx_permitted())
    features |= kFeatAmx;                                                   // AMX-TILE, -BF16, -INT8
#endif
  return features;
}

int64_t cpu_features() {
  static const int64_t features = detect_features();
  return features;
}

bool cpu_has_level(int64_t level) { return (cpu_features() & kLevelFeatures[level]) == kLevelFeatures[level]; }

int64_t cpu_level() {
  for (int64_t level : kPreferred)
    if (cpu_has_level(level)) return level;
  return kScalar;
}

// Whether `level`'s kernels use `feature` (how each kernel family picks its code for a level).
inline bool level_uses(int64_t level, int64_t feature) { return (kLevelFeatures[level] & feature) != 0; }

// The features of `level` the CPU lacks, by name ("" when it has them all).
std::string missing_features(int64_t level) {
  std::string names;
  for (int i = 0; i < kFeatureCount; ++i)
    if ((kLevelFeatures[level] & ~cpu_features()) & (int64_t{1} << i))
      names += (names.empty() ? "" : ", ") + std::string(kFeatureNames[i]);
  return names;
}

// The level a call runs at: the CPU's preferred one, or `requested` (tests force each level) if
// the CPU has every feature it needs.
int64_t resolve_level(int64_t requested) {
  if (requested < 0) return cpu_level();
  TORCH_CHECK(requested < kLevelCount, "unknown kernel level ", requested, " (0 to ", kLevelCount - 1, ")");
  TORCH_CHECK(cpu_has_level(requested), "kernel level ", requested, " (", kLevelNames[requested],
              ") is not supported by this CPU: it lacks ", missing_features(requested));
  return requested;
}

// What `level` needs, as feature bits (the ops' level_features; Python checks its mirror).
int64_t level_features(int64_t level) {
  TORCH_CHECK(level >= 0 && level < kLevelCount, "unknown kernel level ", level, " (0 to ", kLevelCount - 1, ")");
  return kLevelFeatures[level];
}

}  // namespace
