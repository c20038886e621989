// Run-time choice of the kernel level: CPU feature detection, the EMBER_CPU_ISA
// override, and the lookup of the per-level kernel tables (weight_kernels, op_kernels).
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#if defined(EMBER_X86)
#include <cpuid.h>
#endif

#include "common/fail.hpp"
#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/levels.hpp"

#if defined(EMBER_ARM64) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(EMBER_ARM64) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

namespace ember::cpu {
namespace {

// Features each level's files are compiled for (cpu/CMakeLists.txt).
bool cpu_has_avx2() {
#if defined(EMBER_X86)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

// AVX-VNNI (VEX-encoded vpdpbusd on 256-bit registers): CPUID leaf 7 sub-leaf 1, EAX
// bit 4. GCC 12's __builtin_cpu_supports does not know it; the OS support for YMM
// state is already implied by cpu_has_avx2.
bool cpu_has_avx2vnni() {
#if defined(EMBER_X86) && defined(EMBER_EMULATE_AVX_VNNI)
  return cpu_has_avx2();   // a test build: the level's AVX-VNNI instructions are emulated
#elif defined(EMBER_X86)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!cpu_has_avx2() || __get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  return (eax >> 4) & 1u;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(EMBER_X86)
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// ARM64 features: Linux reports them in the auxiliary vector (bits of <asm/hwcap.h>,
// spelled out here so that older kernel headers do), macOS in sysctl's hw.optional.arm.
struct ArmFeatures {
  bool asimd = false, dotprod = false, i8mm = false;
};

ArmFeatures arm_features() {
  ArmFeatures f;
#if defined(EMBER_ARM64) && defined(__linux__)
  constexpr unsigned long kHwcapAsimd = 1ul << 1;     // HWCAP_ASIMD
  constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP (SDOT, UDOT)
  constexpr unsigned long kHwcap2I8mm = 1ul << 13;    // HWCAP2_I8MM (SMMLA, UMMLA, USMMLA)
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  f.asimd = (hwcap & kHwcapAsimd) != 0;
  f.dotprod = (hwcap & kHwcapAsimdDp) != 0;
  f.i8mm = (hwcap2 & kHwcap2I8mm) != 0;
#elif defined(EMBER_ARM64) && defined(__APPLE__)
  auto has = [](const char* name) {
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
  };
  f.asimd = true;  // every Apple ARM64 CPU
  f.dotprod = has("hw.optional.arm.FEAT_DotProd");
  f.i8mm = has("hw.optional.arm.FEAT_I8MM");
#endif
  return f;
}

std::vector<Isa> detect() {
  std::vector<Isa> isas{Isa::scalar};
  if (cpu_has_avx2()) isas.push_back(Isa::avx2);
  if (cpu_has_avx2vnni()) isas.push_back(Isa::avx2vnni);
  if (cpu_has_avx512()) isas.push_back(Isa::avx512);
  // Each ARM level's kernels use its instructions and those of the levels below.
  const ArmFeatures arm = arm_features();
  if (arm.asimd) isas.push_back(Isa::neon);
  if (arm.asimd && arm.dotprod) isas.push_back(Isa::dotprod);
  if (arm.asimd && arm.dotprod && arm.i8mm) isas.push_back(Isa::i8mm);
  return isas;
}

const std::vector<Isa>& detected() {
  static const std::vector<Isa> isas = detect();
  return isas;
}

bool available(Isa isa) {
  for (Isa i : detected())
    if (i == isa) return true;
  return false;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx2vnni: return "avx2vnni";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
    case Isa::dotprod: return "dotprod";
    case Isa::i8mm: return "i8mm";
  }
  return "unknown";
}

std::span<const Isa> available_isas() { return detected(); }

Isa op_level(Isa isa) {
  switch (isa) {
    case Isa::avx2vnni: return Isa::avx2;
    case Isa::dotprod:
    case Isa::i8mm: return Isa::neon;
    default: return isa;
  }
}

Isa best_isa() {
  if (const char* forced = std::getenv("EMBER_CPU_ISA")) {
    for (Isa isa : detected())
      if (isa_name(isa) == std::string_view(forced)) return isa;
  }
  return detected().back();
}

namespace {

// The level whose weight kernels a level runs for a type it has no table of (the
// registry's `levels` column): the next one below that this CPU also runs.
std::optional<Isa> level_below(Isa isa) {
  switch (isa) {
    case Isa::avx2vnni:
    case Isa::avx512: return Isa::avx2;
    case Isa::i8mm: return Isa::dotprod;
    case Isa::dotprod: return Isa::neon;
    case Isa::avx2:
    case Isa::neon: return Isa::scalar;
    case Isa::scalar: break;
  }
  return std::nullopt;
}

// The table of `type` that `isa` has of its own, or nullptr.
const WeightKernels* own_kernels(Isa isa, quant::DType type) {
#define EMBER_KERNELS_ENTRY(level, levels, NAME) \
  EMBER_IF_LEVEL(levels, level, if (level::k##NAME.weight_type == type) return &level::k##NAME;)
#define EMBER_ENTRY_scalar(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(scalar, levels, NAME)
#define EMBER_ENTRY_avx2(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(avx2, levels, NAME)
#define EMBER_ENTRY_avx2vnni(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(avx2vnni, levels, NAME)
#define EMBER_ENTRY_avx512(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(avx512, levels, NAME)
#define EMBER_ENTRY_neon(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(neon, levels, NAME)
#define EMBER_ENTRY_dotprod(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(dotprod, levels, NAME)
#define EMBER_ENTRY_i8mm(id, NAME, t, e, b, a, levels) EMBER_KERNELS_ENTRY(i8mm, levels, NAME)
#define EMBER_LEVEL_CASE(level)            \
  case Isa::level: {                       \
    EMBER_WEIGHT_TYPES(EMBER_ENTRY_##level) \
    return nullptr;                        \
  }
  switch (isa) {
    EMBER_LEVEL_CASE(scalar)
#if defined(EMBER_X86)
    EMBER_LEVEL_CASE(avx2)
    EMBER_LEVEL_CASE(avx2vnni)
    EMBER_LEVEL_CASE(avx512)
#endif
#if defined(EMBER_ARM64)
    EMBER_LEVEL_CASE(neon)
    EMBER_LEVEL_CASE(dotprod)
    EMBER_LEVEL_CASE(i8mm)
#endif
    default: break;
  }
#undef EMBER_LEVEL_CASE
  return nullptr;
}

}  // namespace

const WeightKernels& weight_kernels(Isa isa, quant::DType type) {
  if (!available(isa)) fail(ErrorCode::unsupported, "CPU kernels: this CPU cannot run the {} level", isa_name(isa));
  const WeightKernels* found = nullptr;
  for (std::optional<Isa> level = isa; level && !found; level = level_below(*level)) found = own_kernels(*level, type);
  if (!found)
    fail(ErrorCode::unsupported, "CPU kernels: no {} kernels for weight type {}", isa_name(isa),
         quant::type_name(type));
  return *found;
}

const OpKernels& op_kernels(Isa isa) {
  if (!available(isa)) fail(ErrorCode::unsupported, "CPU kernels: this CPU cannot run the {} level", isa_name(isa));
  switch (op_level(isa)) {
    case Isa::scalar: return scalar::kOps;
#if defined(EMBER_X86)
    case Isa::avx2: return avx2::kOps;
    case Isa::avx512: return avx512::kOps;
#endif
#if defined(EMBER_ARM64)
    case Isa::neon: return neon::kOps;
#endif
    default: break;
  }
  fail(ErrorCode::unsupported, "CPU kernels: no op kernels for the {} level", isa_name(isa));
}

}  // namespace ember::cpu
