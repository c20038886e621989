#include "backend/reference/ops.hpp"
#include "common/fail.hpp"
#include "quant/quant.hpp"

namespace ember::reference {

void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) {
  for (int64_t i = 0; i < ids.rows; ++i) {
    const int32_t id = *ids.row_ptr<int32_t>(i);
    if (id < 0 || id >= table.rows)
      fail(ErrorCode::invalid_argument, "get_rows: id {} at row {} outside [0, {})", id, i, table.rows);
    quant::dequantize_row(table.type, table.row_ptr(id), out.row_ptr<float>(i), table.cols);
  }
}

}  // namespace ember::reference
