// matmul on the GPU for every weight type ember reads. Activations are converted to the
// contract's activation type (Q8_0, Q8_1, Q8_K: the CPU's bytes) by one warp per block;
// then one warp per weight row takes up to kTokens tokens per pass: four lanes per
// 32-value block or the whole warp per 256-value super-block, codes and activation
// bytes four at a time into __dp4a (F16/BF16/F32: 8 values per lane per step). Rows of
// more tokens take several passes: these are decode kernels; prefill on tensor cores is
// not written yet (docs/cuda.md). Formats or alignments the word loads cannot take go
// to matmul_blocks_kernel / matmul_float_kernel, one block per lane through block_math.
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/device/block_math.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

using quant::DType;

constexpr int kTokens = 8;        // tokens per pass
constexpr int kWarpsPerBlock = 4;  // weight rows per thread block
constexpr int kQuantThreads = 128;

// Activation formats: values per block, bytes per block (quantized by quantize_warp_kernel).
struct ActQ8_0 {
  static constexpr int kValues = 32, kBytes = dev::kQ8_0Bytes;
};
struct ActQ8_1 {
  static constexpr int kValues = 32, kBytes = dev::kQ8_1Bytes;
};
struct ActQ8_K {
  static constexpr int kValues = 256, kBytes = dev::kQ8_KBytes;
};

#define EMBER_WEIGHT_FORMAT(Name, ActType, bytes, fn)                                         \
  struct Name {                                                                                \
    using Act = ActType;                                                                       \
    static constexpr int kBytes = bytes;                                                       \
    static __device__ float dot(const uint8_t* w, const uint8_t* a) { return dev::fn(w, a); }  \
  };
EMBER_WEIGHT_FORMAT(Q4_0, ActQ8_0, dev::kQ4_0Bytes, q4_0_dot)
EMBER_WEIGHT_FORMAT(Q5_0, ActQ8_0, dev::kQ5_0Bytes, q5_0_dot)
EMBER_WEIGHT_FORMAT(Q8_0, ActQ8_0, dev::kQ8_0Bytes, q8_0_dot)
EMBER_WEIGHT_FORMAT(Q4_1, ActQ8_1, dev::kQ4_1Bytes, q4_1_dot)
EMBER_WEIGHT_FORMAT(Q5_1, ActQ8_1, dev::kQ5_1Bytes, q5_1_dot)
EMBER_WEIGHT_FORMAT(Q4_K, ActQ8_K, dev::kQ4_KBytes, q4_k_dot)
EMBER_WEIGHT_FORMAT(Q5_K, ActQ8_K, dev::kQ5_KBytes, q5_k_dot)
EMBER_WEIGHT_FORMAT(Q6_K, ActQ8_K, dev::kQ6_KBytes, q6_k_dot)
#undef EMBER_WEIGHT_FORMAT

struct F32 {
  static __device__ float value(const uint8_t* row, int64_t i) { return bits_to_float(dev::load_u32(row + 4 * i)); }
};
struct F16 {
  static __device__ float value(const uint8_t* row, int64_t i) { return dev::half_at(row + 2 * i); }
};
struct BF16 {
  static __device__ float value(const uint8_t* row, int64_t i) { return dev::bf16_to_float(dev::load_u16(row + 2 * i)); }
};

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// The end of every decode kernel: token t's row sum (the warp's lanes added) into
// out[t][row], for the first n_tok of kN tokens.
template <int kN>
__device__ __forceinline__ void write_row_sums(const float (&acc)[kN], int n_tok, float* out, size_t out_stride,
                                               int64_t row, int lane) {
#pragma unroll
  for (int t = 0; t < kN; ++t) {
    if (t >= n_tok) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) out[size_t(t) * out_stride + size_t(row)] = s;
  }
}

