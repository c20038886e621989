#include <cstring>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/ops.hpp"
#include "quant/kv_formats.hpp"
#include "quant/quant.hpp"

namespace ember::cpu {

void kv_store(OpContext& ctx, const Tensor& src, const Tensor& cache, const Tensor& slots) {
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (slot < 0 || slot >= cache.rows)
      fail(ErrorCode::invalid_argument, "kv_store: slot {} outside [0, {})", slot, cache.rows);
  }
  if (const int group = quant::kv::group_size(cache.type); group != 0) {
    // The reference quantizer itself (quant/kv_formats.cpp), so the bytes are the specified
    // ones, one group at a time: every group is a block of its own. INT4's clipping search
    // costs some 15 us per group of 32 (a 2-vCPU Zen 3, 2026-12-08), so its groups are
    // spread over the pool even for a decode step's single row (Gemma 3: 8 groups per K or
    // V row, 18 layers: it was a quarter of a decode step, on one thread); INT8's groups
    // cost ~0.1 us and go to the pool only in bulk (prefill).
    const bool int4 = quant::kv::is_int4(cache.type), int4o = quant::kv::is_int4o(cache.type);
    const int64_t row_groups = src.cols / group;
    const size_t block_bytes = quant::row_bytes(cache.type, group);
    auto store_groups = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = i / row_groups, b = i % row_groups;
        const float* x = src.row_ptr<float>(t) + b * group;
        std::byte* dst = cache.row_ptr(*slots.row_ptr<int32_t>(t)) + size_t(b) * block_bytes;
        if (int4o) {
          quant::kv::quantize_q4o(x, dst, group, group);
        } else if (int4) {
          quant::kv::quantize_q4(x, dst, group, group);
        } else {
          quant::kv::quantize_q8(x, dst, group, group);
        }
      }
    };
    const int64_t n_groups = src.rows * row_groups;
    if ((int4 || int4o) ? n_groups >= 2 : src.rows * src.cols >= (int64_t(1) << 15)) {
      ctx.pool.parallel_for(n_groups, store_groups);
    } else {
      store_groups(0, n_groups);
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
