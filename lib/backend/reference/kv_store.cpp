#include <cstring>

#include "backend/reference/ops.hpp"
#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "quant/quant.hpp"

namespace ember::reference {

void kv_store(const Tensor& src, const Tensor& cache, const Tensor& slots) {
  for (int64_t t = 0; t < src.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (slot < 0 || slot >= cache.rows)
      fail(ErrorCode::invalid_argument, "kv_store: slot {} outside [0, {})", slot, cache.rows);
    const float* s = src.row_ptr<float>(t);
    if (cache.type == backend::DType::f32) {
      std::memcpy(cache.row_ptr(slot), s, size_t(src.cols) * sizeof(float));
    } else if (cache.type != backend::DType::f16) {
      quant::quantize_row(cache.type, s, cache.row_ptr(slot), src.cols);  // quant/kv_formats.hpp
    } else {
      uint16_t* d = cache.row_ptr<uint16_t>(slot);
      for (int64_t c = 0; c < src.cols; ++c) d[c] = fp32_to_fp16(s[c]);
    }
  }
}

}  // namespace ember::reference
