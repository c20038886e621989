// Metadata values: every type written by gguf::Writer and read back by gguf::File,
// including nested arrays, plus the typed accessors and their errors.
#include <cmath>
#include <limits>

#include "gguf_test_util.hpp"

using namespace ember;
using namespace ember::gguf;
using ember::test::require_error;

namespace {

Value u(ValueType t, uint64_t v) { return Value::make_uint(t, v); }
Value i(ValueType t, int64_t v) { return Value::make_int(t, v); }
Value f(ValueType t, double v) { return Value::make_float(t, v); }
Value s(std::string_view v) { return Value::make_string(v); }
Value arr(ValueType t, std::vector<Value> items) { return Value::make_array(Array{t, std::move(items)}); }

// One entry per scalar type at its extremes, strings with awkward bytes, and
// arrays: of every scalar type, empty, of strings, of arrays (mixed inner types,
// three levels deep, empty inner arrays).
std::vector<KeyValue> every_value_kind() {
  static const std::string kWithNul("a\0b", 3);
  std::vector<KeyValue> kvs = {
      {"t.u8", u(ValueType::u8, 255)},
      {"t.i8", i(ValueType::i8, -128)},
      {"t.u16", u(ValueType::u16, 65535)},
      {"t.i16", i(ValueType::i16, -32768)},
      {"t.u32", u(ValueType::u32, 4294967295u)},
      {"t.i32", i(ValueType::i32, std::numeric_limits<int32_t>::min())},
      {"t.u64", u(ValueType::u64, std::numeric_limits<uint64_t>::max())},
      {"t.i64", i(ValueType::i64, std::numeric_limits<int64_t>::min())},
      {"t.f32", f(ValueType::f32, -1.5e-7)},
      {"t.f32_inf", f(ValueType::f32, -std::numeric_limits<double>::infinity())},
      {"t.f64", f(ValueType::f64, 3.141592653589793)},
      {"t.f64_denorm", f(ValueType::f64, std::numeric_limits<double>::denorm_min())},
      {"t.bool_true", Value::make_bool(true)},
      {"t.bool_false", Value::make_bool(false)},
      {"t.string", s("h\xc3\xa9llo \xe2\x96\x81world")},
      {"t.string_empty", s("")},
      {"t.string_nul", s(kWithNul)},
      {"t.arr_u8", arr(ValueType::u8, {u(ValueType::u8, 0), u(ValueType::u8, 7), u(ValueType::u8, 255)})},
      {"t.arr_i8", arr(ValueType::i8, {i(ValueType::i8, -1), i(ValueType::i8, 127)})},
      {"t.arr_u16", arr(ValueType::u16, {u(ValueType::u16, 1), u(ValueType::u16, 65535)})},
      {"t.arr_i16", arr(ValueType::i16, {i(ValueType::i16, -300)})},
      {"t.arr_u32", arr(ValueType::u32, {u(ValueType::u32, 70000)})},
      {"t.arr_i32", arr(ValueType::i32, {i(ValueType::i32, -70000), i(ValueType::i32, 5)})},
      {"t.arr_u64", arr(ValueType::u64, {u(ValueType::u64, uint64_t(1) << 40)})},
      {"t.arr_i64", arr(ValueType::i64, {i(ValueType::i64, -(int64_t(1) << 40))})},
      {"t.arr_f32", arr(ValueType::f32, {f(ValueType::f32, 0.25), f(ValueType::f32, -0.0)})},
      {"t.arr_f64", arr(ValueType::f64, {f(ValueType::f64, 1e300)})},
      {"t.arr_bool", arr(ValueType::boolean, {Value::make_bool(true), Value::make_bool(false)})},
      {"t.arr_string", arr(ValueType::string, {s("x"), s(""), s("yz")})},
      {"t.arr_empty", arr(ValueType::f32, {})},
      {"t.arr_nested",
       arr(ValueType::array, {arr(ValueType::i32, {i(ValueType::i32, 1), i(ValueType::i32, 2)}),
                              arr(ValueType::string, {s("inner")}), arr(ValueType::u8, {})})},
      {"t.arr_deep",
       arr(ValueType::array, {arr(ValueType::array, {arr(ValueType::f64, {f(ValueType::f64, 2.5)})})})},
      {"t.arr_of_empty", arr(ValueType::array, {arr(ValueType::boolean, {}), arr(ValueType::i64, {})})},
  };
  return kvs;
}

}  // namespace

