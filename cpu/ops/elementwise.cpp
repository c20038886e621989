// add, mul, scale and glu on the CPU: row-parallel, vectorized per ISA by target_clones.
//
// The activations follow llama.cpp's CPU backend bit for bit, so that a model's
// hidden state can agree with llama.cpp's exactly (docs/model.md, "Numerics"):
// SiLU is x / (1 + e^-x) with exp_fma (ggml's vector SiLU); GELU (tanh form) is
// read from a table over all F16 values: the input is rounded to F16 and the
// result is the F16-rounded GELU of that (ggml's GGML_GELU_FP16), except that
// x <= -10 gives 0 and x >= 10 gives x. So GELU has F16 precision (relative error
// up to ~1e-3), which is what llama.cpp's CPU results carry.
#include <array>
#include <cmath>
#include <memory>

#include "backend/reference/ops.hpp"
#include "common/fp16.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"

#if defined(EMBER_X86)
#include <immintrin.h>
#endif

namespace ember::cpu {
namespace {

// GELU(tanh) of every F16 value, as F16 bits. The inner polynomial is one FMA,
// 1 + (0.044715 x) x, as in llama.cpp's table (its C code is compiled with FMA
// contraction); tanhf is the C library's, as there.
const std::array<uint16_t, 65536>& gelu_f16_table() {
  static const auto table = [] {
    auto t = std::make_unique<std::array<uint16_t, 65536>>();
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = fp16_to_fp32(uint16_t(h));
      const float inner = 0.79788456080286535587989211986876f * x * std::fma(0.044715f * x, x, 1.0f);
      (*t)[h] = fp32_to_fp16(0.5f * x * (1.0f + std::tanh(inner)));
    }
    return t;
  }();
  return *table;
}

inline float gelu_f16(const uint16_t* table, float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

void gelu_glu_row_scalar(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = gelu_f16_table().data();
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_f16(table, gate[i]) * up[i];
}

#if defined(EMBER_X86)
// Eight at a time: F16C rounds (to nearest even, as fp32_to_fp16) and widens.
__attribute__((target("avx2,f16c"))) void gelu_glu_row_f16c(const float* gate, const float* up, float* out,
                                                             int64_t n) {
  const uint16_t* table = gelu_f16_table().data();
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  alignas(16) uint16_t idx[8], val[8];
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    _mm_store_si128(reinterpret_cast<__m128i*>(idx), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    for (int l = 0; l < 8; ++l) val[l] = table[idx[l]];
    __m256 g = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(val)));
    g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gelu_f16(table, gate[i]) * up[i];
}
#endif

// Below this many values an op runs on the calling thread only.
constexpr int64_t kParallelThreshold = 1 << 14;

EMBER_VECTORIZE void add_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
EMBER_VECTORIZE void mul_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
EMBER_VECTORIZE void scale_row(const float* x, float factor, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}
EMBER_VECTORIZE void silu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_fma(gate[i]) * up[i];
}

template <typename RowFn>
void for_rows(OpContext& ctx, int64_t rows, int64_t cols, RowFn&& fn) {
  if (rows * cols < kParallelThreshold || rows == 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r);
    return;
  }
  ctx.pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

}  // namespace

void add(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    add_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void mul(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    mul_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void scale(OpContext& ctx, const Tensor& x, float factor, const Tensor& out) {
  for_rows(ctx, x.rows, x.cols,
           [&](int64_t r) { scale_row(x.row_ptr<float>(r), factor, out.row_ptr<float>(r), x.cols); });
}

void glu(OpContext& ctx, const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out) {
  auto gelu_glu_row = gelu_glu_row_scalar;
#if defined(EMBER_X86)
  if (ctx.isa != Isa::scalar) gelu_glu_row = gelu_glu_row_f16c;
#endif
  const auto row_fn = activation == backend::Activation::silu ? silu_glu_row : gelu_glu_row;
  if (gate.rows == 1 && gate.cols >= kParallelThreshold / 4) {
    // Decode: split the single row over threads.
    ctx.pool.parallel_for(gate.cols / 16, [&](int64_t begin, int64_t end) {
      const int64_t c0 = begin * 16, c1 = end == gate.cols / 16 ? gate.cols : end * 16;
      row_fn(gate.row_ptr<float>(0) + c0, up.row_ptr<float>(0) + c0, out.row_ptr<float>(0) + c0, c1 - c0);
    });
    return;
  }
  for_rows(ctx, gate.rows, gate.cols, [&](int64_t r) {
    row_fn(gate.row_ptr<float>(r), up.row_ptr<float>(r), out.row_ptr<float>(r), gate.cols);
  });
}

}  // namespace ember::cpu
