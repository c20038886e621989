#include "ember/error.hpp"

#include "ember/version.hpp"

namespace ember {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::io: return "io";
    case ErrorCode::malformed_file: return "malformed_file";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::cache_full: return "cache_full";
    case ErrorCode::backend: return "backend";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

const char* version_string() noexcept { return EMBER_VERSION_STRING; }
int api_version() noexcept { return EMBER_API_VERSION; }

}  // namespace ember
