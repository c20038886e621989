// The scalar level's quantized KV-cache row kernels (OpKernels::kv_rows): the reference
// arithmetic, group by group (cpu/ops/kv_rows.hpp explains the formats' stored domain).
#include "cpu/ops/levels/kv_rows_common.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {
namespace {

struct Kernels {
  template <int G>
  static float dot_q8(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    float total = 0.0f;
    for (int g = 0; g < n / G; ++g, b += G + 2, q += G) {
      const auto* c = reinterpret_cast<const int8_t*>(b + 2);
      float s = 0.0f;
      for (int j = 0; j < G; ++j) s += q[j] * float(c[j]);
      total += load_half(b) * s;
    }
    return total;
  }
  template <int G>
  static void axpy_q8(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
      const auto* c = reinterpret_cast<const int8_t*>(b + 2);
      const float wd = w * load_half(b);
      for (int j = 0; j < G; ++j) acc[j] += wd * float(c[j]);
    }
  }
  template <int G>
  static void decode_q8(const void* row, float* out, int n) {
    quant::kv::dequantize_q8(row, out, n, G);
  }
  template <int G>
  static float dot_q4(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    float total = 0.0f;
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, q += G) {
      float sc = 0.0f, sq = 0.0f;
      for (int j = 0; j < G / 2; ++j) {
        sc += q[j] * float(b[4 + j] & 15) + q[j + G / 2] * float(b[4 + j] >> 4);
        sq += q[j] + q[j + G / 2];
      }
      total += load_half(b) * sc + load_half(b + 2) * sq;
    }
    return total;
  }
  template <int G>
  static void axpy_q4(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, acc += G) {
      const float wd = w * load_half(b), wm = w * load_half(b + 2);
      for (int j = 0; j < G / 2; ++j) {
        acc[j] += wd * float(b[4 + j] & 15) + wm;
        acc[j + G / 2] += wd * float(b[4 + j] >> 4) + wm;
      }
    }
  }
  template <int G>
  static void decode_q4(const void* row, float* out, int n) {
    quant::kv::decode_q4_stored(row, out, n, G);
  }
  static float dot_f32(const float* q, const float* x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += q[i] * x[i];
    return s;
  }
  static void axpy_f32(float* acc, float w, const float* x, int n) {
    for (int i = 0; i < n; ++i) acc[i] += w * x[i];
  }
};

}  // namespace

const KvRowKernels* kv_rows(quant::DType type) { return KvRowTables<Kernels>::of(type); }

}  // namespace ember::cpu::scalar
