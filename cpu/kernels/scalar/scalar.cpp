// The scalar level: lib/quant's reference functions behind the WeightKernels table.
#include <cstring>

#include "cpu/kernels/levels.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::scalar {
namespace {

using DotFn = float (*)(const void*, const void*, int64_t);

template <DotFn Dot>
void dot_tile(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes, int n_x,
              float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  for (int t = 0; t < n_x; ++t)
    for (int r = 0; r < n_w; ++r)
      out[size_t(t) * out_stride + size_t(r)] = Dot(w + size_t(r) * w_row_bytes, a + size_t(t) * a_row_bytes, n);
}

void copy_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, size_t(n) * sizeof(float)); }

// The activation quantizer of each companion type.
constexpr void (*activation_quantizer(quant::DType a))(const float*, void*, int64_t) {
  switch (a) {
    case quant::DType::q8_0: return quant::ref::quantize_q8_0;
    case quant::DType::q8_1: return quant::ref::quantize_q8_1;
    case quant::DType::q8_k: return quant::ref::quantize_q8_k;
    case quant::DType::q8_t: return quant::ref::quantize_q8_t;
    case quant::DType::q8_tr: return quant::ref::quantize_q8_tr;
    default: return copy_f32;
  }
}

// Types whose reference sums the tokens of whole groups in another order (kernels.hpp).
using TileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);
template <quant::DType>
constexpr TileFn kGrouped = nullptr;
template <>
constexpr TileFn kGrouped<quant::DType::q4_k> = dot_tile<quant::ref::dot_q4_k_grouped>;

}  // namespace

using quant::DType;
namespace ref = quant::ref;

// One table per registry row (quant/weight_types.hpp): the reference functions.
#define EMBER_SCALAR_KERNELS(id, NAME, type_id, elems, bytes, activation, ...)                            \
  extern const WeightKernels k##NAME = {DType::id,        DType::activation,                                \
                                        activation_quantizer(DType::activation), ref::dot_##id,             \
                                        dot_tile<ref::dot_##id>, ref::dequantize_##id, 1, 1, {}, kGrouped<DType::id>};
EMBER_WEIGHT_TYPES(EMBER_SCALAR_KERNELS)
#undef EMBER_SCALAR_KERNELS

}  // namespace ember::cpu::scalar
