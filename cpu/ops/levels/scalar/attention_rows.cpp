// The scalar level's F16/F32 attention row kernels (OpKernels::dot_f16 ... axpy_f32):
// plain C++, the definition the other levels' vector versions follow.
#include <cmath>

#include "common/fp16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {

float dot_f16(const float* q, const uint16_t* k, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16(float* acc, float w, const uint16_t* v, int n) {
  for (int i = 0; i < n; ++i) acc[i] = std::fma(w, fp16_to_fp32(v[i]), acc[i]);
}
float dot_f32(const float* q, const float* k, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32(float* acc, float w, const float* v, int n) {
  for (int i = 0; i < n; ++i) acc[i] = std::fma(w, v[i], acc[i]);
}

}  // namespace ember::cpu::scalar