TEST_CASE("gguf: every metadata value type round-trips through the writer", "[gguf][values]") {
  const std::vector<KeyValue> kvs = every_value_kind();
  Writer w;
  for (const KeyValue& kv : kvs) w.add(kv.key, kv.value);
  const File file = File::from_bytes(w.to_bytes(), "values.gguf");

  CHECK(file.version() == 3);
  CHECK(file.tensors().empty());
  REQUIRE(file.metadata().size() == kvs.size());
  for (size_t k = 0; k < kvs.size(); ++k) {
    INFO("key " << kvs[k].key);
    CHECK(file.metadata()[k].key == kvs[k].key);   // file order kept
    CHECK(file.metadata()[k].value.type() == kvs[k].value.type());
    CHECK(file.metadata()[k].value == kvs[k].value);
  }

  // Spot checks through the typed accessors, independent of operator==.
  CHECK(file.get_uint("t.u8") == 255);
  CHECK(file.get_int("t.i8") == -128);
  CHECK(file.get_uint("t.u32") == 4294967295u);
  CHECK(file.get_int("t.i32") == std::numeric_limits<int32_t>::min());
  CHECK(file.get_uint("t.u64") == std::numeric_limits<uint64_t>::max());
  CHECK(file.get_int("t.i64") == std::numeric_limits<int64_t>::min());
  CHECK(file.get_float("t.f32") == double(-1.5e-7f));
  CHECK(std::isinf(file.get_float("t.f32_inf")));
  CHECK(file.get_float("t.f64") == 3.141592653589793);
  CHECK(file.get_float("t.f64_denorm") == std::numeric_limits<double>::denorm_min());
  CHECK(file.get_bool_or("t.bool_true", false) == true);
  CHECK(file.get_bool_or("t.bool_false", true) == false);
  CHECK(file.get_string("t.string") == "h\xc3\xa9llo \xe2\x96\x81world");
  CHECK(file.get_string("t.string_nul") == std::string_view("a\0b", 3));
  CHECK(file.get_string("t.string_empty").empty());

  const Array& strings = file.get_array("t.arr_string");
  CHECK(strings.element_type == ValueType::string);
  REQUIRE(strings.items.size() == 3);
  CHECK(strings.items[2].as_string() == "yz");

  const Array& nested = file.get_array("t.arr_nested");
  CHECK(nested.element_type == ValueType::array);
  REQUIRE(nested.items.size() == 3);
  CHECK(nested.items[0].as_array().element_type == ValueType::i32);
  CHECK(nested.items[0].as_array().items[1].as_int() == 2);
  CHECK(nested.items[1].as_array().items[0].as_string() == "inner");
  CHECK(nested.items[2].as_array().items.empty());

  const Array& deep = file.get_array("t.arr_deep");
  CHECK(deep.items[0].as_array().items[0].as_array().items[0].as_float() == 2.5);

  // Strings are views into the file image (zero-copy).
  const std::string_view tokens = file.get_string("t.string");
  const auto* base = reinterpret_cast<const char*>(file.bytes().data());
  CHECK(tokens.data() >= base);
  CHECK(tokens.data() + tokens.size() <= base + file.file_size());
}

TEST_CASE("gguf: the writer's convenience adders", "[gguf][values]") {
  Writer w;
  w.add_uint32("a.u32", 7);
  w.add_float32("a.f32", 0.125f);
  w.add_bool("a.bool", true);
  {
    std::string temporary = "temporary";   // the writer keeps its own copy
    w.add_string("a.string", temporary);
    temporary.assign("overwritten");
  }
  w.add_string_array("a.strings", {"one", "two"});
  w.add_float32_array("a.floats", {1.0f, -2.5f});
  w.add_int32_array("a.ints", {-1, 2147483647});
  const File file = File::from_bytes(w.to_bytes());

  CHECK(file.get("a.u32").type() == ValueType::u32);
  CHECK(file.get_uint("a.u32") == 7);
  CHECK(file.get("a.f32").type() == ValueType::f32);
  CHECK(file.get_float("a.f32") == 0.125);
  CHECK(file.get_bool_or("a.bool", false));
  CHECK(file.get_string("a.string") == "temporary");
  CHECK(file.get_array("a.strings").items[1].as_string() == "two");
  CHECK(file.get_array("a.floats").element_type == ValueType::f32);
  CHECK(file.get_array("a.floats").items[1].as_float() == -2.5);
  CHECK(file.get_array("a.ints").element_type == ValueType::i32);
  CHECK(file.get_array("a.ints").items[0].as_int() == -1);
  CHECK(file.get_array("a.ints").items[1].as_int() == 2147483647);
}

