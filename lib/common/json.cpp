// JSON reader (json.hpp): a recursive-descent parser over the text, depth-limited.
#include "common/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/fail.hpp"

namespace ember::json {

namespace {

constexpr int kMaxDepth = 512;

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return "a boolean";
    case Value::Kind::integer: return "an integer";
    case Value::Kind::number: return "a number";
    case Value::Kind::string: return "a string";
    case Value::Kind::array: return "an array";
    case Value::Kind::object: return "an object";
  }
  return "?";
}

[[noreturn]] void wrong_kind(std::string_view what, const char* wanted, Value::Kind got) {
  fail(ErrorCode::malformed_file, "{}: expected {}, found {}", what, wanted, kind_name(got));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  Value document() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(std::string_view why) const {
    fail(ErrorCode::malformed_file, "{}: invalid JSON at byte {}: {}", what_, pos_, why);
  }

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) error("nested more than 512 levels deep");
    if (pos_ >= s_.size()) error("unexpected end of text");
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Value::make_string(string());
    if (literal("true")) return Value::make_bool(true);
    if (literal("false")) return Value::make_bool(false);
    if (literal("null")) return Value();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    error("expected a value");
  }

  Value object(int depth) {
    ++pos_;   // '{'
    Object members;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Value::make_object(std::move(members));
    }
    for (;;) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a member name");
      std::string key = string();
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ':') error("expected ':'");
      ++pos_;
      skip_space();
      Value v = value(depth + 1);
      members.emplace_back(std::move(key), std::move(v));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return Value::make_object(std::move(members));
      }
      error("expected ',' or '}'");
    }
  }

  Value array(int depth) {
    ++pos_;   // '['
    Array items;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Value::make_array(std::move(items));
    }
    for (;;) {
      skip_space();
      items.push_back(value(depth + 1));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return Value::make_array(std::move(items));
      }
      error("expected ',' or ']'");
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else error("bad hex digit in a \\u escape");
    }
    return v;
  }

  // One UTF-8 sequence starting at pos_ (a lead byte >= 0x80), copied to out when valid.
  void utf8_sequence(std::string& out) {
    const auto b0 = uint8_t(s_[pos_]);
    int n = 0;
    uint32_t cp = 0, min = 0;
    if ((b0 & 0xE0) == 0xC0) n = 1, cp = b0 & 0x1F, min = 0x80;
    else if ((b0 & 0xF0) == 0xE0) n = 2, cp = b0 & 0x0F, min = 0x800;
    else if ((b0 & 0xF8) == 0xF0) n = 3, cp = b0 & 0x07, min = 0x10000;
    else error("invalid UTF-8");
    if (pos_ + size_t(n) >= s_.size()) error("truncated UTF-8");
    for (int i = 1; i <= n; ++i) {
      const auto b = uint8_t(s_[pos_ + size_t(i)]);
      if ((b & 0xC0) != 0x80) error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) error("invalid UTF-8");
    out.append(s_.substr(pos_, size_t(n) + 1));
    pos_ += size_t(n) + 1;
  }

  std::string string() {
    ++pos_;   // '"'
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (uint8_t(c) < 0x20) error("control character in a string");
      if (uint8_t(c) >= 0x80) {
        utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (++pos_ >= s_.size()) error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) error("unpaired low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") error("unpaired high surrogate");
            pos_ += 2;
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) error("unpaired high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: error("unknown escape");
      }
    }
  }

  Value number() {
    const size_t start = pos_;
    bool integer = true;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) error("bad number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integer = false;
      ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) error("bad number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integer = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) error("bad number");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    const std::string_view text = s_.substr(start, pos_ - start);
    if (integer) {
      int64_t v = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return Value::make_integer(v);
    }
    // strtod, not from_chars: std::from_chars(double) may be missing from older libraries.
    const std::string copy(text);
    char* end = nullptr;
    const double d = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size()) error("bad number");
    return Value::make_number(d);
  }

  std::string_view s_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

Value Value::make_bool(bool v) {
  Value r;
  r.kind_ = Kind::boolean;
  r.bool_ = v;
  return r;
}
Value Value::make_integer(int64_t v) {
  Value r;
  r.kind_ = Kind::integer;
  r.int_ = v;
  r.number_ = double(v);
  return r;
}
Value Value::make_number(double v) {
  Value r;
  r.kind_ = Kind::number;
  r.number_ = v;
  return r;
}
Value Value::make_string(std::string v) {
  Value r;
  r.kind_ = Kind::string;
  r.string_ = std::make_shared<const std::string>(std::move(v));
  return r;
}
Value Value::make_array(Array v) {
  Value r;
  r.kind_ = Kind::array;
  r.array_ = std::make_shared<const Array>(std::move(v));
  return r;
}
Value Value::make_object(Object v) {
  Value r;
  r.kind_ = Kind::object;
  r.object_ = std::make_shared<const Object>(std::move(v));
  return r;
}

bool Value::as_bool(std::string_view what) const {
  if (kind_ != Kind::boolean) wrong_kind(what, "a boolean", kind_);
  return bool_;
}
int64_t Value::as_int(std::string_view what) const {
  if (kind_ != Kind::integer) wrong_kind(what, "an integer", kind_);
  return int_;
}
double Value::as_double(std::string_view what) const {
  if (!is_number()) wrong_kind(what, "a number", kind_);
  return number_;
}
const std::string& Value::as_string(std::string_view what) const {
  if (kind_ != Kind::string) wrong_kind(what, "a string", kind_);
  return *string_;
}
const Array& Value::as_array(std::string_view what) const {
  if (kind_ != Kind::array) wrong_kind(what, "an array", kind_);
  return *array_;
}
const Object& Value::as_object(std::string_view what) const {
  if (kind_ != Kind::object) wrong_kind(what, "an object", kind_);
  return *object_;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  const Value* found = nullptr;
  for (const auto& [name, v] : *object_)
    if (name == key) found = &v;
  return found;
}

Value parse(std::string_view text, std::string_view what) { return Parser(text, what).document(); }

Value parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::io, "cannot open '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::io, "cannot read '{}'", path);
  return parse(text.str(), path);
}

}  // namespace ember::json
