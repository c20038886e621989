// get_rows on the CPU: out[i] = dequantize(table[ids[i]]) (contract: lib/backend/ops/get_rows.hpp).
// Ids are checked before anything is written; rows are split over the threads when
// there are enough values to pay for waking them.
#include "common/fail.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {
// Values below which one thread does all the work.
constexpr int64_t kParallelValues = 1 << 16;
}  // namespace

void get_rows(OpContext& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  const WeightKernels& kernels = weight_kernels(ctx.isa, table.type);
  const int64_t n = ids.rows;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = *ids.row_ptr<const int32_t>(i);
    if (id < 0 || id >= table.rows)
      fail(ErrorCode::invalid_argument, "get_rows: id {} at position {} is outside the table's {} rows", id, i,
           table.rows);
  }
  const auto gather = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      kernels.dequantize(table.row_ptr(*ids.row_ptr<const int32_t>(i)), out.row_ptr<float>(i), table.cols);
  };
  if (n * table.cols < kParallelValues || ctx.pool.size() == 1) {
    gather(0, n);
  } else {
    ctx.pool.parallel_for(n, gather);
  }
}

}  // namespace ember::cpu