// One warp per activation block: lane i takes value i (8 consecutive values for the
// 256-value Q8_K); the block's maximum and sums are warp reductions. Every value goes
// through the same float operations as in dev::q8_*_quantize, so the bytes are the
// reference's (the maximum and the integer sums do not depend on the order).
__device__ __forceinline__ float warp_max_abs(float a) {
  for (int o = 16; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, a, o);
    a = other > a ? other : a;
  }
  return a;
}
__device__ __forceinline__ float abs_or_zero(float x) {  // NaN ignored, as dev::abs_max
  const float a = x < 0.0f ? -x : x;
  return a > 0.0f ? a : 0.0f;
}
template <class A>
__global__ void quantize_warp_kernel(const float* x, size_t x_stride, uint8_t* dst, size_t dst_row_bytes, int64_t nb,
                                     int64_t n_tok) {
  const int64_t i = int64_t(blockIdx.x) * (kQuantThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= nb * n_tok) return;  // the whole warp
  const int64_t t = i / nb, b = i % nb;
  const float* xb = x + size_t(t) * x_stride + size_t(b) * A::kValues;
  uint8_t* out = dst + size_t(t) * dst_row_bytes + size_t(b) * A::kBytes;
  if constexpr (A::kValues == 32) {
    constexpr bool kSum = A::kBytes == dev::kQ8_1Bytes;
    const float v = xb[lane];
    const float amax = warp_max_abs(abs_or_zero(v));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int q = int(int8_t(dev::round_even_f(v * id)));
    out[(kSum ? 4 : 2) + lane] = uint8_t(int8_t(q));
    if constexpr (kSum) {
      int sum = q;
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float d = amax / 127.0f;
      if (lane == 0) {
        dev::put_u16(out, dev::float_to_half(d));
        dev::put_u16(out + 2, dev::float_to_half(float(sum) * d));
      }
    } else if (lane == 0) {
      dev::put_u16(out, dev::float_to_half(amax / 127.0f));
    }
  } else {
    float v[8];
    float local = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      v[k] = xb[8 * lane + k];
      const float a = abs_or_zero(v[k]);
      local = a > local ? a : local;
    }
    const float amax = warp_max_abs(local);
    if (amax == 0.0f) {
      for (int k = lane; k < dev::kQ8_KBytes; k += 32) out[k] = 0;
      return;
    }
    const float scale = 127.0f / amax;
    int sum = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float r = dev::round_even_f(scale * v[k]);
      const int q = int(int8_t(r < 127.0f ? r : 127.0f));
      out[4 + 8 * lane + k] = uint8_t(int8_t(q));
      sum += q;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the two lanes of a 16-value group
    if (lane % 2 == 0) dev::put_u16(out + 260 + lane, uint16_t(int16_t(sum)));
    if (lane == 0) {
      const uint32_t d = float_to_bits(1.0f / scale);
      for (int k = 0; k < 4; ++k) out[k] = uint8_t(d >> (8 * k));
    }
  }
}

// One warp per weight row; n_tok <= kTokens activation rows of nb blocks each.
template <class W>
__global__ void matmul_blocks_kernel(const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_row_bytes,
                                     float* out, size_t out_stride, int64_t n_out, int64_t nb, int n_tok) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kTokens] = {};
#pragma unroll 2
  for (int64_t b = lane; b < nb; b += 32) {
    const uint8_t* wb = wr + size_t(b) * W::kBytes;
    for (int t = 0; t < kTokens; ++t)
      if (t < n_tok) acc[t] += W::dot(wb, a + size_t(t) * a_row_bytes + size_t(b) * W::Act::kBytes);
  }
  write_row_sums<kTokens>(acc, n_tok, out, out_stride, row, lane);
}

// A 4-byte word at a 2-byte-aligned address (blocks of 18 and 34 bytes).
__device__ int load_word2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return int(uint32_t(h[0]) | uint32_t(h[1]) << 16);
}

// ---- decode kernels: one warp per weight row, kN tokens (1 or up to 8) per pass ----
// Each lane adds its own float terms; the warp's lanes are summed once at the end. The
// integer part of every term is exact (__dp4a over the same codes and bytes as the
// reference), the float terms are the contract's products, added in another order
// (the tolerance of test_cuda's matmul case).

// A binary16 at a 2-byte-aligned address, converted by the hardware (exact).
__device__ __forceinline__ float half_load(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}
// A 4-byte word at a 4-byte-aligned address.
__device__ __forceinline__ int load_word4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }
__device__ __forceinline__ int byte_sum(int v) { return __dp4a(0x01010101, v, 0); }

