// AlertMonitor: rule validation and the two-threshold (fire / clear) state machine.
#include "metrics/alerts.hpp"

#include <cmath>

#include "common/fail.hpp"

namespace ember::metrics {

AlertMonitor::AlertMonitor(std::vector<AlertRule> rules) {
  std::map<std::string, size_t, std::less<>> by_name;
  for (size_t i = 0; i < rules.size(); ++i) {
    const AlertRule& r = rules[i];
    require(!r.name.empty(), "alert rule {} has an empty name", i);
    require(std::isfinite(r.threshold), "alert rule \"{}\": threshold {} is not finite", r.name, r.threshold);
    require(r.hysteresis >= 0.0 && r.hysteresis < 1.0, "alert rule \"{}\": hysteresis {} is outside [0, 1)", r.name,
            r.hysteresis);
    require(by_name.emplace(r.name, i).second, "alert rule \"{}\" appears twice", r.name);
  }
  rules_ = std::move(rules);
  firing_.assign(rules_.size(), false);
  by_name_ = std::move(by_name);
}

size_t AlertMonitor::index_of(std::string_view name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) fail(ErrorCode::invalid_argument, "no alert rule named \"{}\"", name);
  return it->second;
}

std::optional<AlertEvent> AlertMonitor::observe(std::string_view name, double value, uint64_t samples) {
  const size_t i = index_of(name);
  const AlertRule& r = rules_[i];
  if (std::isnan(value) || samples < r.min_samples) return std::nullopt;
  const double margin = r.hysteresis * std::abs(r.threshold);
  const bool above = r.direction == Direction::above;
  bool next = firing_[i];
  if (!firing_[i]) {
    next = above ? value > r.threshold : value < r.threshold;
  } else {
    const bool cleared = above ? value <= r.threshold - margin : value >= r.threshold + margin;
    next = !cleared;
  }
  if (next == firing_[i]) return std::nullopt;
  firing_[i] = next;
  return AlertEvent{r.name, next, value, r.threshold};
}

bool AlertMonitor::firing(std::string_view name) const { return firing_[index_of(name)]; }

}  // namespace ember::metrics
