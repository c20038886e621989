// The scalar level's F16 conversions (OpKernels::to_f16, f16_to_f32) and the GELU row,
// which reads GELU from a table over all F16 values (elementwise.cpp explains why).
#include <array>
#include <cmath>
#include <memory>

#include "common/fp16.hpp"
#include "cpu/ops/levels/gelu_f16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void f16_to_f32(const void* row, float* out, int n) {
  const auto* h = static_cast<const uint16_t*>(row);
  for (int i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
}

// The inner polynomial is one FMA, 1 + (0.044715 x) x, as in llama.cpp's table (its C
// code is compiled with FMA contraction); tanhf is the C library's, as there.
const uint16_t* gelu_f16_table() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<uint16_t, 65536>>();
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = fp16_to_fp32(uint16_t(h));
      const float inner = 0.79788456080286535587989211986876f * x * std::fma(0.044715f * x, x, 1.0f);
      (*t)[h] = fp32_to_fp16(0.5f * x * (1.0f + std::tanh(inner)));
    }
    return t;
  }();
  return table->data();
}

void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_f16(table, gate[i]) * up[i];
}

}  // namespace ember::cpu::scalar
