// Threshold alerts with hysteresis: the Engine feeds each rule's current value
// (a p99 latency, a queue depth, ...) after every update and gets an event only when
// a rule starts or stops firing, so a value hovering at its threshold does not
// flap. Not thread-safe; the owner serialises calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember::metrics {

enum class Direction {
  above,  // fires when value > threshold
  below,  // fires when value < threshold
};

struct AlertRule {
  std::string name;                       // unique among the monitor's rules, non-empty
  Direction direction = Direction::above;  // which side of the threshold is bad
  double threshold = 0.0;                 // finite, in the unit of the observed value
  // Relative hysteresis in [0, 1), default 0.1. A firing rule clears only when the
  // value is back past threshold - h·|threshold| (above; value ≤ that) or
  // threshold + h·|threshold| (below; value ≥ that), which for a positive threshold
  // is threshold·(1-h) / threshold·(1+h).
  double hysteresis = 0.1;
  uint64_t min_samples = 1;  // observe() does nothing while fewer samples back the value
};

struct AlertEvent {
  std::string name;  // the rule
  bool firing;       // true: started firing; false: cleared
  double value;      // the value that changed the state
  double threshold;  // the rule's threshold
};

class AlertMonitor {
 public:
  // Throws ember::Error(invalid_argument) naming the rule for an empty or duplicate
  // name, a non-finite threshold, or a hysteresis outside [0, 1). No rule fires yet.
  explicit AlertMonitor(std::vector<AlertRule> rules);

  // Feeds the current value of rule `name`, resting on `samples` observations.
  // Returns an event only when the rule's state changes (starts firing, or clears);
  // std::nullopt otherwise, and also when value is NaN or samples < min_samples
  // (the state is then left as it was). Throws invalid_argument for an unknown name.
  std::optional<AlertEvent> observe(std::string_view name, double value, uint64_t samples);

  // Whether rule `name` is firing; throws invalid_argument for an unknown name.
  bool firing(std::string_view name) const;

  const std::vector<AlertRule>& rules() const { return rules_; }

 private:
  size_t index_of(std::string_view name) const;

  std::vector<AlertRule> rules_;
  std::vector<bool> firing_;                             // per rule, same order
  std::map<std::string, size_t, std::less<>> by_name_;  // rule name -> index
};

}  // namespace ember::metrics