// The fifth bits of four values (bits 0..3 of `bits`) as bit 4 of four bytes.
__device__ __forceinline__ int spread_bits(uint32_t bits) {
  return int(((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25));
}

// The 32-value formats against Q8_0 (Q4_0, Q5_0, Q8_0) or Q8_1 (Q4_1, Q5_1) activations:
// four lanes per block, lane `sub` on values 4sub..4sub+3 and 16+4sub..16+4sub+3 (8sub..8sub+7
// for Q8_0), eight blocks of the row per warp step.
enum Kind32 { kQ4_0, kQ8_0, kQ4_1, kQ5_0, kQ5_1 };
template <int kKind, int kN>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) matmul_q8act_kernel(
    const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_row_bytes, float* out, size_t out_stride,
    int64_t n_out, int nb, int n_tok) {
  constexpr int kWB = kKind == kQ4_0 ? dev::kQ4_0Bytes : kKind == kQ8_0 ? dev::kQ8_0Bytes
                    : kKind == kQ4_1 ? dev::kQ4_1Bytes : kKind == kQ5_0 ? dev::kQ5_0Bytes : dev::kQ5_1Bytes;
  constexpr bool kQ8_1Act = kKind == kQ4_1 || kKind == kQ5_1;
  constexpr int kAB = kQ8_1Act ? dev::kQ8_1Bytes : dev::kQ8_0Bytes, kAQs = kQ8_1Act ? 4 : 2;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, sub = lane & 3;
  if (row >= n_out) return;  // the whole warp: one row per warp
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kN] = {};
#pragma unroll 4
  for (int b = lane >> 2; b < nb; b += 8) {
    const uint8_t* wb = wr + size_t(b) * kWB;
    int w0, w1, offset = 0;
    if constexpr (kKind == kQ8_0) {
      w0 = load_word2(wb + 2 + 8 * sub);
      w1 = load_word2(wb + 6 + 8 * sub);
    } else {
      constexpr int kQs = kKind == kQ4_0 ? 2 : kKind == kQ4_1 ? 4 : kKind == kQ5_0 ? 6 : 8;
      const int q = load_word2(wb + kQs + 4 * sub);  // values 4sub.. (low nibbles), 16 + 4sub.. (high)
      w0 = q & 0x0f0f0f0f;
      w1 = (q >> 4) & 0x0f0f0f0f;
      if constexpr (kKind == kQ5_0 || kKind == kQ5_1) {
        const uint32_t qh = uint32_t(load_word2(wb + (kKind == kQ5_0 ? 2 : 4)));
        w0 |= spread_bits(qh >> (4 * sub));
        w1 |= spread_bits(qh >> (16 + 4 * sub));
      }
      offset = kKind == kQ4_0 ? 8 : kKind == kQ5_0 ? 16 : 0;
    }
    const float dw = half_load(wb);
    const float mw = kQ8_1Act ? half_load(wb + 2) : 0.0f;
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      if (kN > 1 && t >= n_tok) break;
      const uint8_t* ab = a + size_t(t) * a_row_bytes + size_t(b) * kAB;
      int s;
      if constexpr (kKind == kQ8_0) {
        s = __dp4a(w0, load_word2(ab + 2 + 8 * sub), __dp4a(w1, load_word2(ab + 6 + 8 * sub), 0));
      } else {
        const int a0 = load_word2(ab + kAQs + 4 * sub), a1 = load_word2(ab + kAQs + 16 + 4 * sub);
        s = __dp4a(w0, a0, __dp4a(w1, a1, 0));
        if (offset != 0) s -= offset * (byte_sum(a0) + byte_sum(a1));
      }
      if constexpr (kQ8_1Act) {
        float term = dev::mul_rn(dev::mul_rn(dw, half_load(ab)), float(s));
        if (sub == 0) term += dev::mul_rn(mw, half_load(ab + 2));
        acc[t] += term;
      } else {
        acc[t] += dev::mul_rn(dw, half_load(ab)) * float(s);
      }
    }
  }
  write_row_sums<kN>(acc, n_tok, out, out_stride, row, lane);
}

