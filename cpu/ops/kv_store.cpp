#include <cstring>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/ops.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu {

void kv_store(OpContext& ctx, const Tensor& src, const Tensor& cache, const Tensor& slots) {
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (slot < 0 || slot >= cache.rows)
      fail(ErrorCode::invalid_argument, "kv_store: slot {} outside [0, {})", slot, cache.rows);
  }
  if (const int group = quant::kv::group_size(cache.type); group != 0) {
    // The reference quantizer itself (quant/kv_formats.cpp), so the bytes are the specified ones;
    // rows are spread over the pool when there are enough of them (prefill).
    const bool int4 = quant::kv::is_int4(cache.type), int4o = quant::kv::is_int4o(cache.type);
    auto store_rows = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        void* dst = cache.row_ptr(*slots.row_ptr<int32_t>(t));
        if (int4o) {
          quant::kv::quantize_q4o(src.row_ptr<float>(t), dst, src.cols, group);
        } else if (int4) {
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
  const auto to_f16 = op_kernels(ctx.isa).to_f16;
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (cache.type == backend::DType::f32) {
      std::memcpy(cache.row_ptr(slot), src.row_ptr(t), size_t(src.cols) * sizeof(float));
    } else {
      to_f16(src.row_ptr<float>(t), cache.row_ptr<uint16_t>(slot), src.cols);
    }
  }
}

}  // namespace ember::cpu
