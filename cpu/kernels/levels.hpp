// The kernel tables of each ISA level (weight kernels defined in scalar/, avx2/, avx512/,
// neon/; op kernels in cpu/ops/levels/tables.cpp), looked up by dispatch.cpp. Plain constant objects: taking their address runs no code of
// the level, so it is safe on CPUs that lack it.
#pragma once

#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/op_kernels.hpp"

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

namespace scalar {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
#if defined(EMBER_X86)
namespace avx2 {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
namespace avx2vnni {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
namespace avx512 {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
#endif
#if defined(EMBER_ARM64)
// ARM64: one NEON source (kernels/neon) compiled per level: plain NEON (vmull / vpadal),
// + the dot-product extension (SDOT), + i8mm (SMMLA).
namespace neon {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
namespace dotprod {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
namespace i8mm {
extern const WeightKernels kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ4_K, kQ5_K, kQ6_K;
}
#endif

}  // namespace ember::cpu
