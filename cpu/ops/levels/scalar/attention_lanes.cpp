// The scalar level's lanes16 / lanes64 attention products (levels/lanes16.hpp):
// Lanes16Scalar, one FMA per lane.
#include "cpu/ops/levels/lanes16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {

float dot64_f16(const float* q, const uint16_t* k, int n) { return dot_lanes64<Lanes16Scalar>(q, k, n); }
float dot64_f32(const float* q, const float* k, int n) { return dot_lanes64<Lanes16Scalar>(q, k, n); }
float dot16_f16(const float* q, const uint16_t* k, int n) { return dot_lanes16<Lanes16Scalar>(q, k, n); }
float dot16_f32(const float* q, const float* k, int n) { return dot_lanes16<Lanes16Scalar>(q, k, n); }
void gemm16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  gemm_lanes16<Lanes16Scalar, 1, 1>(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::scalar
