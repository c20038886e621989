// f32 GEMMs with Eigen, compiled with the AVX2/FMA flags of this folder.
//
// This is the only translation unit that instantiates Eigen's products, so no
// baseline-ISA copy of the same templates exists for the linker to mix with
// these (an ODR hazard when one library is built with several ISA flags). Zen 4
// and most AVX-512 parts run 256-bit FMAs at full rate, so one AVX2 build serves
// both levels.
#include <Eigen/Core>

#include "cpu/kernels/gemm_f32.hpp"

namespace ember::cpu::avx2 {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

}  // namespace

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  const ConstMap A(a, m, k, Eigen::OuterStride<>(lda));
  const ConstMap B(b, n, k, Eigen::OuterStride<>(ldb));
  Map C(c, m, n, Eigen::OuterStride<>(ldc));
  C.noalias() = alpha * (A * B.transpose());
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  const ConstMap A(a, m, k, Eigen::OuterStride<>(lda));
  const ConstMap B(b, k, n, Eigen::OuterStride<>(ldb));
  Map C(c, m, n, Eigen::OuterStride<>(ldc));
  C.noalias() = A * B;
}

}  // namespace ember::cpu::avx2
