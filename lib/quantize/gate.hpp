// The perplexity gate's raising rule (`ember quantize --max-ppl-rise R`, quantize_model):
// when the output's perplexity exceeds the input's by more than R, the most sensitive
// quantized tensors are raised to the next wider type, a few per round, and the
// perplexity is measured again, until it holds or nothing can be raised.
//
// The next wider type (wider_type):
//   Q4_0 Q4_1 Q5_0 Q5_1 -> Q8_0          (the 32-value block types)
//   Q4_K Q5_K           -> Q6_K -> Q8_0  (the K types: one K step first, since Q6_K is
//                                          close to Q8_0's accuracy at 6.56 bits, not 8.5)
//   Q8_0                -> F16 (BF16 when the source tensor is BF16: F16 cannot hold its range)
// skipping a type whose block does not divide the rows. F16/BF16/F32 are the top.
//
// The order (RaiseOrder): the tensors ranked by sensitivity, most sensitive first; each
// round takes the next `step` tensors that can still be raised, going down the ranking
// and starting again at its top when it runs out, so that every tensor is raised once
// before the most sensitive one is raised twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "quant/dtype.hpp"

namespace ember::quantize {

// nullopt when `current` is already the widest (F16, BF16, F32 or the source's type).
std::optional<quant::DType> wider_type(quant::DType current, quant::DType source, int64_t cols);

class RaiseOrder {
 public:
  explicit RaiseOrder(std::vector<size_t> ranked) : ranked_(std::move(ranked)) {}
  // Up to `step` distinct entries of the ranking for which can_raise is true, from where
  // the last call stopped; empty when none is left.
  std::vector<size_t> next(size_t step, const std::function<bool(size_t)>& can_raise);

 private:
  std::vector<size_t> ranked_;
  size_t cursor_ = 0;
};

}  // namespace ember::quantize
