// Writes a few small, valid GGUF files into a directory, as a seed corpus for
// fuzz_gguf: every value type, nested arrays, every tensor type, an alignment key.
#include <cstdio>
#include <filesystem>
#include <string>

#include "ember/error.hpp"
#include "gguf/gguf.hpp"

using namespace ember::gguf;

namespace {

std::vector<std::byte> filler(size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte(uint8_t(i * 37 + 11));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  try {
    Writer values;
    values.add_string("general.architecture", "llama");
    values.add("u8", Value::make_uint(ValueType::u8, 200));
    values.add("i8", Value::make_int(ValueType::i8, -5));
    values.add("u16", Value::make_uint(ValueType::u16, 60000));
    values.add("i16", Value::make_int(ValueType::i16, -600));
    values.add("u32", Value::make_uint(ValueType::u32, 7));
    values.add("i32", Value::make_int(ValueType::i32, -7));
    values.add("u64", Value::make_uint(ValueType::u64, 1ull << 40));
    values.add("i64", Value::make_int(ValueType::i64, -(1ll << 40)));
    values.add("f64", Value::make_float(ValueType::f64, 0.5));
    values.add_float32("f32", 1e-6f);
    values.add_bool("flag", true);
    values.add_string_array("tokens", {"<s>", "</s>", "a", "bc"});
    values.add_float32_array("scores", {0.0f, -1.0f, -2.0f, -3.0f});
    values.add_int32_array("types", {3, 3, 1, 1});
    values.add("nested", Value::make_array(Array{
                             ValueType::array,
                             {Value::make_array(Array{ValueType::u8, {Value::make_uint(ValueType::u8, 1)}}),
                              Value::make_array(Array{ValueType::string, {Value::make_string("x")}})}}));
    values.write(dir / "values.gguf");

    Writer tensors(64);
    tensors.add_string("general.architecture", "llama");
    int k = 0;
    for (uint32_t id = 0; id < 64; ++id) {
      const auto info = ember::quant::type_info_from_id(id);
      if (!info) continue;
      tensors.add_tensor("t" + std::to_string(k++), info->type, {int64_t(info->block_elems), 2},
                         filler(2 * size_t(info->block_bytes)));
    }
    tensors.write(dir / "tensors.gguf");

    Writer model;
    model.add_string("general.architecture", "llama");
    model.add_uint32("llama.block_count", 1);
    model.add_tensor("token_embd.weight", ember::quant::DType::q8_0, {32, 4}, filler(4 * 34));
    model.add_tensor("output_norm.weight", ember::quant::DType::f32, {32}, filler(128));
    model.add_tensor("blk.0.ffn_down.weight", ember::quant::DType::q4_k, {256, 2}, filler(2 * 144));
    model.write(dir / "model.gguf");
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "make_gguf_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
