// libFuzzer target for the Hugging Face checkpoint readers (lib/convert, lib/common/json):
// the first input byte picks the parser, the rest is its input:
//   0: JSON (json::parse), every value walked;
//   1: a .safetensors image, every tensor's first and last byte read;
//   2: a SentencePiece tokenizer.model (protocol buffer), every piece's bytes read.
// Any ember::Error is an accepted outcome; a crash, a sanitizer report, another exception
// type, a hang or runaway memory is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/json.hpp"
#include "convert/safetensors.hpp"
#include "convert/spm_model.hpp"
#include "ember/error.hpp"

namespace {

volatile uint64_t g_sink = 0;

uint64_t walk(const ember::json::Value& v, int depth) {
  if (depth > 600) __builtin_trap();   // the parser promised at most 512 levels
  using Kind = ember::json::Value::Kind;
  switch (v.kind()) {
    case Kind::string: {
      uint64_t acc = 0;
      for (char c : v.as_string("s")) acc += uint8_t(c);
      return acc;
    }
    case Kind::array: {
      uint64_t acc = 1;
      for (const auto& item : v.as_array("a")) acc += walk(item, depth + 1);
      return acc;
    }
    case Kind::object: {
      uint64_t acc = 2;
      for (const auto& [key, item] : v.as_object("o")) acc += key.size() + walk(item, depth + 1);
      return acc;
    }
    case Kind::integer: return uint64_t(v.as_int("i"));
    case Kind::number: return uint64_t(v.as_double("n") != 0.0);
    case Kind::boolean: return v.as_bool("b");
    case Kind::null: return 3;
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  try {
    switch (data[0] % 3) {
      case 0:
        g_sink = g_sink + walk(ember::json::parse(
                                   std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), "fuzz"),
                               0);
        break;
      case 1: {
        const ember::convert::SafetensorsFile file(bytes, "fuzz");
        for (const auto& t : file.tensors()) {
          if (t.n_bytes == 0) continue;
          g_sink = g_sink + uint64_t(t.data[0]) + uint64_t(t.data[t.n_bytes - 1]) + t.shape.size();
        }
        break;
      }
      case 2:
        for (const auto& p : ember::convert::parse_spm_model(bytes, "fuzz"))
          for (char c : p.piece) g_sink = g_sink + uint8_t(c) + uint64_t(p.type);
        break;
    }
  } catch (const ember::Error&) {
  }
  return 0;
}
