// matmul on the GPU for every weight type ember reads, the first version: correct
// before fast. Activations are converted to the contract's activation type by one
// thread per block (the CPU's bytes, cuda/device/block_math.hpp); then one warp per
// weight row walks its blocks, lanes striding over them, for up to kTokens tokens per
// pass, and reduces with shuffles. Rows of more tokens take several passes: this is a
// decode kernel (issue 16 asks for tensor-core prefill separately).
#include <type_traits>

#include "cuda/device/block_math.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

using quant::DType;

constexpr int kTokens = 8;        // tokens per pass
constexpr int kWarpsPerBlock = 4;  // weight rows per thread block
constexpr int kQuantThreads = 128;

// Activation formats: values per block, bytes per block, the quantizer.
struct ActQ8_0 {
  static constexpr int kValues = 32, kBytes = dev::kQ8_0Bytes;
  static __device__ void quantize(const float* x, uint8_t* out) { dev::q8_0_quantize(x, out); }
};
struct ActQ8_1 {
  static constexpr int kValues = 32, kBytes = dev::kQ8_1Bytes;
  static __device__ void quantize(const float* x, uint8_t* out) { dev::q8_1_quantize(x, out); }
};
struct ActQ8_K {
  static constexpr int kValues = 256, kBytes = dev::kQ8_KBytes;
  static __device__ void quantize(const float* x, uint8_t* out) { dev::q8_k_quantize(x, out); }
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

// One thread per activation block: row t, block b.
template <class A>
__global__ void quantize_kernel(const float* x, size_t x_stride, uint8_t* dst, size_t dst_row_bytes, int64_t nb,
                                int64_t n_tok) {
  const int64_t i = int64_t(blockIdx.x) * kQuantThreads + threadIdx.x;
  if (i >= nb * n_tok) return;
  const int64_t t = i / nb, b = i % nb;
  A::quantize(x + size_t(t) * x_stride + size_t(b) * A::kValues, dst + size_t(t) * dst_row_bytes + size_t(b) * A::kBytes);
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
  for (int t = 0; t < kTokens; ++t) {
    if (t >= n_tok) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) out[size_t(t) * out_stride + size_t(row)] = s;
  }
}

// A 4-byte word at a 2-byte-aligned address (blocks of 18 and 34 bytes).
__device__ int load_word2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return int(uint32_t(h[0]) | uint32_t(h[1]) << 16);
}

// Q4_0 and Q8_0 weights against Q8_0 activations with __dp4a: four lanes per 32-value
// block, eight blocks of the row per warp step. A block's integer sum is exact in any
// order, so each block's term is the contract's mul_rn(d_w, d_a) * sum; the terms of a
// row are added in another order than the reference's (the tolerance of test_cuda).
template <bool kQ8>
__global__ void matmul_q8act_dp4a_kernel(const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_row_bytes,
                                         float* out, size_t out_stride, int64_t n_out, int64_t nb, int n_tok) {
  constexpr int kWB = kQ8 ? dev::kQ8_0Bytes : dev::kQ4_0Bytes;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, sub = lane & 3;
  if (row >= n_out) return;  // the whole warp: one row per warp
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kTokens] = {};
#pragma unroll 4
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const int64_t b = b0 + (lane >> 2);
    const bool ok = b < nb;  // every lane takes part in the shuffles below
    const uint8_t* wb = wr + size_t(ok ? b : 0) * kWB;
    int w0, w1;
    if (kQ8) {
      w0 = load_word2(wb + 2 + 8 * sub);
      w1 = load_word2(wb + 6 + 8 * sub);
    } else {
      const int q = load_word2(wb + 2 + 4 * sub);  // values 4sub.. (low nibbles), 16 + 4sub.. (high)
      w0 = q & 0x0f0f0f0f;
      w1 = (q >> 4) & 0x0f0f0f0f;
    }
    const float dw = dev::half_at(wb);
    for (int t = 0; t < kTokens; ++t) {
      if (t >= n_tok) break;
      const uint8_t* ab = a + size_t(t) * a_row_bytes + size_t(ok ? b : 0) * dev::kQ8_0Bytes;
      int s;
      if (kQ8) {
        s = __dp4a(w0, load_word2(ab + 2 + 8 * sub), __dp4a(w1, load_word2(ab + 6 + 8 * sub), 0));
      } else {
        const int a0 = load_word2(ab + 2 + 4 * sub), a1 = load_word2(ab + 18 + 4 * sub);
        s = __dp4a(w0, a0, __dp4a(w1, a1, 0)) - 8 * __dp4a(0x01010101, a0, __dp4a(0x01010101, a1, 0));
      }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (ok && sub == 0) acc[t] += dev::mul_rn(dw, dev::half_at(ab)) * float(s);
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    if (t >= n_tok) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) out[size_t(t) * out_stride + size_t(row)] = s;
  }
}

