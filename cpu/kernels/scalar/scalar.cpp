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

}  // namespace

using quant::DType;
namespace ref = quant::ref;

extern const WeightKernels kF32 = {DType::f32, DType::f32, copy_f32, ref::dot_f32, dot_tile<ref::dot_f32>,
                                   ref::dequantize_f32, 1, 1, {}};
extern const WeightKernels kF16 = {DType::f16, DType::f32, copy_f32, ref::dot_f16, dot_tile<ref::dot_f16>,
                                   ref::dequantize_f16, 1, 1, {}};
extern const WeightKernels kBF16 = {DType::bf16, DType::f32, copy_f32, ref::dot_bf16, dot_tile<ref::dot_bf16>,
                                    ref::dequantize_bf16, 1, 1, {}};
extern const WeightKernels kQ8_0 = {DType::q8_0, DType::q8_0, ref::quantize_q8_0, ref::dot_q8_0,
                                    dot_tile<ref::dot_q8_0>, ref::dequantize_q8_0, 1, 1, {}};
extern const WeightKernels kQ4_0 = {DType::q4_0, DType::q8_0, ref::quantize_q8_0, ref::dot_q4_0,
                                    dot_tile<ref::dot_q4_0>, ref::dequantize_q4_0, 1, 1, {}};
extern const WeightKernels kQ4_1 = {DType::q4_1, DType::q8_1, ref::quantize_q8_1, ref::dot_q4_1,
                                    dot_tile<ref::dot_q4_1>, ref::dequantize_q4_1, 1, 1, {}};
extern const WeightKernels kQ5_0 = {DType::q5_0, DType::q8_0, ref::quantize_q8_0, ref::dot_q5_0,
                                    dot_tile<ref::dot_q5_0>, ref::dequantize_q5_0, 1, 1, {}};
extern const WeightKernels kQ5_1 = {DType::q5_1, DType::q8_1, ref::quantize_q8_1, ref::dot_q5_1,
                                    dot_tile<ref::dot_q5_1>, ref::dequantize_q5_1, 1, 1, {}};
extern const WeightKernels kQ4_K = {DType::q4_k, DType::q8_k, ref::quantize_q8_k, ref::dot_q4_k,
                                    dot_tile<ref::dot_q4_k>, ref::dequantize_q4_k, 1, 1, {},
                                    dot_tile<ref::dot_q4_k_grouped>};
extern const WeightKernels kQ5_K = {DType::q5_k, DType::q8_k, ref::quantize_q8_k, ref::dot_q5_k,
                                    dot_tile<ref::dot_q5_k>, ref::dequantize_q5_k, 1, 1, {}};
extern const WeightKernels kQ6_K = {DType::q6_k, DType::q8_k, ref::quantize_q8_k, ref::dot_q6_k,
                                    dot_tile<ref::dot_q6_k>, ref::dequantize_q6_k, 1, 1, {}};

}  // namespace ember::cpu::scalar
