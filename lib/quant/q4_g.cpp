// Q4_G128 and Q4_G64: ember's asymmetric INT4 weight formats with one scale and one
// offset per group of G = 128 or 64 values along a row (the group sizes of AWQ and
// GPTQ checkpoints). They are not GGUF types: llama.cpp does not load them.
//
// Block of G values, 4 + G / 2 bytes:
//   d   fp16  scale                      x = d * q + m, q in [0, 16)
//   m   fp16  offset (the group's value of code 0)
//   qs  G/2   codes, 32 values per 16 bytes: value 32j + i in the low nibble of
//             qs[16j + i], value 32j + 16 + i in the high nibble (Q4_1's order, per
//             32 values, so a 32-value step of a kernel reads one 16-byte run).
// An integer zero point z (x = d * (q - z)) is the case m = -d * z.
//
// Activations: Q8_1 (32 values with the fp16 sum s = d_a * sum(q_a)). Per group:
//   term = d_w * (sum_j d_a,j * sumi_j) + m_w * (sum_j s_a,j),  j = the G/32 sub-blocks,
// both inner sums in float in the order of j.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {
namespace {

template <int G>
constexpr size_t kBlockBytes = 4 + G / 2;

inline float field(const uint8_t* b, int offset) {
  uint16_t h;
  std::memcpy(&h, b + offset, 2);
  return load_fp16(h);
}

inline int code(const uint8_t* b, int i) {
  const uint8_t byte = b[4 + 16 * (i / 32) + (i % 16)];
  return (i % 32) < 16 ? (byte & 15) : (byte >> 4);
}

template <int G>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<G>) {
    const float d = field(p, 0), m = field(p, 2);
    for (int i = 0; i < G; ++i) dst[g * G + i] = mul_then_add(float(code(p, i)), d, m);
  }
}

// Round to nearest: m = the group's minimum and d = (max - min) / 15, both rounded to
// fp16 first; each code is then the nearest (ties to even) of (x - m) / d clamped to
// [0, 15], so the codes fit the stored d and m. A constant group has d = 0 and codes 0.
template <int G>
void quantize(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<G>) {
    const float* x = src + g * G;
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int i = 0; i < G; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    const uint16_t d16 = fp32_to_fp16((hi - lo) / 15.0f), m16 = fp32_to_fp16(lo);
    std::memcpy(p, &d16, 2);
    std::memcpy(p + 2, &m16, 2);
    const float d = fp16_to_fp32(d16), m = fp16_to_fp32(m16);
    std::memset(p + 4, 0, G / 2);
    for (int i = 0; i < G; ++i) {
      const float q = d != 0.0f ? std::nearbyint((x[i] - m) / d) : 0.0f;
      const int c = int(std::clamp(q, 0.0f, 15.0f));
      p[4 + 16 * (i / 32) + (i % 16)] |= uint8_t((i % 32) < 16 ? c : c << 4);
    }
  }
}

template <int G>
float dot(const void* w, const void* a_q8_1, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a_q8_1);
  double sum = 0.0;
  for (int64_t g = 0; g < n / G; ++g, p += kBlockBytes<G>) {
    float scaled = 0.0f, offsets = 0.0f;
    for (int j = 0; j < G / kQK; ++j) {
      const BlockQ8_1& a = ab[g * (G / kQK) + j];
      int32_t sumi = 0;
      for (int i = 0; i < kQK; ++i) sumi += code(p, kQK * j + i) * int32_t(a.qs[i]);
      scaled += load_fp16(a.d) * float(sumi);
      offsets += load_fp16(a.s);
    }
    sum += field(p, 0) * scaled + field(p, 2) * offsets;
  }
  return float(sum);
}

}  // namespace

void dequantize_q4_g128(const void* src, float* dst, int64_t n) { dequantize<128>(src, dst, n); }
void quantize_q4_g128(const float* src, void* dst, int64_t n) { quantize<128>(src, dst, n); }
float dot_q4_g128(const void* w, const void* a, int64_t n) { return dot<128>(w, a, n); }
void dequantize_q4_g64(const void* src, float* dst, int64_t n) { dequantize<64>(src, dst, n); }
void quantize_q4_g64(const float* src, void* dst, int64_t n) { quantize<64>(src, dst, n); }
float dot_q4_g64(const void* w, const void* a, int64_t n) { return dot<64>(w, a, n); }

}  // namespace ember::quant::ref
