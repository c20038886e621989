// Each level's OpKernels table (cpu/kernels/op_kernels.hpp), looked up by op_kernels()
// in cpu/kernels/dispatch.cpp. Only addresses: this file is compiled for the baseline
// target and the tables are constant-initialized.
//
// Where a level has no variant of its own, the entry names the lower level's that it
// runs today: the AVX-512 level's f32 attention rows, to_f16 and GELU row are AVX2's;
// the ARM64 levels run the elementwise loops of the scalar level (loops.cpp, compiled
// for ARMv8-A, whose baseline has NEON, and vectorized by the compiler; docs/arm.md).
#include "cpu/kernels/gemm_f32.hpp"
#include "cpu/kernels/levels.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu {

namespace scalar {
extern const OpKernels kOps = {
    .level = Isa::scalar,
    .add_row = add_row,
    .mul_row = mul_row,
    .scale_row = scale_row,
    .silu_glu_row = silu_glu_row,
    .gelu_glu_row = gelu_glu_row,
    .scale_weighted = scale_weighted,
    .rotate_neox = rotate_neox,
    .rotate_normal = rotate_normal,
    .to_f16 = to_f16,
    .f16_to_f32 = f16_to_f32,
    .dot_f16 = dot_f16,
    .axpy_f16 = axpy_f16,
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .pv_lanes_f16 = nullptr,
    .dot64_f16 = dot64_f16,
    .dot64_f32 = dot64_f32,
    .dot16_f16 = dot16_f16,
    .dot16_f32 = dot16_f32,
    .gemm16 = gemm16,
    .reduce_lanes = reduce_lanes,
    .exp_row = exp_row,
    .exp_masked = exp_masked,
    .exp_masked16 = exp_masked16,
    .add_into = add_into,
    .scale_by = scale_by,
    .gemm_nt = gemm_nt,
    .gemm_nn = gemm_nn,
    .kv_rows = kv_rows,
    .scores_f16 = scores_f16,
    .pv_f16 = pv_f16,
    .scores_q8 = scores_q8,
    .pv_q8 = pv_q8,
    .scores_q4 = scores_q4,
    .pv_q4 = pv_q4,
};
}  // namespace scalar

#if defined(EMBER_X86)
namespace avx2 {
extern const OpKernels kOps = {
    .level = Isa::avx2,
    .add_row = add_row,
    .mul_row = mul_row,
    .scale_row = scale_row,
    .silu_glu_row = silu_glu_row,
    .gelu_glu_row = gelu_glu_row,
    .scale_weighted = scale_weighted,
    .rotate_neox = rotate_neox,
    .rotate_normal = rotate_normal,
    .to_f16 = to_f16,
    .f16_to_f32 = f16_to_f32,
    .dot_f16 = dot_f16,
    .axpy_f16 = axpy_f16,
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .pv_lanes_f16 = pv_lanes_f16,
    .dot64_f16 = dot64_f16,
    .dot64_f32 = dot64_f32,
    .dot16_f16 = dot16_f16,
    .dot16_f32 = dot16_f32,
    .gemm16 = gemm16,
    .reduce_lanes = reduce_lanes,
    .exp_row = exp_row,
    .exp_masked = exp_masked,
    .exp_masked16 = exp_masked16,
    .add_into = add_into,
    .scale_by = scale_by,
    .gemm_nt = gemm_nt,
    .gemm_nn = gemm_nn,
    .kv_rows = kv_rows,
    .scores_f16 = scores_f16,
    .pv_f16 = pv_f16,
    .scores_q8 = scores_q8,
    .pv_q8 = pv_q8,
    .scores_q4 = scores_q4,
    .pv_q4 = pv_q4,
};
}  // namespace avx2

namespace avx512 {
extern const OpKernels kOps = {
    .level = Isa::avx512,
    .add_row = add_row,
    .mul_row = mul_row,
    .scale_row = scale_row,
    .silu_glu_row = silu_glu_row,
    .gelu_glu_row = avx2::gelu_glu_row,
    .scale_weighted = scale_weighted,
    .rotate_neox = rotate_neox,
    .rotate_normal = rotate_normal,
    .to_f16 = avx2::to_f16,
    .f16_to_f32 = f16_to_f32,
    .dot_f16 = dot_f16,
    .axpy_f16 = axpy_f16,
    .dot_f32 = avx2::dot_f32,
    .axpy_f32 = avx2::axpy_f32,
    .pv_lanes_f16 = pv_lanes_f16,
    .pv_lanes_cols = 64,
    .dot64_f16 = dot64_f16,
    .dot64_f32 = dot64_f32,
    .dot16_f16 = dot16_f16,
    .dot16_f32 = dot16_f32,
    .gemm16 = gemm16,
    .reduce_lanes = reduce_lanes,
    .exp_row = exp_row,
    .exp_masked = exp_masked,
    .exp_masked16 = exp_masked16,
    .add_into = add_into,
    .scale_by = scale_by,
    .gemm_nt = gemm_nt,
    .gemm_nn = gemm_nn,
    .kv_rows = kv_rows,
    .scores_f16 = scores_f16,
    .pv_f16 = pv_f16,
    .scores_q8 = scores_q8,
    .pv_q8 = pv_q8,
    .scores_q4 = scores_q4,
    .pv_q4 = pv_q4,
};
}  // namespace avx512
#endif

#if defined(EMBER_ARM64)
namespace neon {
extern const OpKernels kOps = {
    .level = Isa::neon,
    .add_row = scalar::add_row,
    .mul_row = scalar::mul_row,
    .scale_row = scalar::scale_row,
    .silu_glu_row = scalar::silu_glu_row,
    .gelu_glu_row = gelu_glu_row,
    .scale_weighted = scalar::scale_weighted,
    .rotate_neox = scalar::rotate_neox,
    .rotate_normal = scalar::rotate_normal,
    .to_f16 = to_f16,
    .f16_to_f32 = f16_to_f32,
    .dot_f16 = dot_f16,
    .axpy_f16 = axpy_f16,
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .pv_lanes_f16 = nullptr,
    .dot64_f16 = dot64_f16,
    .dot64_f32 = dot64_f32,
    .dot16_f16 = dot16_f16,
    .dot16_f32 = dot16_f32,
    .gemm16 = gemm16,
    .reduce_lanes = scalar::reduce_lanes,
    .exp_row = scalar::exp_row,
    .exp_masked = scalar::exp_masked,
    .exp_masked16 = scalar::exp_masked16,
    .add_into = scalar::add_into,
    .scale_by = scalar::scale_by,
    .gemm_nt = gemm_nt,
    .gemm_nn = gemm_nn,
    .kv_rows = kv_rows,
    .scores_f16 = scores_f16,
    .pv_f16 = pv_f16,
    .scores_q8 = scores_q8,
    .pv_q8 = pv_q8,
    .scores_q4 = scores_q4,
    .pv_q4 = pv_q4,
};
}  // namespace neon
#endif

}  // namespace ember::cpu