__device__ int warp_isum(int v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The K formats against Q8_K activations: the whole warp on one 256-value super-block,
// lane l on values 8l..8l+7. A lane's partial integer sums (scaled by its sub-block's
// scale) add up exactly over the warp, so each super-block's term is the contract's to
// the bit; the terms of a row are added in order, the rows' in another than the reference.
struct KQ4 {
  static __device__ int code(const uint8_t* w, int j, int l) { return dev::q4_k_code(w, j, l); }
};
struct KQ5 {
  static __device__ int code(const uint8_t* w, int j, int l) { return dev::q5_k_code(w, j, l); }
};
template <class K>
__device__ float k_lane_term(const uint8_t* w, const uint8_t* a, int lane) {
  const int j = lane / 4, l0 = (lane % 4) * 8;
  int s = 0;
#pragma unroll
  for (int l = l0; l < l0 + 8; ++l) s += K::code(w, j, l) * int32_t(int8_t(a[4 + 32 * j + l]));
  int scaled = dev::k_scale(w + 4, j, false) * s;
  int mins = lane % 4 == 0 ? dev::k_scale(w + 4, j, true) * (dev::q8_k_bsum(a, 2 * j) + dev::q8_k_bsum(a, 2 * j + 1)) : 0;
  scaled = warp_isum(scaled);
  mins = warp_isum(mins);
  const float da = dev::q8_k_d(a);
  return dev::mul_rn(dev::mul_rn(dev::half_at(w), da), float(scaled)) -
         dev::mul_rn(dev::mul_rn(dev::half_at(w + 2), da), float(mins));
}
__device__ float q6_k_lane_term(const uint8_t* w, const uint8_t* a, int lane) {
  const int g = lane / 2, k0 = 16 * g + (lane % 2) * 8;
  int s = 0;
#pragma unroll
  for (int i = k0; i < k0 + 8; ++i) s += (dev::q6_k_code(w, i) - 32) * int32_t(int8_t(a[4 + i]));
  const int total = warp_isum(int32_t(int8_t(w[192 + g])) * s);
  return dev::mul_rn(dev::half_at(w + 208), dev::q8_k_d(a)) * float(total);
}

template <int kKind>  // 4: Q4_K, 5: Q5_K, 6: Q6_K
__global__ void matmul_k_warp_kernel(const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_row_bytes,
                                     float* out, size_t out_stride, int64_t n_out, int64_t nb, int n_tok) {
  constexpr int kWB = kKind == 4 ? dev::kQ4_KBytes : kKind == 5 ? dev::kQ5_KBytes : dev::kQ6_KBytes;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n_out) return;  // the whole warp
  const uint8_t* wr = w + size_t(row) * w_stride;
  float acc[kTokens] = {};
#pragma unroll 2
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wr + size_t(b) * kWB;
    for (int t = 0; t < kTokens; ++t) {
      if (t >= n_tok) break;
      const uint8_t* ab = a + size_t(t) * a_row_bytes + size_t(b) * dev::kQ8_KBytes;
      if constexpr (kKind == 4) acc[t] += k_lane_term<KQ4>(wb, ab, lane);
      else if constexpr (kKind == 5) acc[t] += k_lane_term<KQ5>(wb, ab, lane);
      else acc[t] += q6_k_lane_term(wb, ab, lane);
    }
  }
  if (lane == 0)
    for (int t = 0; t < n_tok; ++t) out[size_t(t) * out_stride + size_t(row)] = acc[t];
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
  for (int t = 0; t < kTokens; ++t) {
    if (t >= n_tok) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) out[size_t(t) * out_stride + size_t(row)] = s;
  }
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
  quantize_kernel<A><<<unsigned((jobs + kQuantThreads - 1) / kQuantThreads), kQuantThreads, 0, stream>>>(
      reinterpret_cast<const float*>(device_ptr(x)), x.row_stride / sizeof(float), a, a_row_bytes, nb, n_tok);
  check(cudaGetLastError(), "matmul activation quantization launch");
  auto* y = reinterpret_cast<float*>(device_ptr(out));
  const size_t y_stride = out.row_stride / sizeof(float);
  for (int64_t t0 = 0; t0 < n_tok; t0 += kTokens) {
    const int nt = int(n_tok - t0 < kTokens ? n_tok - t0 : kTokens);
    const auto* wp = reinterpret_cast<const uint8_t*>(device_ptr(weights));
    const bool aligned = weights.row_stride % 2 == 0 && reinterpret_cast<uintptr_t>(wp) % 2 == 0;
    if constexpr (std::is_same_v<W, Q4_0> || std::is_same_v<W, Q8_0>) {
      if (aligned) {
        matmul_q8act_dp4a_kernel<std::is_same_v<W, Q8_0>><<<row_blocks(weights.rows), 32 * kWarpsPerBlock, 0, stream>>>(
            wp, weights.row_stride, a + size_t(t0) * a_row_bytes, a_row_bytes, y + size_t(t0) * y_stride, y_stride,
            weights.rows, nb, nt);
        check(cudaGetLastError(), "matmul kernel launch");
        continue;
      }
    }
    if constexpr (std::is_same_v<W, Q4_K> || std::is_same_v<W, Q5_K> || std::is_same_v<W, Q6_K>) {
      constexpr int kind = std::is_same_v<W, Q4_K> ? 4 : std::is_same_v<W, Q5_K> ? 5 : 6;
      matmul_k_warp_kernel<kind><<<row_blocks(weights.rows), 32 * kWarpsPerBlock, 0, stream>>>(
          wp, weights.row_stride, a + size_t(t0) * a_row_bytes, a_row_bytes, y + size_t(t0) * y_stride, y_stride,
          weights.rows, nb, nt);
      check(cudaGetLastError(), "matmul kernel launch");
      continue;
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
  for (int64_t t0 = 0; t0 < x.rows; t0 += kTokens) {
    const int nt = int(x.rows - t0 < kTokens ? x.rows - t0 : kTokens);
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
