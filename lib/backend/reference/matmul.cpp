#include <vector>

#include "backend/reference/ops.hpp"
#include "common/fail.hpp"
#include "quant/quant.hpp"

namespace ember::reference {

void matmul(const Tensor& weights, const Tensor& x, const Tensor& out) {
  if (weights.layout != 0)
    fail(ErrorCode::invalid_argument, "matmul: the reference backend reads no repacked weights (layout {})",
         weights.layout);
  const quant::DType act_type = quant::activation_type(weights.type);
  std::vector<std::byte> converted(quant::row_bytes(act_type, x.cols));
  for (int64_t t = 0; t < x.rows; ++t) {
    quant::quantize_row(act_type, x.row_ptr<float>(t), converted.data(), x.cols);
    float* y = out.row_ptr<float>(t);
    for (int64_t o = 0; o < weights.rows; ++o)
      y[o] = quant::dot_row(weights.type, weights.row_ptr(o), converted.data(), x.cols);
  }
}

}  // namespace ember::reference
