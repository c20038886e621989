// The perplexity gate's raising rule (gate.hpp).
#include "quantize/gate.hpp"

#include <algorithm>

#include "quant/quant.hpp"
#include "quantize/weight_quantizers.hpp"

namespace ember::quantize {

using quant::DType;

std::optional<DType> wider_type(DType current, DType source, int64_t cols) {
  const DType top = source == DType::bf16 ? DType::bf16 : DType::f16;
  if (quant::is_float_type(current) || current == source) return std::nullopt;
  std::vector<DType> chain;
  switch (current) {
    case DType::q4_k: case DType::q5_k: chain = {DType::q6_k, DType::q8_0, top}; break;
    // Q8_W / Q8_WR -> Q8_0: the same bytes per weight, with an activation scale per block
    // of 32 instead of per token (W8A8 with finer activation scales), then the source's type.
    case DType::q8_w: case DType::q8_wr: chain = {DType::q8_0, top}; break;
    case DType::q8_0: chain = {top}; break;
    default: chain = {DType::q8_0, top}; break;
  }
  for (DType t : chain)
    if (can_write(t) && cols % quant::type_info(t).block_elems == 0) return t;
  return std::nullopt;
}

std::vector<size_t> RaiseOrder::next(size_t step, const std::function<bool(size_t)>& can_raise) {
  std::vector<size_t> out;
  for (size_t seen = 0; seen < ranked_.size() && out.size() < step; ++seen) {
    const size_t k = ranked_[cursor_];
    cursor_ = (cursor_ + 1) % ranked_.size();
    if (can_raise(k) && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

}  // namespace ember::quantize
