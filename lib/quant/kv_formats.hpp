// ember's quantized KV-cache storage formats: INT8 and INT4 with one scale per group
// of G = 32 or 64 consecutive values along the head dimension (the kv_q* DTypes); INT4
// stores each group Hadamard-rotated; INT4 with outliers keeps each group's two largest
// values as f16 besides.
//
// A cache row of `width` values (n_head_kv * head_dim) is width / G blocks, one per
// group; head_dim is a multiple of G, so the part of a row that belongs to one kv
// head is head_dim / G whole blocks, bytes [kv_head * head_dim / G * block_bytes, ...).
// Blocks are packed with no padding and read at any byte address; multi-byte fields
// are little-endian IEEE binary16 bits.
//
// INT8, symmetric (KV_Q8_G32: 34 bytes, KV_Q8_G64: 66 bytes per block):
//   bytes [0, 2)      d     f16 scale
//   bytes [2, 2 + G)  q[j]  int8, in [-127, 127]
//   x[j] = d * q[j]
//   Quantizer: d = f16(max|x| / 127) (round to nearest even); with D = f32(d),
//   q[j] = clamp(round_half_even(x[j] / D), -127, 127); an all-zero group (or one whose
//   d underflows to 0) stores d = 0 and q = 0. Error |x - x'| <= D / 2 + tiny, i.e.
//   about 0.4 % of the group's max|x|.
//
// INT4, asymmetric, in a rotated basis (KV_Q4_G32: 20 bytes, KV_Q4_G64: 36 bytes per block):
//   bytes [0, 2)          d      f16 scale (>= 0)
//   bytes [2, 4)          m      f16 offset
//   bytes [4, 4 + G / 2)  qs[j]  element j in the low nibble, element j + G/2 in the high one
//   y[j] = d * q[j] + m, q[j] in [0, 15]                       (the stored values)
//   x = R_G^T y, i.e. x[i] = sigma_i * s_G * sum_j (-1)^popcount(i & j) * y[j], where
//   R_G = H_G Sigma_G / sqrt(G) is orthonormal: H_G the Sylvester (natural order)
//   Walsh-Hadamard matrix, Sigma_G = diag(sigma_0 .. sigma_{G-1}) fixed signs: for G = 64,
//   sigma_j = -1 where bit j of 0x243F6A8885A308D3 (the first 64 fraction bits of pi) is set,
//   else +1; for G = 32 all sigma_j = +1 (the bare H_G). s_G = f32(1 / sqrt(G)) (0x3e3504f3
//   for G = 32, exactly 0.125 for G = 64). Decoders evaluate R_G^T as unrotate_groups()
//   below does (log2 G butterfly stages of a + b / a - b in natural order, one multiply by
//   s_G, then the signs) and must produce exactly those f32 values.
//   Why: keys carry a few outlier channels along the head dimension (e.g. Gemma's k_norm
//   weights) that would set a group's range; the rotation spreads every channel over the
//   whole group, so the stored values are near-Gaussian and share a small range
//   (incoherence processing: QuIP#, Tseng et al. 2024; QuaRot, Ashkboos et al. 2024). The
//   signs are chosen by measurement (Gemma 3 270M perplexity, ctx 512): with G = 64 the
//   random signs keep a group-wide offset or Walsh pattern out of a single y[j] and lower
//   the perplexity by ~7 %; with G = 32 the bare H_G measured ~1 % better than those signs.
//   Because R_G is orthonormal, dot(q, x) = dot(R_G q, y) and sum_t w_t x_t =
//   R_G^T sum_t w_t y_t, so attention can rotate each query once, score against y, and
//   unrotate the weighted sum of values once.
//   Reference quantizer: y = R_G x (rotate_groups); with lo, hi = min, max of y, start from
//   m0 = f16 of lo rounded toward -inf and d0 = f16 of (hi - M0) / 15 rounded toward +inf
//   (all of y in [M0, M0 + 15 D0]); then for 31 candidates c = 0..30 start from the codes
//   l[j] = clamp(round_half_even((y[j] - lo) * (13 + 0.1 c) / (hi - lo)), 0, 15) and do up to
//   4 rounds of: (d, m) = the least-squares fit of y by d * l + m, each rounded to nearest
//   f16 (the candidate ends unless d > 0 and the codes are not all equal); codes
//   q[j] = clamp(round_half_even((y[j] - M) / D), 0, 15) for it; stop once q == l, else
//   l = q. Of m0/d0 and every (d, m) so visited, the one with the smallest sum of
//   (D q[j] + M - y[j])^2 is stored (the first on ties, m0/d0 first). Error: the squared
//   error never exceeds that of m0/d0, and R_G preserves it, so per group
//   rms(x - x') <= D0 / 2 + tiny, about 1/30 of the range of the rotated values y (not of
//   x: an outlier in x raises it only by |outlier| * 2 / sqrt(G)); on Gaussian groups the
//   refits give ~3 % less squared error than one fit per candidate.
//
// INT4 with outliers (KV_Q4O_G32: 26 bytes, KV_Q4O_G64: 42 bytes per block), K = kOutliers = 2:
//   bytes [0, 2K)         v[k]   f16 values, k = 0 .. K-1
//   bytes [2K, 3K)        i[k]   uint8 channel of v[k] within the group (0 .. G-1)
//   bytes [3K, 3K + 4 + G / 2)   an INT4 block (layout above) of r
//   x = r' + sum_k V[k] e_{i[k]}, where r' is the INT4 block's decoded value and V = f32(v).
//   The stored values (what attention scores against) are y = R_G x =
//   (d * q + m) + sum_k a_k (-1)^popcount(i[k] & j) with a_k = s_G * V[k], negated where
//   sigma_{i[k]} = -1 (G = 64); decoders add the K terms in order k = 0 .. K-1, after the
//   INT4 values, as add_q4o_outliers() below (exactly those f32 values).
//   Quantizer: i[0] is the channel of the largest |x[j]| (the first on ties), i[1] that of the
//   largest |x[j]| among the others; v[k] = f16(x[i[k]]) (round to nearest even); r = x with
//   x[i[k]] replaced by x[i[k]] - V[k] (the f16 rounding error), quantized by the INT4
//   reference quantizer.
//   Why: after the rotation a group's range is set by its energy, and Gemma's keys carry
//   rope pairs of channels 10-25 times the typical size whose value turns with the
//   position (so that no fixed offset removes them): taken out of the group, they no
//   longer set the step of the other 30 values.
//
// What is stored: model::Forward writes keys into these formats minus a fixed per-layer
// offset (the BOS key; model/forward.hpp, key_offsets()), which removes the keys' large
// channel means before they reach a group's range; the formats themselves do not know.
//
// Values must lie within the f16 range (|x| < 65504; for INT4 also |y| <= sqrt(G) max|x|).
// Groups so small that d falls among the f16 subnormals (max|x| below about 8e-3 for INT8,
// a range of y below about 1e-3 for INT4) keep an absolute error of about 3e-8 rather than the relative bounds above.
#pragma once

