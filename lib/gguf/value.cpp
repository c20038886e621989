#include <bit>
#include <limits>

#include "common/fail.hpp"
#include "gguf/gguf.hpp"

namespace ember::gguf {
namespace {

bool is_unsigned_type(ValueType t) {
  return t == ValueType::u8 || t == ValueType::u16 || t == ValueType::u32 || t == ValueType::u64;
}
bool is_signed_type(ValueType t) {
  return t == ValueType::i8 || t == ValueType::i16 || t == ValueType::i32 || t == ValueType::i64;
}

// Range of each integer type, for the make_* checks.
uint64_t unsigned_max(ValueType t) {
  switch (t) {
    case ValueType::u8: return std::numeric_limits<uint8_t>::max();
    case ValueType::u16: return std::numeric_limits<uint16_t>::max();
    case ValueType::u32: return std::numeric_limits<uint32_t>::max();
    case ValueType::i8: return std::numeric_limits<int8_t>::max();
    case ValueType::i16: return std::numeric_limits<int16_t>::max();
    case ValueType::i32: return std::numeric_limits<int32_t>::max();
    case ValueType::i64: return std::numeric_limits<int64_t>::max();
    default: return std::numeric_limits<uint64_t>::max();
  }
}
int64_t signed_min(ValueType t) {
  switch (t) {
    case ValueType::i8: return std::numeric_limits<int8_t>::min();
    case ValueType::i16: return std::numeric_limits<int16_t>::min();
    case ValueType::i32: return std::numeric_limits<int32_t>::min();
    case ValueType::i64: return std::numeric_limits<int64_t>::min();
    default: return 0;
  }
}

[[noreturn]] void wrong_type(std::string_view what, ValueType found, std::string_view expected) {
  fail(ErrorCode::malformed_file, "'{}' has type {}, expected {}", what, value_type_name(found), expected);
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

// Integers are kept in `bits_` as their 64-bit value: zero-extended for unsigned
// types, two's-complement sign-extended for signed ones.
Value Value::make_uint(ValueType type, uint64_t v) {
  require(is_unsigned_type(type) || is_signed_type(type), "make_uint: {} is not an integer type",
          value_type_name(type));
  require(v <= unsigned_max(type), "make_uint: {} does not fit in {}", v, value_type_name(type));
  Value out;
  out.type_ = type;
  out.bits_ = v;
  return out;
}

Value Value::make_int(ValueType type, int64_t v) {
  require(is_unsigned_type(type) || is_signed_type(type), "make_int: {} is not an integer type",
          value_type_name(type));
  require(v >= signed_min(type) && (v < 0 || uint64_t(v) <= unsigned_max(type)), "make_int: {} does not fit in {}", v,
          value_type_name(type));
  Value out;
  out.type_ = type;
  out.bits_ = uint64_t(v);
  return out;
}

// f32 values are rounded to float here, so what is stored is exactly what gets written.
Value Value::make_float(ValueType type, double v) {
  require(type == ValueType::f32 || type == ValueType::f64, "make_float: {} is not a float type",
          value_type_name(type));
  Value out;
  out.type_ = type;
  out.bits_ = std::bit_cast<uint64_t>(type == ValueType::f32 ? double(float(v)) : v);
  return out;
}

Value Value::make_bool(bool v) {
  Value out;
  out.type_ = ValueType::boolean;
  out.bits_ = v ? 1 : 0;
  return out;
}

Value Value::make_string(std::string_view v) {
  Value out;
  out.type_ = ValueType::string;
  out.string_ = v;
  return out;
}

Value Value::make_array(Array v) {
  Value out;
  out.type_ = ValueType::array;
  out.array_ = std::make_shared<const Array>(std::move(v));
  return out;
}

bool Value::is_integer() const { return is_unsigned_type(type_) || is_signed_type(type_); }
bool Value::is_float() const { return type_ == ValueType::f32 || type_ == ValueType::f64; }

uint64_t Value::as_uint(std::string_view what) const {
  if (!is_integer()) wrong_type(what, type_, "an unsigned integer");
  if (is_signed_type(type_) && int64_t(bits_) < 0)
    fail(ErrorCode::malformed_file, "'{}' is {}, expected a non-negative integer", what, int64_t(bits_));
  return bits_;
}

int64_t Value::as_int(std::string_view what) const {
  if (!is_integer()) wrong_type(what, type_, "an integer");
  if (type_ == ValueType::u64 && bits_ > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(ErrorCode::malformed_file, "'{}' is {}, which does not fit in a signed 64-bit integer", what, bits_);
  return int64_t(bits_);
}

double Value::as_float(std::string_view what) const {
  if (is_float()) return std::bit_cast<double>(bits_);
  if (is_unsigned_type(type_)) return double(bits_);
  if (is_signed_type(type_)) return double(int64_t(bits_));
  wrong_type(what, type_, "a number");
}

bool Value::as_bool(std::string_view what) const {
  if (type_ != ValueType::boolean) wrong_type(what, type_, "bool");
  return bits_ != 0;
}

std::string_view Value::as_string(std::string_view what) const {
  if (type_ != ValueType::string) wrong_type(what, type_, "string");
  return string_;
}

const Array& Value::as_array(std::string_view what) const {
  if (type_ != ValueType::array) wrong_type(what, type_, "array");
  return *array_;
}

bool Value::operator==(const Value& other) const {
  if (type_ != other.type_) return false;
  if (type_ == ValueType::string) return string_ == other.string_;
  if (type_ == ValueType::array) return array_ == other.array_ || *array_ == *other.array_;
  return bits_ == other.bits_;
}

bool Array::operator==(const Array& other) const {
  return element_type == other.element_type && items == other.items;
}

}  // namespace ember::gguf
