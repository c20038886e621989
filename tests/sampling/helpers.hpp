// Shared helpers of the sampling tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "ember/error.hpp"
#include "sampling/candidates.hpp"

namespace ember::test {

// Candidates from a logits row, as the sampler builds them (id order, -inf dropped).
inline sampling::Candidates candidates_of(const std::vector<float>& logits) {
  sampling::Candidates c;
  sampling::fill_candidates(logits, c);
  return c;
}

// The token ids of the candidates, in their current order.
inline std::vector<int32_t> ids_of(const sampling::Candidates& c) {
  std::vector<int32_t> ids;
  for (const sampling::Candidate& candidate : c.items) ids.push_back(candidate.id);
  return ids;
}

// Natural logarithms of probabilities, as float logits.
inline std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Runs `call` and checks that it throws ember::Error(invalid_argument) whose
// message contains `needle` (the parameter's name).
template <typename Call>
void expect_invalid(Call&& call, const std::string& needle) {
  try {
    call();
    FAIL("expected ember::Error(invalid_argument) mentioning '" << needle << "', nothing was thrown");
  } catch (const ember::Error& error) {
    INFO("message: " << error.what());
    CHECK(error.code() == ember::ErrorCode::invalid_argument);
    CHECK_THAT(std::string(error.what()), Catch::Matchers::Contains(needle));
  }
}

}  // namespace ember::test