#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::quant::kv {

// Group size G of a quantized KV type (32 or 64); 0 for every other type.
int group_size(DType type);
// True for the six kv_q* types.
inline bool is_quantized(DType type) { return group_size(type) != 0; }
// True for KV_Q4_G32 and KV_Q4_G64.
inline bool is_int4(DType type) { return type == DType::kv_q4_g32 || type == DType::kv_q4_g64; }
// True for KV_Q4O_G32 and KV_Q4O_G64.
inline bool is_int4o(DType type) { return type == DType::kv_q4o_g32 || type == DType::kv_q4o_g64; }

// In place, for each group of `group` (32 or 64) values: v = R_G v (signs, butterflies,
// multiply by s_G), the INT4 formats' rotation (see above), and its inverse v = R_G^T v
// (butterflies, multiply, signs). `n` is a multiple of `group`.
// sigma_j of R_64: -1 where bit j is set.
inline constexpr uint64_t kRotationSigns64 = 0x243F6A8885A308D3ull;
// The same signs as f32 sign-bit masks (0x80000000 where sigma_j = -1), for the SIMD
// rotations that flip a register's signs with one XOR (cpu/kernels/*/q8_w.cpp).
struct alignas(64) RotationSignMasks {
  uint32_t bits[64];
};
inline constexpr RotationSignMasks kRotationSignMasks64 = [] {
  RotationSignMasks m{};
  for (int j = 0; j < 64; ++j) m.bits[j] = (kRotationSigns64 >> j) & 1 ? 0x80000000u : 0u;
  return m;
}();
void rotate_groups(float* v, int64_t n, int group);
void unrotate_groups(float* v, int64_t n, int group);

// Reference quantizer and decoder; `n` is a multiple of `group` (32 or 64).
void quantize_q8(const float* src, void* dst, int64_t n, int group);
void dequantize_q8(const void* src, float* dst, int64_t n, int group);
void quantize_q4(const float* src, void* dst, int64_t n, int group);
void dequantize_q4(const void* src, float* dst, int64_t n, int group);
// The stored values y = d * q + m of INT4 blocks, before the rotation: dequantize_q4 is
// this followed by unrotate_groups.
void decode_q4_stored(const void* src, float* dst, int64_t n, int group);

// INT4 with outliers (KV_Q4O_*): kOutliers values per group kept as f16.
inline constexpr int kOutliers = 2;
constexpr int q4o_block_bytes(int group) { return 4 + 3 * kOutliers + group / 2; }
void quantize_q4o(const float* src, void* dst, int64_t n, int group);
void dequantize_q4o(const void* src, float* dst, int64_t n, int group);
void decode_q4o_stored(const void* src, float* dst, int64_t n, int group);
// Adds the outliers of one block, rotated, to the stored values y[0, G) of its codes.
void add_q4o_outliers(const void* block, float* y, int group);

}  // namespace ember::quant::kv

// The same functions with the signatures of quant.cpp's format table.
namespace ember::quant::ref {
void quantize_kv_q8_g32(const float* src, void* dst, int64_t n);
void dequantize_kv_q8_g32(const void* src, float* dst, int64_t n);
void quantize_kv_q8_g64(const float* src, void* dst, int64_t n);
void dequantize_kv_q8_g64(const void* src, float* dst, int64_t n);
void quantize_kv_q4_g32(const float* src, void* dst, int64_t n);
void dequantize_kv_q4_g32(const void* src, float* dst, int64_t n);
void quantize_kv_q4_g64(const float* src, void* dst, int64_t n);
void dequantize_kv_q4_g64(const void* src, float* dst, int64_t n);
void quantize_kv_q4o_g32(const float* src, void* dst, int64_t n);
void dequantize_kv_q4o_g32(const void* src, float* dst, int64_t n);
void quantize_kv_q4o_g64(const float* src, void* dst, int64_t n);
void dequantize_kv_q4o_g64(const void* src, float* dst, int64_t n);
}  // namespace ember::quant::ref
