#include "sampling/penalties.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ember::sampling {

void apply_penalties(std::span<float> logits, std::span<const TokenCount> counts, const PenaltyParams& params) {
  if (!params.active()) return;
  constexpr float kMax = std::numeric_limits<float>::max();
  for (const TokenCount& entry : counts) {
    float& logit = logits[static_cast<size_t>(entry.token)];
    if (!std::isfinite(logit)) continue;  // -inf stays impossible; NaN/+inf are rejected later
    float value = logit;
    if (params.repetition != 1.0f) value = value > 0.0f ? value / params.repetition : value * params.repetition;
    value -= static_cast<float>(entry.count) * params.frequency + params.presence;
    logit = std::clamp(value, -kMax, kMax);
  }
}

void TokenHistory::push(int32_t token) {
  if (window_ == 0) return;
  // Allocate first, so that a failed allocation leaves the history unchanged:
  // after this reserve the counts_.push_back in add() cannot throw.
  if (counts_.size() == counts_.capacity()) counts_.reserve(std::max<size_t>(16, 2 * counts_.capacity()));
  if (window_ > 0) recent_.push_back(token);
  try {
    add(token, +1);  // may throw only from the map insertion, which then changes nothing
  } catch (...) {
    if (window_ > 0) recent_.pop_back();
    throw;
  }
  ++size_;
  if (window_ > 0 && recent_.size() > static_cast<size_t>(window_)) {
    add(recent_.front(), -1);  // only lowers or erases: no allocation
    recent_.pop_front();
    --size_;
  }
}

void TokenHistory::clear() {
  size_ = 0;
  recent_.clear();
  counts_.clear();
  position_.clear();
}

int32_t TokenHistory::max_token() const {
  int32_t best = -1;
  for (const TokenCount& entry : counts_) best = std::max(best, entry.token);
  return best;
}

void TokenHistory::add(int32_t token, int32_t delta) {
  const auto found = position_.find(token);
  if (found == position_.end()) {
    // Only a push (+1) can meet a token that is not counted yet.
    position_.emplace(token, counts_.size());
    counts_.push_back({token, delta});
    return;
  }
  const size_t index = found->second;
  counts_[index].count += delta;
  if (counts_[index].count > 0) return;
  // The token left the window: move the last entry into its slot.
  position_.erase(found);
  if (index + 1 != counts_.size()) {
    counts_[index] = counts_.back();
    position_[counts_[index].token] = index;
  }
  counts_.pop_back();
}

}  // namespace ember::sampling
