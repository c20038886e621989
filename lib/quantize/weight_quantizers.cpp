// Dispatch of the output types to their block quantizers (weight_quantizers.hpp).
#include "quantize/weight_quantizers.hpp"

#include <cmath>

#include "common/fail.hpp"
#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/quant.hpp"
#include "quantize/k_search.hpp"

namespace ember::quantize {

using quant::DType;

// Every weight type of the registry (quant/weight_types.hpp): those without a rule of
// their own below get lib/quant's reference quantizer.
bool can_write(DType type) { return quant::type_info(type).weight_supported; }

void quantize_q8_0_weights(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    const float* x = src + b * quant::kQK;
    float amax = 0.0f;
    for (int i = 0; i < quant::kQK; ++i) {
      const float a = std::fabs(x[i]);
      if (a > amax) amax = a;
    }
    const float d = amax / 127;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int i = 0; i < quant::kQK; ++i) blocks[b].qs[i] = int8_t(std::round(x[i] * inv));
  }
}

void quantize_values(DType type, const float* src, void* dst, int64_t n) {
  const uint32_t block = quant::type_info(type).block_elems;
  require(n >= 0 && n % block == 0, "quantize: {} values is not a multiple of the {} block size {}", n,
          quant::type_name(type), block);
  switch (type) {
    case DType::f32: quant::ref::quantize_f32(src, dst, n); return;
    case DType::f16: quant::ref::quantize_f16(src, dst, n); return;
    case DType::bf16: quant::ref::quantize_bf16(src, dst, n); return;
    case DType::q8_0: quantize_q8_0_weights(src, dst, n); return;
    case DType::q4_0: quant::ref::quantize_q4_0(src, dst, n); return;
    case DType::q4_1: quant::ref::quantize_q4_1(src, dst, n); return;
    case DType::q5_0: quant::ref::quantize_q5_0(src, dst, n); return;
    case DType::q5_1: quant::ref::quantize_q5_1(src, dst, n); return;
    case DType::q4_k: quantize_q4_k_searched(src, dst, n); return;
    case DType::q5_k: quantize_q5_k_searched(src, dst, n); return;
    case DType::q6_k: quantize_q6_k_searched(src, dst, n); return;
    default: break;
  }
  if (can_write(type)) return quant::quantize_row(type, src, dst, n);
  fail(ErrorCode::unsupported, "quantize: ember cannot write {} tensors", quant::type_name(type));
}

}  // namespace ember::quantize
