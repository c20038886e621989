// The sampler's generator against published reference outputs, and the
// uniform-double conversion.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/catch.hpp"
#include "sampling/rng.hpp"

using ember::sampling::Rng;
using ember::sampling::splitmix64_next;

TEST_CASE("splitmix64 matches the reference outputs for seed 0", "[sampling][rng]") {
  // First outputs of the reference SplitMix64 started from 0 (as also produced by
  // Java's SplittableRandom with the standard golden-gamma).
  uint64_t state = 0;
  CHECK(splitmix64_next(state) == 0xe220a8397b1dcdafull);
  CHECK(splitmix64_next(state) == 0x6e789e6aa1b965f4ull);
  CHECK(splitmix64_next(state) == 0x06c45d188009454full);
  CHECK(splitmix64_next(state) == 0xf88bb8a8724c81ecull);
}

TEST_CASE("xoshiro256** matches the reference outputs from state {1, 2, 3, 4}", "[sampling][rng]") {
  // Reference test vector of xoshiro256** 1.0 (first ten outputs).
  const std::vector<uint64_t> expected = {
      11520ull,
      0ull,
      1509978240ull,
      1215971899390074240ull,
      1216172134540287360ull,
      607988272756665600ull,
      16172922978634559625ull,
      8476171486693032832ull,
      10595114339597558777ull,
      2904607092377533576ull,
  };
  Rng rng = Rng::from_state({1, 2, 3, 4});
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("output " << i);
    CHECK(rng.next() == expected[i]);
  }
}

TEST_CASE("a seed expands to four consecutive splitmix64 outputs", "[sampling][rng]") {
  for (const uint64_t seed : {0ull, 42ull, ~0ull}) {
    uint64_t counter = seed;
    Rng::State expected{};
    for (uint64_t& word : expected) word = splitmix64_next(counter);
    CHECK(Rng(seed).state() == expected);
  }
  CHECK(Rng(1).state() != Rng(2).state());
}

TEST_CASE("an all-zero state is replaced, so the generator never sticks at zero", "[sampling][rng]") {
  Rng rng = Rng::from_state({0, 0, 0, 0});
  CHECK(rng.state() == Rng(0).state());
  CHECK(rng.next() != 0);
}

TEST_CASE("uniform() is the top 53 bits of next() scaled by 2^-53", "[sampling][rng]") {
  // From {1, 2, 3, 4} the first output is 11520, so the first uniform is (11520 >> 11) * 2^-53 = 5 * 2^-53.
  Rng rng = Rng::from_state({1, 2, 3, 4});
  CHECK(rng.uniform() == 5.0 * 0x1.0p-53);
  CHECK(rng.uniform() == 0.0);  // the second output is 0

  Rng a(123), b(123);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t bits = a.next();
    const double u = b.uniform();
    REQUIRE(u == static_cast<double>(bits >> 11) / 9007199254740992.0);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
}

TEST_CASE("uniform() has the mean and variance of U[0, 1)", "[sampling][rng]") {
  // n = 1e6: the standard error of the mean is sqrt(1/12 / n) = 2.9e-4 and that of the
  // variance about sqrt(1/180 / n) = 7.5e-5; the tolerances are about 5 standard errors.
  Rng rng(2024);
  const int n = 1000000;
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    sum += u;
    sum_sq += u * u;
  }
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  CHECK(std::abs(mean - 0.5) < 1.5e-3);
  CHECK(std::abs(variance - 1.0 / 12.0) < 4e-4);
}
