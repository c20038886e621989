#include <cstring>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"
#include "quant/kv_formats.hpp"

#if defined(EMBER_X86)
#include <immintrin.h>
#elif defined(EMBER_ARM64)
#include <arm_neon.h>
#endif

namespace ember::cpu {
namespace {

#if defined(EMBER_X86)
__attribute__((target("avx2,f16c"))) void to_f16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
#elif defined(EMBER_ARM64)
// FCVTN rounds to nearest even, as fp32_to_fp16 and F16C; NEON is ARMv8-A baseline.
void to_f16_neon(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
#endif

void to_f16(Isa isa, const float* src, uint16_t* dst, int64_t n) {
#if defined(EMBER_X86)
  if (isa != Isa::scalar) return to_f16_f16c(src, dst, n);
#elif defined(EMBER_ARM64)
  if (isa != Isa::scalar) return to_f16_neon(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace

void kv_store(OpContext& ctx, const Tensor& src, const Tensor& cache, const Tensor& slots) {
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (slot < 0 || slot >= cache.rows)
      fail(ErrorCode::invalid_argument, "kv_store: slot {} outside [0, {})", slot, cache.rows);
  }
  if (const int group = quant::kv::group_size(cache.type); group != 0) {
    // The reference quantizer itself (quant/kv_formats.cpp), so the bytes are the specified ones;
    // rows are spread over the pool when there are enough of them (prefill).
    const bool int4 = quant::kv::is_int4(cache.type);
    auto store_rows = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        void* dst = cache.row_ptr(*slots.row_ptr<int32_t>(t));
        if (int4) {
          quant::kv::quantize_q4(src.row_ptr<float>(t), dst, src.cols, group);
        } else {
          quant::kv::quantize_q8(src.row_ptr<float>(t), dst, src.cols, group);
        }
      }
    };
    if (src.rows * src.cols >= (int64_t(1) << 15)) {
      ctx.pool.parallel_for(src.rows, store_rows);
    } else {
      store_rows(0, src.rows);
    }
    return;
  }
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (cache.type == backend::DType::f32) {
      std::memcpy(cache.row_ptr(slot), src.row_ptr(t), size_t(src.cols) * sizeof(float));
    } else {
      to_f16(ctx.isa, src.row_ptr<float>(t), cache.row_ptr<uint16_t>(slot), src.cols);
    }
  }
}

}  // namespace ember::cpu
