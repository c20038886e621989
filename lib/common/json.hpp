// A small JSON reader (RFC 8259) for the files of a Hugging Face checkpoint:
// config.json, tokenizer_config.json, tokenizer.json and the safetensors header.
//
// The whole text is parsed into a tree of Values. Objects keep their members in
// file order; find() returns the last member of a name, as Python's json module does.
// Numbers keep their text's integer value when it is an integer that fits in int64,
// and a double otherwise. Strings are UTF-8 with every escape decoded (\uXXXX pairs
// included); an unpaired surrogate or invalid UTF-8 in the input is an error.
// Nesting deeper than 512 levels is refused rather than recursed into.
//
// Errors throw ember::Error(ErrorCode::malformed_file) naming `what` (the file) and
// the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { null, boolean, integer, number, string, array, object };

  Value() = default;
  static Value make_bool(bool v);
  static Value make_integer(int64_t v);
  static Value make_number(double v);
  static Value make_string(std::string v);
  static Value make_array(Array v);
  static Value make_object(Object v);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_integer() const { return kind_ == Kind::integer; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::number; }   // integer or not
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }

  // Typed access; a wrong kind throws malformed_file naming `what`.
  bool as_bool(std::string_view what) const;
  int64_t as_int(std::string_view what) const;       // integers only
  double as_double(std::string_view what) const;     // integers and numbers
  const std::string& as_string(std::string_view what) const;
  const Array& as_array(std::string_view what) const;
  const Object& as_object(std::string_view what) const;

  // The last member named `key` of an object; nullptr when absent or not an object.
  const Value* find(std::string_view key) const;

 private:
  Kind kind_ = Kind::null;
  bool bool_ = false;
  int64_t int_ = 0;
  double number_ = 0;
  std::shared_ptr<const std::string> string_;
  std::shared_ptr<const Array> array_;
  std::shared_ptr<const Object> object_;
};

// Parses `text` (one JSON value, optional whitespace around it).
Value parse(std::string_view text, std::string_view what);

// Reads and parses a file; io error when it cannot be read.
Value parse_file(const std::string& path);

}  // namespace ember::json