// The K formats against Q8_K activations: the warp on one 256-value super-block, lane l
// on values 8l..8l+7 (one sub-block's eighth for Q4_K/Q5_K, half a group for Q6_K),
// read as words: codes and activation bytes four at a time into __dp4a.
template <int kKind>  // 4: Q4_K, 5: Q5_K, 6: Q6_K
__device__ __forceinline__ float k_lane_term(const uint8_t* w, const uint8_t* a, int lane) {
  const float da = bits_to_float(uint32_t(load_word4(a)));
  const int a0 = load_word4(a + 4 + 8 * lane), a1 = load_word4(a + 8 + 8 * lane);
  if constexpr (kKind == 6) {
    // values i = 8 lane .. 8 lane + 7: half h, quarter, column l0 of the 210-byte block
    const int i0 = 8 * lane, h = i0 / 128, r = i0 % 128, quarter = r / 32, l0 = r % 32;
    const uint8_t* lo = w + 64 * h + l0 + 32 * (quarter & 1);
    const uint8_t* hi = w + 128 + 32 * h + l0;
    const int shift_lo = quarter < 2 ? 0 : 4, shift_hi = 2 * quarter;
    const int c0 = ((load_word2(lo) >> shift_lo) & 0x0f0f0f0f) | (((load_word2(hi) >> shift_hi) & 0x03030303) << 4);
    const int c1 = ((load_word2(lo + 4) >> shift_lo) & 0x0f0f0f0f) | (((load_word2(hi + 4) >> shift_hi) & 0x03030303) << 4);
    const int s = __dp4a(c0, a0, __dp4a(c1, a1, 0)) - 32 * (byte_sum(a0) + byte_sum(a1));
    const int sc = int(int8_t(w[192 + lane / 2]));
    return dev::mul_rn(half_load(w + 208), da) * float(sc * s);
  } else {
    const int j = lane / 4, l0 = (lane % 4) * 8;
    const uint8_t* qs = w + (kKind == 4 ? 16 : 48) + 32 * (j / 2) + l0;
    const int shift = 4 * (j % 2);
    int c0 = (load_word4(qs) >> shift) & 0x0f0f0f0f, c1 = (load_word4(qs + 4) >> shift) & 0x0f0f0f0f;
    if constexpr (kKind == 5) {
      const uint8_t* qh = w + 16 + l0;
      c0 |= ((load_word4(qh) >> j) & 0x01010101) << 4;
      c1 |= ((load_word4(qh + 4) >> j) & 0x01010101) << 4;
    }
    const int s = __dp4a(c0, a0, __dp4a(c1, a1, 0));
    float term = dev::mul_rn(dev::mul_rn(half_load(w), da), float(dev::k_scale(w + 4, j, false) * s));
    if (lane % 4 == 0) {
      const int mins = dev::k_scale(w + 4, j, true) * (dev::q8_k_bsum(a, 2 * j) + dev::q8_k_bsum(a, 2 * j + 1));
      term -= dev::mul_rn(dev::mul_rn(half_load(w + 2), da), float(mins));
    }
    return term;
  }
}

template <int kKind, int kN>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) matmul_k_kernel(
    const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_row_bytes, float* out, size_t out_stride,
    int64_t n_out, int nb, int n_tok) {
  constexpr int kWB = kKind == 4 ? dev::kQ4_KBytes : kKind == 5 ? dev::kQ5_KBytes : dev::kQ6_KBytes;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;  // the whole warp
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kN] = {};
#pragma unroll 2
  for (int b = 0; b < nb; ++b) {
    const uint8_t* wb = wr + size_t(b) * kWB;
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      if (kN > 1 && t >= n_tok) break;
      acc[t] += k_lane_term<kKind>(wb, a + size_t(t) * a_row_bytes + size_t(b) * dev::kQ8_KBytes, lane);
    }
  }
  write_row_sums<kN>(acc, n_tok, out, out_stride, row, lane);
}

// Float weights against f32 activations (the contract's activation type for them).
template <class W>
__global__ void matmul_float_kernel(const uint8_t* w, size_t w_stride, const float* x, size_t x_stride, float* out,
                                    size_t out_stride, int64_t n_out, int64_t n_in, int n_tok) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kTokens] = {};
  for (int64_t i = lane; i < n_in; i += 32) {
    const float v = W::value(wr, i);
    for (int t = 0; t < kTokens; ++t)
      if (t < n_tok) acc[t] += v * x[size_t(t) * x_stride + size_t(i)];
  }
  write_row_sums<kTokens>(acc, n_tok, out, out_stride, row, lane);
}

// Float weights, vectorized: each lane takes 8 consecutive values per step (16 bytes of
// F16/BF16, 32 of F32) and the activations' matching 8 floats, kN tokens per pass.
template <class W, int kN>
__global__ void __launch_bounds__(32 * kWarpsPerBlock) matmul_float_vec_kernel(
    const uint8_t* w, size_t w_stride, const float* x, size_t x_stride, float* out, size_t out_stride, int64_t n_out,
    int n_in, int n_tok) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kN] = {};
