// Internal helpers to raise ember::Error with a formatted message.
#pragma once

#include <fmt/format.h>

#include <utility>

#include "ember/error.hpp"

namespace ember {

// Throws ember::Error(code, fmt::format(format, args...)).
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// Checks an argument precondition; throws invalid_argument naming it.
template <typename... Args>
void require(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(ErrorCode::invalid_argument, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ember
