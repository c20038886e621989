// Q8_WR: Q8_W (lib/quant/q8_w.cpp) in a rotated basis; and Q8_TR, its activation format,
// Q8_T in the same basis. Neither is a GGUF type (ids 1104, 1105): only ember loads files
// that use Q8_WR.
//
// Layout: Q8_W's (every 32 values one 34-byte Q8_0 block, the row's single scale written
// into each), counted in blocks of 64 values (68 bytes), the rotation's group: a row's
// length is a multiple of 64.
//
// Every run of kQ8WRGroup = 64 values of a row (weights along their input dimension,
// activations along the same dimension) is rotated by R_64 = H_64 Sigma_64 / 8, the
// rotation of the INT4 KV cache (quant::kv::rotate_groups: H_64 the Sylvester
// Walsh-Hadamard matrix, Sigma_64 fixed signs), before it is quantized as Q8_W / Q8_T:
// one scale per row (weight row or token). R is orthonormal, so the rotated weights and
// activations have the same dot product as the original ones, and
//   dot = (d_w * d_a) * sum(q_w * q_a)
// exactly as Q8_W's: the kernels are Q8_W's; only the activation quantizer rotates.
// Why: a token's activations carry a few channels far larger than the rest (Gemma 3's
// ffn_down inputs above all), and one scale per token sets its INT8 step by the largest;
// the rotation spreads each channel over its group of 64, so the step follows the
// groups' norms instead of the largest channel (incoherence processing, as QuaRot,
// Ashkboos et al. 2024, does with whole-row Hadamard matrices). Weights get the same
// treatment. Group 64 measured better than 32 on Gemma 3 270M (docs/quantization.md).
//
// dequantize gives the weights in the original basis (R^T of the decoded rotated values).
#include <vector>

#include "quant/formats.hpp"
#include "quant/kv_formats.hpp"

namespace ember::quant::ref {
namespace {

void rotated_copy(const float* src, std::vector<float>& out, int64_t n) {
  out.assign(src, src + n);
  kv::rotate_groups(out.data(), n, kQ8WRGroup);
}

}  // namespace

void quantize_q8_wr(const float* src, void* dst, int64_t n) {
  std::vector<float> r;
  rotated_copy(src, r, n);
  quantize_q8_w(r.data(), dst, n);
}

void dequantize_q8_wr(const void* src, float* dst, int64_t n) {
  dequantize_q8_w(src, dst, n);
  kv::unrotate_groups(dst, n, kQ8WRGroup);
}

void quantize_q8_tr(const float* src, void* dst, int64_t n) {
  std::vector<float> r;
  rotated_copy(src, r, n);
  quantize_q8_t(r.data(), dst, n);
}

void dequantize_q8_tr(const void* src, float* dst, int64_t n) {
  dequantize_q8_t(src, dst, n);
  kv::unrotate_groups(dst, n, kQ8WRGroup);
}

float dot_q8_wr(const void* w, const void* a_q8_tr, int64_t n) { return dot_q8_w(w, a_q8_tr, n); }

}  // namespace ember::quant::ref