#pragma unroll 2
  for (int i = lane * 8; i < n_in; i += 256) {
    float v[8];
    if constexpr (std::is_same_v<W, F32>) {
      const float4 p0 = *reinterpret_cast<const float4*>(wr + 4 * size_t(i));
      const float4 p1 = *reinterpret_cast<const float4*>(wr + 4 * size_t(i) + 16);
      v[0] = p0.x, v[1] = p0.y, v[2] = p0.z, v[3] = p0.w, v[4] = p1.x, v[5] = p1.y, v[6] = p1.z, v[7] = p1.w;
    } else {
      const uint4 p = *reinterpret_cast<const uint4*>(wr + 2 * size_t(i));
      const uint32_t words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (std::is_same_v<W, F16>) {
          v[2 * k] = __half2float(__ushort_as_half(uint16_t(words[k] & 0xffffu)));
          v[2 * k + 1] = __half2float(__ushort_as_half(uint16_t(words[k] >> 16)));
        } else {
          v[2 * k] = bits_to_float(words[k] << 16);
          v[2 * k + 1] = bits_to_float(words[k] & 0xffff0000u);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      if (kN > 1 && t >= n_tok) break;
      const float4* xr = reinterpret_cast<const float4*>(x + size_t(t) * x_stride + size_t(i));
      const float4 x0 = xr[0], x1 = xr[1];
      acc[t] += v[0] * x0.x + v[1] * x0.y + v[2] * x0.z + v[3] * x0.w + v[4] * x1.x + v[5] * x1.y + v[6] * x1.z +
                v[7] * x1.w;
    }
  }
  write_row_sums<kN>(acc, n_tok, out, out_stride, row, lane);
}

unsigned row_blocks(int64_t n_out) { return unsigned((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock); }

template <class W>
void run_blocks(cudaStream_t stream, const backend::Tensor& weights, const backend::Tensor& x,
                const backend::Tensor& out, Scratch& scratch) {
  using A = typename W::Act;
  const int64_t nb = weights.cols / A::kValues, n_tok = x.rows;
  const size_t a_row_bytes = size_t(nb) * A::kBytes;
  auto* a = static_cast<uint8_t*>(scratch.reserve(stream, a_row_bytes * size_t(n_tok)));
  const int64_t jobs = nb * n_tok;
  constexpr int64_t kWarpsQ = kQuantThreads / 32;
  quantize_warp_kernel<A><<<unsigned((jobs + kWarpsQ - 1) / kWarpsQ), kQuantThreads, 0, stream>>>(
      reinterpret_cast<const float*>(device_ptr(x)), x.row_stride / sizeof(float), a, a_row_bytes, nb, n_tok);
  check(cudaGetLastError(), "matmul activation quantization launch");
  auto* y = reinterpret_cast<float*>(device_ptr(out));
  const size_t y_stride = out.row_stride / sizeof(float);
  for (int64_t t0 = 0; t0 < n_tok; t0 += kTokens) {
    const int nt = int(n_tok - t0 < kTokens ? n_tok - t0 : kTokens);
    const auto* wp = reinterpret_cast<const uint8_t*>(device_ptr(weights));
    const uint8_t* ap = a + size_t(t0) * a_row_bytes;
    float* yp = y + size_t(t0) * y_stride;
    const unsigned grid = row_blocks(weights.rows);
    constexpr unsigned kBlock = 32 * kWarpsPerBlock;
    // The word loads need the rows' alignment: 2 bytes for the 32-value formats and Q6_K,
    // 4 for Q4_K/Q5_K (their blocks are 144 and 176 bytes, the activations' 292).
    const uintptr_t align = std::is_same_v<W, Q4_K> || std::is_same_v<W, Q5_K> ? 4 : 2;
    const bool aligned = weights.row_stride % align == 0 && reinterpret_cast<uintptr_t>(wp) % align == 0;
    constexpr int kind32 = std::is_same_v<W, Q4_0> ? kQ4_0 : std::is_same_v<W, Q8_0> ? kQ8_0
                         : std::is_same_v<W, Q4_1> ? kQ4_1 : std::is_same_v<W, Q5_0> ? kQ5_0
                         : std::is_same_v<W, Q5_1> ? kQ5_1 : -1;
    if constexpr (kind32 >= 0) {
      if (aligned) {
        if (nt == 1) {
          matmul_q8act_kernel<kind32, 1><<<grid, kBlock, 0, stream>>>(wp, weights.row_stride, ap, a_row_bytes, yp,
                                                                       y_stride, weights.rows, int(nb), nt);
        } else {
          matmul_q8act_kernel<kind32, kTokens><<<grid, kBlock, 0, stream>>>(wp, weights.row_stride, ap, a_row_bytes,
                                                                             yp, y_stride, weights.rows, int(nb), nt);
        }
        check(cudaGetLastError(), "matmul kernel launch");
        continue;
      }
    }
    if constexpr (std::is_same_v<W, Q4_K> || std::is_same_v<W, Q5_K> || std::is_same_v<W, Q6_K>) {
      if (aligned) {
        constexpr int kind = std::is_same_v<W, Q4_K> ? 4 : std::is_same_v<W, Q5_K> ? 5 : 6;
        if (nt == 1) {
          matmul_k_kernel<kind, 1><<<grid, kBlock, 0, stream>>>(wp, weights.row_stride, ap, a_row_bytes, yp, y_stride,
                                                                 weights.rows, int(nb), nt);
        } else {
          matmul_k_kernel<kind, kTokens><<<grid, kBlock, 0, stream>>>(wp, weights.row_stride, ap, a_row_bytes, yp,
                                                                       y_stride, weights.rows, int(nb), nt);
        }
        check(cudaGetLastError(), "matmul kernel launch");
        continue;
      }
    }
    matmul_blocks_kernel<W><<<row_blocks(weights.rows), 32 * kWarpsPerBlock, 0, stream>>>(
        wp, weights.row_stride, a + size_t(t0) * a_row_bytes,
        a_row_bytes, y + size_t(t0) * y_stride, y_stride, weights.rows, nb, nt);
    check(cudaGetLastError(), "matmul kernel launch");
  }
}

template <class W>
void run_float(cudaStream_t stream, const backend::Tensor& weights, const backend::Tensor& x,
               const backend::Tensor& out) {
  const auto* xs = reinterpret_cast<const float*>(device_ptr(x));
  auto* y = reinterpret_cast<float*>(device_ptr(out));
  const size_t x_stride = x.row_stride / sizeof(float), y_stride = out.row_stride / sizeof(float);
  const auto* wp = reinterpret_cast<const uint8_t*>(device_ptr(weights));
  const bool vec = weights.cols % 8 == 0 && weights.row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(wp) % 16 == 0 &&
                   x.row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0;
  for (int64_t t0 = 0; t0 < x.rows; t0 += kTokens) {
    const int nt = int(x.rows - t0 < kTokens ? x.rows - t0 : kTokens);
    if (vec) {
      const unsigned grid = row_blocks(weights.rows);
      if (nt == 1) {
        matmul_float_vec_kernel<W, 1><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
            wp, weights.row_stride, xs + size_t(t0) * x_stride, x_stride, y + size_t(t0) * y_stride, y_stride,
            weights.rows, int(weights.cols), nt);
      } else {
        matmul_float_vec_kernel<W, kTokens><<<grid, 32 * kWarpsPerBlock, 0, stream>>>(
            wp, weights.row_stride, xs + size_t(t0) * x_stride, x_stride, y + size_t(t0) * y_stride, y_stride,
            weights.rows, int(weights.cols), nt);
      }
      check(cudaGetLastError(), "matmul kernel launch");
      continue;
    }
    matmul_float_kernel<W><<<row_blocks(weights.rows), 32 * kWarpsPerBlock, 0, stream>>>(
        reinterpret_cast<const uint8_t*>(device_ptr(weights)), weights.row_stride, xs + size_t(t0) * x_stride,
        x_stride, y + size_t(t0) * y_stride, y_stride, weights.rows, weights.cols, nt);
    check(cudaGetLastError(), "matmul kernel launch");
  }
}

}  // namespace