TEST_CASE("gguf: lookups of absent keys and the *_or fallbacks", "[gguf][values]") {
  Writer w;
  w.add_uint32("present", 3);
  w.add_string("name", "x");
  const File file = File::from_bytes(w.to_bytes(), "lookup.gguf");

  CHECK(file.find("absent") == nullptr);
  CHECK(file.find("present") != nullptr);
  CHECK(file.get_uint_or("absent", 42) == 42);
  CHECK(file.get_uint_or("present", 42) == 3);
  CHECK(file.get_int_or("absent", -5) == -5);
  CHECK(file.get_float_or("absent", 0.5) == 0.5);
  CHECK(file.get_float_or("present", 0.5) == 3.0);   // integers convert to float
  CHECK(file.get_bool_or("absent", true));
  CHECK(!file.find_string("absent").has_value());
  CHECK(file.find_string("name").value() == "x");

  require_error([&] { file.get("general.architecture"); }, ErrorCode::malformed_file,
                {"missing required metadata key 'general.architecture'", "lookup.gguf"});
  require_error([&] { file.get_uint("llama.block_count"); }, ErrorCode::malformed_file,
                {"missing required metadata key 'llama.block_count'"});
  // Present with the wrong type: the *_or variants still throw.
  require_error([&] { file.get_uint_or("name", 1); }, ErrorCode::malformed_file, {"'name'", "string"});
  require_error([&] { file.get_string("present"); }, ErrorCode::malformed_file, {"'present'", "u32"});
  require_error([&] { file.get_array("present"); }, ErrorCode::malformed_file, {"'present'", "array"});
}

TEST_CASE("gguf: Value accessors check types and ranges", "[gguf][values]") {
  const Value neg = Value::make_int(ValueType::i32, -3);
  CHECK(neg.is_integer());
  CHECK(neg.as_int() == -3);
  CHECK(neg.as_float() == -3.0);
  require_error([&] { neg.as_uint("k.neg"); }, ErrorCode::malformed_file, {"k.neg", "-3"});

  const Value big = Value::make_uint(ValueType::u64, std::numeric_limits<uint64_t>::max());
  CHECK(big.as_uint() == std::numeric_limits<uint64_t>::max());
  require_error([&] { big.as_int("k.big"); }, ErrorCode::malformed_file, {"k.big", "18446744073709551615"});

  const Value flag = Value::make_bool(true);
  CHECK(!flag.is_integer());
  require_error([&] { flag.as_uint("k.flag"); }, ErrorCode::malformed_file, {"k.flag", "bool"});
  require_error([&] { Value::make_uint(ValueType::u8, 1).as_bool("k.u8"); }, ErrorCode::malformed_file,
                {"k.u8", "u8"});
  require_error([&] { Value::make_string("x").as_float("k.str"); }, ErrorCode::malformed_file, {"k.str", "string"});

  const Value f32 = Value::make_float(ValueType::f32, 0.1);
  CHECK(f32.is_float());
  CHECK(f32.as_float() == double(0.1f));   // stored as the float that will be written
  require_error([&] { f32.as_int("k.f"); }, ErrorCode::malformed_file, {"k.f", "f32"});

  // Constructors reject values that do not fit the type.
  require_error([] { Value::make_uint(ValueType::u8, 256); }, ErrorCode::invalid_argument, {"256", "u8"});
  require_error([] { Value::make_int(ValueType::i16, 40000); }, ErrorCode::invalid_argument, {"40000", "i16"});
  require_error([] { Value::make_int(ValueType::u32, -1); }, ErrorCode::invalid_argument, {"-1", "u32"});
  require_error([] { Value::make_uint(ValueType::string, 1); }, ErrorCode::invalid_argument, {"string"});
  require_error([] { Value::make_float(ValueType::i32, 1.0); }, ErrorCode::invalid_argument, {"i32"});
  CHECK(Value::make_uint(ValueType::i8, 127).as_int() == 127);

  // Equality is by type and payload.
  CHECK(Value::make_uint(ValueType::u32, 1) != Value::make_uint(ValueType::u64, 1));
  CHECK(Value::make_string("a") == Value::make_string(std::string("a")));
  CHECK(Value::make_array(Array{ValueType::u8, {Value::make_uint(ValueType::u8, 1)}}) !=
        Value::make_array(Array{ValueType::u8, {Value::make_uint(ValueType::u8, 2)}}));
  CHECK(value_type_name(ValueType::boolean) == "bool");
  CHECK(value_type_name(ValueType::f64) == "f64");
}

TEST_CASE("gguf: writer rejects inconsistent metadata", "[gguf][values]") {
  Writer w;
  w.add_uint32("dup", 1);
  require_error([&] { w.add_uint32("dup", 2); }, ErrorCode::invalid_argument, {"duplicate metadata key 'dup'"});

  Writer mixed;
  mixed.add("mixed", Value::make_array(Array{ValueType::u8, {Value::make_uint(ValueType::u8, 1),
                                                             Value::make_uint(ValueType::u16, 2)}}));
  require_error([&] { mixed.to_bytes(); }, ErrorCode::invalid_argument, {"mixed[1]", "u16", "u8"});

  require_error([] { Writer(48); }, ErrorCode::invalid_argument, {"48"});
  require_error([] { Writer(0); }, ErrorCode::invalid_argument, {"alignment 0"});
}
