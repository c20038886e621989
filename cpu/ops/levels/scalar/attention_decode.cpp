// The scalar level's fused decode-attention kernels over F16 cache rows
// (OpKernels::scores_f16, pv_f16): the definition the vector levels are tested against.
#include "common/fp16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  for (int g = 0; g < group; ++g)
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int d = 0; d < hd; ++d) sum += q[g * hd + d] * fp16_to_fp32(rows[j][d]);
      s[g * lds + j] = scale * sum;
    }
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; ++d) {
      const float v = fp16_to_fp32(rows[j][d]);
      for (int g = 0; g < group; ++g) acc[g * hd + d] += p[g * ldp + j] * v;
    }
}

}  // namespace ember::cpu::scalar