void matmul(cudaStream_t stream, const backend::Tensor& weights, const backend::Tensor& x,
            const backend::Tensor& out, Scratch& scratch) {
  if (x.rows == 0 || weights.rows == 0) return;
  switch (weights.type) {
    case DType::f32: return run_float<F32>(stream, weights, x, out);
    case DType::f16: return run_float<F16>(stream, weights, x, out);
    case DType::bf16: return run_float<BF16>(stream, weights, x, out);
    case DType::q4_0: return run_blocks<Q4_0>(stream, weights, x, out, scratch);
    case DType::q5_0: return run_blocks<Q5_0>(stream, weights, x, out, scratch);
    case DType::q8_0: return run_blocks<Q8_0>(stream, weights, x, out, scratch);
    case DType::q4_1: return run_blocks<Q4_1>(stream, weights, x, out, scratch);
    case DType::q5_1: return run_blocks<Q5_1>(stream, weights, x, out, scratch);
    case DType::q4_k: return run_blocks<Q4_K>(stream, weights, x, out, scratch);
    case DType::q5_k: return run_blocks<Q5_K>(stream, weights, x, out, scratch);
    case DType::q6_k: return run_blocks<Q6_K>(stream, weights, x, out, scratch);
    default: unsupported_type("matmul", weights.type);
  }
}

}  // namespace ember::cuda
