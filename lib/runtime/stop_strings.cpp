#include "runtime/stop_strings.hpp"

#include <algorithm>

namespace ember::runtime {

StopStringFilter::StopStringFilter(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // Earliest complete stop string in the held text.
  size_t stop_at = std::string::npos;
  for (const std::string& s : stops_) stop_at = std::min(stop_at, held_.find(s));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, stop_at);
    held_.clear();
    return out;
  }
  // Longest tail of the held text that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace ember::runtime
