// Streaming text with stop strings: decides which part of the generated text may
// be shown now and whether a stop string has been produced.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ember::runtime {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop_strings);

  // Adds generated text. Returns the text that can be released now: everything
  // except a tail that might still become a stop string. After a stop string has
  // been completed, stopped() is true and the text before it has been released.
  std::string push(std::string_view text);
  // Releases whatever is held back (at the end of generation without a stop).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace ember::runtime
