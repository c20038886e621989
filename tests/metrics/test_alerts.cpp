// AlertMonitor: one event per crossing, hysteresis on clearing (both directions,
// also for negative thresholds), min_samples gating, NaN, and rule validation.
#include <limits>
#include <optional>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "ember/error.hpp"
#include "metrics/alerts.hpp"

using namespace ember;
using namespace ember::metrics;

namespace {

AlertRule rule(std::string name, Direction direction, double threshold, double hysteresis = 0.1,
               uint64_t min_samples = 1) {
  AlertRule r;
  r.name = std::move(name);
  r.direction = direction;
  r.threshold = threshold;
  r.hysteresis = hysteresis;
  r.min_samples = min_samples;
  return r;
}

void check_event(const std::optional<AlertEvent>& e, const std::string& name, bool firing, double value,
                 double threshold) {
  REQUIRE(e.has_value());
  CHECK(e->name == name);
  CHECK(e->firing == firing);
  CHECK(e->value == value);
  CHECK(e->threshold == threshold);
}

}  // namespace

TEST_CASE("an above rule fires once and clears only below threshold*(1-h)", "[metrics][alerts]") {
  AlertMonitor m({rule("p99_ttft", Direction::above, 2.0, 0.1)});
  CHECK_FALSE(m.firing("p99_ttft"));
  CHECK_FALSE(m.observe("p99_ttft", 1.5, 10));
  CHECK_FALSE(m.observe("p99_ttft", 2.0, 10));  // at the threshold is not above it
  CHECK_FALSE(m.firing("p99_ttft"));

  check_event(m.observe("p99_ttft", 2.5, 11), "p99_ttft", true, 2.5, 2.0);
  CHECK(m.firing("p99_ttft"));
  CHECK_FALSE(m.observe("p99_ttft", 3.0, 12));  // still above: no repeat
  CHECK_FALSE(m.observe("p99_ttft", 2.5, 13));
  CHECK_FALSE(m.observe("p99_ttft", 1.9, 14));  // below threshold, inside the band [1.8, 2.0]
  CHECK_FALSE(m.observe("p99_ttft", 1.81, 15));
  CHECK(m.firing("p99_ttft"));

  check_event(m.observe("p99_ttft", 1.8, 16), "p99_ttft", false, 1.8, 2.0);  // 2.0 * (1 - 0.1)
  CHECK_FALSE(m.firing("p99_ttft"));
  CHECK_FALSE(m.observe("p99_ttft", 1.0, 17));  // already clear: no repeat
  CHECK_FALSE(m.observe("p99_ttft", 1.95, 18));  // inside the band but not firing: stays clear

  check_event(m.observe("p99_ttft", 2.01, 19), "p99_ttft", true, 2.01, 2.0);  // fires again
}

TEST_CASE("a below rule fires under the threshold and clears above threshold*(1+h)", "[metrics][alerts]") {
  AlertMonitor m({rule("tokens_per_second", Direction::below, 10.0, 0.2)});
  CHECK_FALSE(m.observe("tokens_per_second", 12.0, 1));
  CHECK_FALSE(m.observe("tokens_per_second", 10.0, 1));
  check_event(m.observe("tokens_per_second", 9.0, 1), "tokens_per_second", true, 9.0, 10.0);
  CHECK_FALSE(m.observe("tokens_per_second", 5.0, 1));
  CHECK_FALSE(m.observe("tokens_per_second", 11.9, 1));  // band [10, 12)
  CHECK(m.firing("tokens_per_second"));
  check_event(m.observe("tokens_per_second", 12.0, 1), "tokens_per_second", false, 12.0, 10.0);
  CHECK_FALSE(m.firing("tokens_per_second"));
}

TEST_CASE("hysteresis is relative to |threshold| for negative thresholds", "[metrics][alerts]") {
  AlertMonitor m({rule("up", Direction::above, -10.0, 0.1), rule("down", Direction::below, -10.0, 0.1)});
  check_event(m.observe("up", -9.5, 1), "up", true, -9.5, -10.0);
  CHECK_FALSE(m.observe("up", -10.5, 1));  // band (-11, -10]
  check_event(m.observe("up", -11.0, 1), "up", false, -11.0, -10.0);
  check_event(m.observe("down", -10.5, 1), "down", true, -10.5, -10.0);
  CHECK_FALSE(m.observe("down", -9.5, 1));  // band [-10, -9)
  check_event(m.observe("down", -9.0, 1), "down", false, -9.0, -10.0);
}

