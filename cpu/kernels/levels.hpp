// The kernel tables of each ISA level (weight kernels defined in scalar/, avx2/, avx512/,
// neon/; op kernels in cpu/ops/levels/tables.cpp), looked up by dispatch.cpp. Plain constant objects: taking their address runs no code of
// the level, so it is safe on CPUs that lack it.
#pragma once

#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "quant/weight_types.hpp"

namespace ember::cpu {

// The op kernels of the levels that have their own (op_level): scalar, avx2, avx512, neon.
namespace scalar {
extern const OpKernels kOps;
}
#if defined(EMBER_X86)
namespace avx2 {
extern const OpKernels kOps;
}
namespace avx512 {
extern const OpKernels kOps;
}
#endif
#if defined(EMBER_ARM64)
namespace neon {
extern const OpKernels kOps;
}
#endif

// The weight-kernel tables k<NAME> of every level that the registry's `levels` column
// gives one (quant/weight_types.hpp).
#define EMBER_DECLARE_KERNELS(level)                                                              \
  namespace level {                                                                               \
  EMBER_WEIGHT_TYPES(EMBER_DECLARE_KERNELS_ROW_##level)                                           \
  }
#define EMBER_KERNELS_EXTERN(levels, level, NAME) EMBER_IF_LEVEL(levels, level, extern const WeightKernels k##NAME;)
#define EMBER_DECLARE_KERNELS_ROW_scalar(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, scalar, NAME)
#define EMBER_DECLARE_KERNELS_ROW_avx2(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, avx2, NAME)
#define EMBER_DECLARE_KERNELS_ROW_avx2vnni(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, avx2vnni, NAME)
#define EMBER_DECLARE_KERNELS_ROW_avx512(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, avx512, NAME)
#define EMBER_DECLARE_KERNELS_ROW_neon(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, neon, NAME)
#define EMBER_DECLARE_KERNELS_ROW_dotprod(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, dotprod, NAME)
#define EMBER_DECLARE_KERNELS_ROW_i8mm(id, NAME, t, e, b, a, levels) EMBER_KERNELS_EXTERN(levels, i8mm, NAME)

EMBER_DECLARE_KERNELS(scalar)
#if defined(EMBER_X86)
EMBER_DECLARE_KERNELS(avx2)
EMBER_DECLARE_KERNELS(avx2vnni)
EMBER_DECLARE_KERNELS(avx512)
#endif
#if defined(EMBER_ARM64)
// ARM64: one NEON source (kernels/neon) compiled per level: plain NEON (vmull / vpadal),
// + the dot-product extension (SDOT), + i8mm (SMMLA).
EMBER_DECLARE_KERNELS(neon)
EMBER_DECLARE_KERNELS(dotprod)
EMBER_DECLARE_KERNELS(i8mm)
#endif

}  // namespace ember::cpu
