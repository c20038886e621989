// Routes log messages to the host's callback; silent without one.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

#include "ember/log.hpp"

namespace ember::runtime {

class Logger {
 public:
  Logger() = default;
  explicit Logger(LogCallback callback) : callback_(std::move(callback)) {}

  template <typename... Args>
  void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) const {
    if (!callback_) return;
    const std::string message = fmt::format(format, std::forward<Args>(args)...);
    try {
      callback_(level, message);
    } catch (...) {
      // A throwing log callback must not break inference.
    }
  }
  template <typename... Args>
  void info(fmt::format_string<Args...> format, Args&&... args) const {
    log(LogLevel::info, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void debug(fmt::format_string<Args...> format, Args&&... args) const {
    log(LogLevel::debug, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warning(fmt::format_string<Args...> format, Args&&... args) const {
    log(LogLevel::warning, format, std::forward<Args>(args)...);
  }

 private:
  LogCallback callback_;
};

}  // namespace ember::runtime