TEST_CASE("zero hysteresis clears at the threshold itself", "[metrics][alerts]") {
  AlertMonitor m({rule("q", Direction::above, 100.0, 0.0)});
  check_event(m.observe("q", 101.0, 1), "q", true, 101.0, 100.0);
  check_event(m.observe("q", 100.0, 1), "q", false, 100.0, 100.0);
}

TEST_CASE("nothing is evaluated before min_samples observations", "[metrics][alerts]") {
  AlertMonitor m({rule("p99", Direction::above, 1.0, 0.1, 100)});
  CHECK_FALSE(m.observe("p99", 50.0, 1));
  CHECK_FALSE(m.observe("p99", 50.0, 99));
  CHECK_FALSE(m.firing("p99"));
  check_event(m.observe("p99", 50.0, 100), "p99", true, 50.0, 1.0);
  // Too few samples again (a reset window): the state is kept, not cleared.
  CHECK_FALSE(m.observe("p99", 0.0, 3));
  CHECK(m.firing("p99"));
  check_event(m.observe("p99", 0.0, 100), "p99", false, 0.0, 1.0);
}

TEST_CASE("NaN values change nothing; rules are independent", "[metrics][alerts]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  AlertMonitor m({rule("a", Direction::above, 1.0), rule("b", Direction::below, 1.0)});
  CHECK_FALSE(m.observe("a", nan, 10));
  CHECK_FALSE(m.firing("a"));
  check_event(m.observe("a", 2.0, 10), "a", true, 2.0, 1.0);
  CHECK_FALSE(m.observe("a", nan, 10));
  CHECK(m.firing("a"));
  CHECK_FALSE(m.firing("b"));
  check_event(m.observe("b", 0.5, 10), "b", true, 0.5, 1.0);
  // Infinities are ordinary values.
  CHECK_FALSE(m.observe("a", std::numeric_limits<double>::infinity(), 10));
  check_event(m.observe("a", -std::numeric_limits<double>::infinity(), 10), "a", false,
              -std::numeric_limits<double>::infinity(), 1.0);
  REQUIRE(m.rules().size() == 2);
  CHECK(m.rules()[0].name == "a");
  CHECK(m.rules()[1].direction == Direction::below);
  CHECK(m.rules()[1].hysteresis == 0.1);
  CHECK(m.rules()[1].min_samples == 1);
}

TEST_CASE("unknown rule names and invalid rules throw invalid_argument", "[metrics][alerts]") {
  AlertMonitor m({rule("known", Direction::above, 1.0)});
  test::expect_error([&] { m.observe("unknown_rule", 1.0, 1); }, ErrorCode::invalid_argument,
                     "no alert rule named \"unknown_rule\"");
  test::expect_error([&] { (void)m.firing("other"); }, ErrorCode::invalid_argument, "no alert rule named \"other\"");

  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto expect = [](std::vector<AlertRule> rules, const std::string& needle) {
    test::expect_error([&] { AlertMonitor bad(rules); }, ErrorCode::invalid_argument, needle);
  };
  expect({rule("r", Direction::above, inf)}, "alert rule \"r\": threshold inf");
  expect({rule("r", Direction::above, nan)}, "alert rule \"r\": threshold nan");
  expect({rule("r", Direction::above, 1.0, 1.0)}, "alert rule \"r\": hysteresis 1");
  expect({rule("r", Direction::above, 1.0, -0.1)}, "alert rule \"r\": hysteresis -0.1");
  expect({rule("r", Direction::above, 1.0, nan)}, "alert rule \"r\": hysteresis nan");
  expect({rule("r", Direction::above, 1.0), rule("r", Direction::below, 2.0)}, "alert rule \"r\" appears twice");
  expect({rule("", Direction::above, 1.0)}, "alert rule 0 has an empty name");
  CHECK_NOTHROW(AlertMonitor(std::vector<AlertRule>{}));
}
