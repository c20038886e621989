// Checks that a call throws ember::Error with the given code and a message naming the cause.
#pragma once

#include <functional>
#include <string>

#include "common/catch.hpp"
#include "ember/error.hpp"

namespace ember::test {

inline void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    FAIL("no error for " << needle);
  } catch (const Error& e) {
    CHECK(e.code() == code);
    CHECK_THAT(e.what(), Catch::Matchers::Contains(needle));
  }
}

}  // namespace ember::test
