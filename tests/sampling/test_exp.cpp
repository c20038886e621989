// ember's own exponential: accuracy, exact special values, array == scalar, and
// pinned bit patterns (the same on every platform; confirmed by the float32
// emulation in reference_sampler.py).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/catch.hpp"
#include "sampling/exp.hpp"

using ember::sampling::exp_nonpositive;
using ember::sampling::kExpCutoff;

namespace {

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// Every 1e-4 from 0 down to -80, plus the cutoff's neighbourhood.
std::vector<float> grid() {
  std::vector<float> xs;
  for (int i = 0; i <= 800000; ++i) xs.push_back(static_cast<float>(-i * 1e-4));
  return xs;
}

}  // namespace

TEST_CASE("exp_nonpositive is within 2e-7 of exp", "[sampling][exp]") {
  double worst = 0.0;
  float worst_at = 0.0f;
  for (const float x : grid()) {
    const double reference = std::exp(static_cast<double>(x));
    const double error = std::abs(exp_nonpositive(x) - reference) / reference;
    if (error > worst) {
      worst = error;
      worst_at = x;
    }
  }
  INFO("largest relative error " << worst << " at x = " << worst_at);
  CHECK(worst < 2e-7);
}

TEST_CASE("exp_nonpositive special values", "[sampling][exp]") {
  CHECK(exp_nonpositive(0.0f) == 1.0f);  // the best candidate's weight is exactly 1
  CHECK(exp_nonpositive(-0.0f) == 1.0f);
  CHECK(exp_nonpositive(kExpCutoff) > 0.0f);
  CHECK(exp_nonpositive(std::nextafter(kExpCutoff, -1000.0f)) == 0.0f);
  CHECK(exp_nonpositive(-1000.0f) == 0.0f);
  CHECK(exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
  // Results are normal floats (immune to flush-to-zero) down to the cutoff.
  CHECK(exp_nonpositive(kExpCutoff) >= std::numeric_limits<float>::min());
}

TEST_CASE("exp_nonpositive gives pinned bit patterns", "[sampling][exp]") {
  // A change here changes sampled tokens for existing seeds.
  CHECK(bits_of(exp_nonpositive(-1.0f)) == bits_of(0x1.78b564p-2f));
  CHECK(bits_of(exp_nonpositive(-80.0f)) == bits_of(0x1.7fd974p-116f));
}

TEST_CASE("exp_nonpositive: the array form equals the scalar form bit for bit", "[sampling][exp]") {
  std::vector<float> xs = grid();
  xs.push_back(-std::numeric_limits<float>::infinity());
  xs.push_back(-85.0f);
  // Odd lengths exercise the vector loop's tail.
  for (const size_t length : {xs.size(), size_t{1}, size_t{7}, size_t{33}}) {
    std::vector<float> values(xs.begin(), xs.begin() + static_cast<long>(length));
    exp_nonpositive(values);
    size_t mismatches = 0;
    for (size_t i = 0; i < length; ++i) mismatches += bits_of(values[i]) != bits_of(exp_nonpositive(xs[i]));
    INFO("length " << length);
    CHECK(mismatches == 0);
  }
}
