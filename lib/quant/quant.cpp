// Dispatch of quant.hpp to the per-format reference functions (formats.hpp).
#include "quant/quant.hpp"

#include <array>
#include <vector>

#include "common/fail.hpp"
#include "quant/formats.hpp"
#include "quant/kv_formats.hpp"

namespace ember::quant {
namespace {

struct Format {
  DType type;
  DType activation;  // activation_type(); for activation-only formats, the type itself
  void (*dequantize)(const void*, float*, int64_t);
  void (*quantize)(const float*, void*, int64_t);
  float (*dot)(const void*, const void*, int64_t);  // nullptr: not a weight type
};

constexpr Format kFormats[] = {
#define EMBER_REF_FORMAT(id, NAME, type_id, elems, bytes, activation, ...) \
  {DType::id, DType::activation, ref::dequantize_##id, ref::quantize_##id, ref::dot_##id},
    EMBER_WEIGHT_TYPES(EMBER_REF_FORMAT)
#undef EMBER_REF_FORMAT
    {DType::q8_1, DType::q8_1, ref::dequantize_q8_1, ref::quantize_q8_1, nullptr},
    {DType::q8_k, DType::q8_k, ref::dequantize_q8_k, ref::quantize_q8_k, nullptr},
    {DType::q8_t, DType::q8_t, ref::dequantize_q8_t, ref::quantize_q8_t, nullptr},
    {DType::q8_tr, DType::q8_tr, ref::dequantize_q8_tr, ref::quantize_q8_tr, nullptr},
    // KV-cache storage types (kv_formats.hpp): quantize/dequantize only.
    {DType::kv_q8_g32, DType::kv_q8_g32, ref::dequantize_kv_q8_g32, ref::quantize_kv_q8_g32, nullptr},
    {DType::kv_q8_g64, DType::kv_q8_g64, ref::dequantize_kv_q8_g64, ref::quantize_kv_q8_g64, nullptr},
    {DType::kv_q4_g32, DType::kv_q4_g32, ref::dequantize_kv_q4_g32, ref::quantize_kv_q4_g32, nullptr},
    {DType::kv_q4_g64, DType::kv_q4_g64, ref::dequantize_kv_q4_g64, ref::quantize_kv_q4_g64, nullptr},
    {DType::kv_q4o_g32, DType::kv_q4o_g32, ref::dequantize_kv_q4o_g32, ref::quantize_kv_q4o_g32, nullptr},
    {DType::kv_q4o_g64, DType::kv_q4o_g64, ref::dequantize_kv_q4o_g64, ref::quantize_kv_q4o_g64, nullptr},
};

const Format& format(const char* what, DType type) {
  for (const Format& f : kFormats)
    if (f.type == type && f.dequantize) return f;
  fail(ErrorCode::unsupported, "{}: type {} is not supported", what, type_name(type));
}

const Format& weight_format(const char* what, DType type) {
  const Format& f = format(what, type);
  if (!f.dot) fail(ErrorCode::unsupported, "{}: {} is not a weight type", what, type_name(type));
  return f;
}

void check_length(const char* what, DType type, int64_t n) {
  const uint32_t block = type_info(type).block_elems;
  if (n < 0 || n % block != 0)
    fail(ErrorCode::invalid_argument, "{}: {} values is not a multiple of the {} block size {}", what, n,
         type_name(type), block);
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const Format& f = format("dequantize_row", type);
  check_length("dequantize_row", type, n);
  f.dequantize(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const Format& f = format("quantize_row", type);
  check_length("quantize_row", type, n);
  f.quantize(src, dst, n);
}

DType activation_type(DType weight_type) { return weight_format("activation_type", weight_type).activation; }

float dot_row(DType weight_type, const void* weights, const void* activations, int64_t n) {
  const Format& f = weight_format("dot_row", weight_type);
  check_length("dot_row", weight_type, n);
  return f.dot(weights, activations, n);
}

double dot_row_exact(DType weight_type, const void* weights, const float* activations, int64_t n) {
  const Format& f = weight_format("dot_row_exact", weight_type);
  check_length("dot_row_exact", weight_type, n);
  std::vector<float> w(static_cast<size_t>(n));
  f.dequantize(weights, w.data(), n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(w[size_t(i)]) * double(activations[i]);
  return sum;
}

}  // namespace ember::quant
