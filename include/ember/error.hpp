// ember::Error: the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "ember/export.hpp"

namespace ember {

// What went wrong, coarse enough for a host to branch on.
enum class ErrorCode {
  invalid_argument,  // a parameter is out of range or inconsistent
  io,                // a file could not be opened, read or mapped
  malformed_file,    // a GGUF (or other input file) violates its format
  unsupported,       // a valid input ember does not handle (architecture, tensor type, op on a backend)
  out_of_memory,     // an allocation on the host or a device failed
  cache_full,        // the KV cache has no room for the requested tokens
  backend,           // a device/driver error (CUDA) or backend failure
  internal,          // a broken invariant inside ember: please report it
};

// Short stable name of a code ("malformed_file", ...); a static string. Thread-safe.
EMBER_API const char* to_string(ErrorCode code) noexcept;

// Every failure of the library is reported as ember::Error. The message names the
// cause (which key, which tensor, which byte offset, which parameter). When a call
// throws, the object it was called on is left as it was before the call.
class EMBER_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace ember
