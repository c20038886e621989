// The scalar level's fused decode-attention kernels over F16 cache rows
// (OpKernels::scores_f16, pv_f16) and INT8 and INT4 rows (scores_q8, pv_q8, scores_q4, pv_q4): the definitions the vector
// levels are tested against.
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

void scores_q8(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  const int block_bytes = gsize + 2;
  for (int g = 0; g < group; ++g)
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int b = 0; b < hd / gsize; ++b) {
        const uint8_t* block = rows[j] + b * block_bytes;
        float part = 0.0f;
        for (int d = 0; d < gsize; ++d) part += q[g * hd + b * gsize + d] * float(int8_t(block[2 + d]));
        sum += fp16_to_fp32(uint16_t(block[0] | block[1] << 8)) * part;
      }
      s[g * lds + j] = scale * sum;
    }
}

void pv_q8(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; ++d) {
      const uint8_t* block = rows[j] + d / gsize * (gsize + 2);
      const float v = fp16_to_fp32(uint16_t(block[0] | block[1] << 8)) * float(int8_t(block[2 + d % gsize]));
      for (int g = 0; g < group; ++g) acc[g * hd + d] += p[g * ldp + j] * v;
    }
}

// INT4 block b of row: d, m, then element i in the low nibble of byte i (i < gsize / 2)
// or the high nibble of byte i - gsize / 2; the stored value is d * code + m.
inline float q4_value(const uint8_t* row, int gsize, int i) {
  const uint8_t* block = row + i / gsize * (gsize / 2 + 4);
  const int e = i % gsize, half = gsize / 2;
  const int code = e < half ? block[4 + e] & 15 : block[4 + e - half] >> 4;
  return fp16_to_fp32(uint16_t(block[0] | block[1] << 8)) * float(code) + fp16_to_fp32(uint16_t(block[2] | block[3] << 8));
}

void scores_q4(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  for (int g = 0; g < group; ++g)
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int d = 0; d < hd; ++d) sum += q[g * hd + d] * q4_value(rows[j], gsize, d);
      s[g * lds + j] = scale * sum;
    }
}

void pv_q4(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; ++d) {
      const float v = q4_value(rows[j], gsize, d);
      for (int g = 0; g < group; ++g) acc[g * hd + d] += p[g * ldp + j] * v;
    }
}

}  // namespace ember::cpu::scalar
