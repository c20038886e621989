#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <array>

namespace ember::tok::unicode {

namespace {

ClassByte lookup_runs(uint32_t cp) {
  // The last run whose first codepoint is <= cp.
  const uint32_t key = (cp << 8) | 0xFF;
  const uint32_t* begin = detail::kClassRuns;
  const uint32_t* end = detail::kClassRuns + detail::kClassRunCount;
  const uint32_t* it = std::upper_bound(begin, end, key);
  return static_cast<ClassByte>(*(it - 1) & 0xFF);   // the first run starts at U+0000
}

// Most text is ASCII; keep its classes in a small table.
const std::array<ClassByte, 128>& ascii_classes() {
  static const std::array<ClassByte, 128> table = [] {
    std::array<ClassByte, 128> t{};
    for (uint32_t cp = 0; cp < 128; ++cp) t[cp] = lookup_runs(cp);
    return t;
  }();
  return table;
}

}  // namespace

ClassByte class_of(uint32_t cp) {
  if (cp < 128) return ascii_classes()[cp];
  if (cp > kMaxCodepoint) return static_cast<ClassByte>(Category::undefined);
  return lookup_runs(cp);
}

std::string_view unicode_version() { return detail::kUnicodeVersion; }

Decoded decode(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  uint32_t n_continuation = 0;
  uint32_t cp = 0;
  if ((lead & 0xE0) == 0xC0) {
    n_continuation = 1;
    cp = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    n_continuation = 2;
    cp = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    n_continuation = 3;
    cp = lead & 0x07;
  } else {
    return {kReplacementChar, 1};   // a continuation byte, or 0xF8..0xFF
  }
  if (pos + n_continuation >= text.size()) return {kReplacementChar, 1};   // truncated at the end
  for (uint32_t i = 1; i <= n_continuation; ++i) {
    const uint8_t b = byte(pos + i);
    if (!is_continuation(b)) return {kReplacementChar, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp > kMaxCodepoint) return {kReplacementChar, 1};
  return {cp, n_continuation + 1};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_codepoints(std::string_view text, std::vector<uint32_t>& out) {
  for (size_t pos = 0; pos < text.size();) {
    const Decoded d = decode(text, pos);
    out.push_back(d.cp);
    pos += d.size;
  }
}

size_t incomplete_suffix_length(std::string_view bytes) {
  // Walk back over at most three continuation bytes to the lead byte.
  size_t n_continuation = 0;
  size_t i = bytes.size();
  while (i > 0 && n_continuation < 3 && is_continuation(static_cast<uint8_t>(bytes[i - 1]))) {
    --i;
    ++n_continuation;
  }
  if (i == 0) return 0;
  const uint8_t lead = static_cast<uint8_t>(bytes[i - 1]);
  size_t expected = 0;
  if ((lead & 0xE0) == 0xC0) {
    expected = 2;
  } else if ((lead & 0xF0) == 0xE0) {
    expected = 3;
  } else if ((lead & 0xF8) == 0xF0) {
    expected = 4;
  } else {
    return 0;   // ASCII or an invalid lead: nothing to wait for
  }
  const size_t have = n_continuation + 1;
  return have < expected ? have : 0;
}

}  // namespace ember::tok::unicode
