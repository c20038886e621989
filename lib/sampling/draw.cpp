#include "sampling/draw.hpp"

#include "sampling/exp.hpp"

namespace ember::sampling {

namespace {

// Stores w_i (see draw.hpp) in the first n entries of `storage` (which only grows:
// regrowing a shrunk vector would zero-fill it) and returns them with their sum,
// added in order. The largest weight is exactly 1, so the sum is >= 1.
std::span<const float> fill_weights(const Candidates& c, float temperature, std::vector<float>& storage,
                                    double& total) {
  const double max = max_logit(c);
  const double inv_t = 1.0 / static_cast<double>(temperature);  // finite: T >= 2^-149 gives <= 2^149
  const size_t n = c.items.size();
  if (storage.size() < n) storage.resize(n);
  const std::span<float> weights(storage.data(), n);
  for (size_t i = 0; i < n; ++i) {
    // <= 0; with a tiny temperature it is hugely negative (or -inf) and its weight 0.
    // The maximum itself gives 0 * inv_t = 0 and weight 1.
    weights[i] = static_cast<float>((static_cast<double>(c.items[i].logit) - max) * inv_t);
  }
  exp_nonpositive(weights);
  total = 0.0;
  for (const float weight : weights) total += weight;
  return weights;
}

}  // namespace

std::vector<double> probabilities(const Candidates& c, float temperature) {
  std::vector<double> probs;
  if (c.items.empty()) return probs;
  std::vector<float> storage;
  double total = 0.0;
  for (const float weight : fill_weights(c, temperature, storage, total)) probs.push_back(weight / total);
  return probs;
}

size_t draw_index(const Candidates& c, float temperature, double u, std::vector<float>& storage) {
  double total = 0.0;
  const std::span<const float> weights = fill_weights(c, temperature, storage, total);
  const double target = u * total;
  double cumulative = 0.0;
  size_t last_possible = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] == 0.0f) continue;
    cumulative += weights[i];
    last_possible = i;
    if (target < cumulative) return i;
  }
  // Only reachable when u * total rounds up to total (u within 2^-53 of 1).
  return last_possible;
}

}  // namespace ember::sampling
