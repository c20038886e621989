// Logging: the library prints nothing itself; messages go to the host's callback.
#pragma once

#include <functional>
#include <string_view>

namespace ember {

enum class LogLevel { debug, info, warning, error };

// Receives every log message of the object it was given to. May be called from the
// thread that called into ember; must not call back into the same object.
using LogCallback = std::function<void(LogLevel level, std::string_view message)>;

}  // namespace ember
