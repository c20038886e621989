// Malformed files: each case builds a valid file with gguf::Writer, corrupts it
// byte-wise, and checks the error code and that the message names the problem
// (key, tensor, byte offset). Then every truncation and many byte flips of a
// small file are parsed, which must either succeed or throw ember::Error.
#include <limits>

#include "gguf_test_util.hpp"

using namespace ember;
using namespace ember::gguf;
using namespace ember::test;

namespace {

constexpr uint64_t kHuge = uint64_t(1) << 62;

std::string offset_text(size_t at) { return fmt::format("at byte offset {}", at); }

}  // namespace

TEST_CASE("gguf corrupt: truncated inside the header", "[gguf][corrupt]") {
  const Bytes good = small_file();
  require_malformed(prefix(good, 0), {"truncated", "magic", "header"});
  require_malformed(prefix(good, 6), {"truncated", "version", offset_text(4)});
  require_malformed(prefix(good, 13), {"truncated", "tensor count", offset_text(8)});
  require_malformed(prefix(good, 20), {"truncated", "metadata count", offset_text(16)});
}

TEST_CASE("gguf corrupt: truncated inside a key", "[gguf][corrupt]") {
  const Bytes good = small_file();
  const size_t key = find_bytes(good, "llama.block_count");   // third entry, #2
  require_malformed(prefix(good, key + 5), {"key of 17 bytes runs past the end", "metadata entry #2",
                                            offset_text(key - 8)});
  require_malformed(prefix(good, key - 3), {"truncated", "key needs 8 bytes", "metadata entry #2"});
}

TEST_CASE("gguf corrupt: truncated inside a value", "[gguf][corrupt]") {
  const Bytes good = small_file();
  // Inside the u32 of llama.block_count.
  const size_t value = after(good, "llama.block_count") + 4;
  require_malformed(prefix(good, value + 2), {"truncated", "u32 value", "metadata key 'llama.block_count'",
                                              offset_text(value)});
  // Inside the last string of the tokens array.
  const size_t world = find_bytes(good, "world");
  require_malformed(prefix(good, world + 2), {"string value of 5 bytes", "metadata key 'tokenizer.ggml.tokens'",
                                              offset_text(world - 8)});
  // Inside the second string: the array length itself no longer fits.
  const size_t hello = find_bytes(good, "hello");
  require_malformed(prefix(good, hello + 2), {"array of 3 string elements cannot fit",
                                              "metadata key 'tokenizer.ggml.tokens'"});
  // Inside the value type field.
  const size_t type = after(good, "llama.attention.layer_norm_rms_epsilon");
  require_malformed(prefix(good, type + 1), {"truncated", "value type",
                                             "metadata key 'llama.attention.layer_norm_rms_epsilon'"});
}

TEST_CASE("gguf corrupt: truncated inside the tensor infos", "[gguf][corrupt]") {
  const Bytes good = small_file();
  const size_t n_dims = after(good, "beta.weight");
  // Inside the second dimension of beta.weight.
  require_malformed(prefix(good, n_dims + 4 + 8 + 3), {"truncated", "dimension", "tensor 'beta.weight'",
                                                       offset_text(n_dims + 12)});
  // Inside the name of beta.weight: the tensor is not named yet, its index is.
  require_malformed(prefix(good, n_dims - 2), {"tensor name of 11 bytes", "tensor info #1"});
  // Inside the offset field of alpha.weight.
  const size_t alpha_offset = after(good, "alpha.weight") + 4 + 16 + 4;
  require_malformed(prefix(good, alpha_offset + 7), {"truncated", "tensor data offset", "tensor 'alpha.weight'"});
}

TEST_CASE("gguf corrupt: truncated inside the tensor data", "[gguf][corrupt]") {
  const Bytes good = small_file();
  const File file = File::from_bytes(good);
  const TensorInfo& beta = file.tensor("beta.weight");
  const size_t cut = size_t(file.data_offset() + beta.offset + 10);
  require_malformed(prefix(good, cut), {"tensor 'beta.weight'", "lies outside the file", fmt::format("({} bytes)", cut)});
  // Cut in the padding before the data section: the first tensor is the one outside.
  require_malformed(prefix(good, size_t(file.data_offset() - 1)), {"tensor 'alpha.weight'", "lies outside the file"});
}

TEST_CASE("gguf corrupt: bad magic", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  bytes[3] = std::byte('X');
  require_malformed(bytes, {"bad magic 47 47 55 58", "not a GGUF file", offset_text(0)});
}

TEST_CASE("gguf corrupt: unsupported and unknown versions", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  put_u32(bytes, 4, 1);
  require_error([&] { File::from_bytes(bytes, "old.gguf"); }, ErrorCode::unsupported,
                {"old.gguf", "GGUF version 1", "not supported"});
  put_u32(bytes, 4, 7);
  require_malformed(bytes, {"unknown GGUF version 7", offset_text(4)});
  put_u32(bytes, 4, 0);
  require_malformed(bytes, {"unknown GGUF version 0"});
  put_u32(bytes, 4, 0x03000000);   // a version-3 file written big-endian
  require_error([&] { File::from_bytes(bytes); }, ErrorCode::unsupported, {"big-endian"});
}

TEST_CASE("gguf corrupt: huge tensor count", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  put_u64(bytes, 8, kHuge);
  require_malformed(bytes, {"tensor count 4611686018427387904 cannot fit", offset_text(8)});
}

TEST_CASE("gguf corrupt: huge metadata count", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  put_u64(bytes, 16, std::numeric_limits<uint64_t>::max());
  require_malformed(bytes, {"metadata count 18446744073709551615 cannot fit", offset_text(16)});
}

TEST_CASE("gguf corrupt: huge array length", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t length = after(bytes, "tokenizer.ggml.tokens") + 4 + 4;   // after value type and element type
  REQUIRE(get_u64(bytes, length) == 3);
  put_u64(bytes, length, kHuge);
  require_malformed(bytes, {"array of 4611686018427387904 string elements cannot fit",
                            "metadata key 'tokenizer.ggml.tokens'", offset_text(length)});
}

TEST_CASE("gguf corrupt: oversized strings", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t length = after(bytes, "general.architecture") + 4;
  REQUIRE(get_u64(bytes, length) == 5);
  put_u64(bytes, length, kHuge);
  require_malformed(bytes, {"string value of 4611686018427387904 bytes runs past the end",
                            "metadata key 'general.architecture'", offset_text(length)});

  bytes = small_file();
  put_u64(bytes, 24, std::numeric_limits<uint64_t>::max());   // length of the first key
  require_malformed(bytes, {"key of 18446744073709551615 bytes", "metadata entry #0", offset_text(24)});

  bytes = small_file();
  const size_t name_length = find_bytes(bytes, "alpha.weight") - 8;
  put_u64(bytes, name_length, kHuge);
  require_malformed(bytes, {"tensor name of 4611686018427387904 bytes", "tensor info #0"});
}

TEST_CASE("gguf corrupt: unknown value types", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t type = after(bytes, "llama.block_count");
  put_u32(bytes, type, 13);
  require_malformed(bytes, {"unknown value type 13", "metadata key 'llama.block_count'", offset_text(type)});

  bytes = small_file();
  const size_t element_type = after(bytes, "tokenizer.ggml.tokens") + 4;
  put_u32(bytes, element_type, 0xffffffffu);
  require_malformed(bytes, {"unknown array element type 4294967295", "metadata key 'tokenizer.ggml.tokens'",
                            offset_text(element_type)});
}

TEST_CASE("gguf corrupt: bool other than 0 or 1", "[gguf][corrupt]") {
  Writer w;
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  Bytes bytes = w.to_bytes();
  const size_t value = after(bytes, "tokenizer.ggml.add_bos_token") + 4;
  bytes[value] = std::byte(2);
  require_malformed(bytes, {"bool value 2", "tokenizer.ggml.add_bos_token", offset_text(value)});
}

TEST_CASE("gguf corrupt: unknown tensor type", "[gguf][corrupt]") {
  for (uint32_t id : {4u, 31u, 99u}) {   // 4 and 31 are ids ggml retired
    Bytes bytes = small_file();
    const size_t type = after(bytes, "beta.weight") + 4 + 16;
    REQUIRE(get_u64(bytes, type) % (uint64_t(1) << 32) == uint32_t(quant::DType::q8_0));
    put_u32(bytes, type, id);
    require_malformed(bytes, {fmt::format("unknown tensor type id {}", id), "tensor 'beta.weight'", offset_text(type)});
  }
}

TEST_CASE("gguf corrupt: zero dimension", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t dim1 = after(bytes, "alpha.weight") + 4 + 8;
  put_u64(bytes, dim1, 0);
  require_malformed(bytes, {"dimension 1 is zero", "tensor 'alpha.weight'", offset_text(dim1)});
}

TEST_CASE("gguf corrupt: dimensions whose product overflows", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t dims = after(bytes, "alpha.weight") + 4;
  put_u64(bytes, dims, uint64_t(1) << 40);
  put_u64(bytes, dims + 8, uint64_t(1) << 30);
  require_malformed(bytes, {"overflow", "dimension 1", "tensor 'alpha.weight'", offset_text(dims + 8)});

  bytes = small_file();
  put_u64(bytes, dims, std::numeric_limits<uint64_t>::max());
  require_malformed(bytes, {"dimension 0 is 18446744073709551615, too large", "tensor 'alpha.weight'"});

  // Elements fit in int64 but the bytes do not fit in 64 bits (F32: 4 bytes each).
  bytes = small_file();
  put_u64(bytes, dims, uint64_t(1) << 62);
  put_u64(bytes, dims + 8, 1);
  require_malformed(bytes, {"take more than 2^64 bytes", "tensor 'alpha.weight'"});
}

TEST_CASE("gguf corrupt: more than four dimensions", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t n_dims = after(bytes, "beta.weight");
  put_u32(bytes, n_dims, 5);
  require_malformed(bytes, {"5 dimensions, at most 4", "tensor 'beta.weight'", offset_text(n_dims)});
}

TEST_CASE("gguf corrupt: innermost dimension not a multiple of the block size", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t n_dims = after(bytes, "beta.weight");
  put_u64(bytes, n_dims + 4, 48);
  require_malformed(bytes, {"innermost dimension 48 is not a multiple of the Q8_0 block size 32",
                            "tensor 'beta.weight'"});
}

TEST_CASE("gguf corrupt: tensor data outside the file", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t offset = after(bytes, "beta.weight") + 4 + 16 + 4;
  put_u64(bytes, offset, uint64_t(1) << 40);   // aligned, far beyond the end
  require_malformed(bytes, {"tensor 'beta.weight'", "lies outside the file", offset_text(offset)});
  put_u64(bytes, offset, std::numeric_limits<uint64_t>::max() - 31);   // aligned; offset + size overflows
  require_malformed(bytes, {"tensor 'beta.weight'", "lies outside the file"});
}

TEST_CASE("gguf corrupt: overlapping tensors", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t offset = after(bytes, "beta.weight") + 4 + 16 + 4;
  REQUIRE(get_u64(bytes, offset) == 32);
  put_u64(bytes, offset, 0);   // alpha.weight occupies [0, 32)
  require_malformed(bytes, {"overlaps the data of tensor", "alpha.weight", "beta.weight"});
}

TEST_CASE("gguf corrupt: misaligned tensor offset", "[gguf][corrupt]") {
  Bytes bytes = small_file();
  const size_t offset = after(bytes, "beta.weight") + 4 + 16 + 4;
  put_u64(bytes, offset, 40);
  require_malformed(bytes, {"data offset 40 is not a multiple of the alignment 32", "tensor 'beta.weight'",
                            offset_text(offset)});
}

TEST_CASE("gguf corrupt: bad general.alignment", "[gguf][corrupt]") {
  for (uint32_t alignment : {0u, 48u, 3u}) {
    Writer w;
    w.add_uint32("general.alignment", alignment);
    Bytes bytes = w.to_bytes();
    const size_t value = after(bytes, "general.alignment") + 4;
    require_malformed(bytes, {fmt::format("general.alignment {} is not a nonzero power of two", alignment),
                              offset_text(value)});
  }
  Writer too_big;
  too_big.add("general.alignment", Value::make_uint(ValueType::u64, uint64_t(1) << 32));
  require_malformed(too_big.to_bytes(), {"general.alignment 4294967296", "fits in u32"});
  Writer negative;
  negative.add("general.alignment", Value::make_int(ValueType::i32, -64));
  require_malformed(negative.to_bytes(), {"general.alignment -64"});
  Writer text;
  text.add_string("general.alignment", "32");
  require_malformed(text.to_bytes(), {"general.alignment has type string"});

  // A valid but different alignment makes the writer's 32-aligned offsets wrong.
  Writer mismatch;
  mismatch.add_uint32("general.alignment", 64);
  mismatch.add_tensor("a", quant::DType::f32, {8}, pattern_bytes(32, 1));
  mismatch.add_tensor("b", quant::DType::f32, {8}, pattern_bytes(32, 2));
  require_malformed(mismatch.to_bytes(), {"tensor 'b'", "data offset 32 is not a multiple of the alignment 64"});
}

TEST_CASE("gguf corrupt: duplicate tensor name", "[gguf][corrupt]") {
  Writer w;
  w.add_tensor("blk.0.attn_q.weight", quant::DType::f32, {4}, pattern_bytes(16, 1));
  w.add_tensor("blk.0.attn_k.weight", quant::DType::f32, {4}, pattern_bytes(16, 2));
  Bytes bytes = w.to_bytes();
  const size_t second = find_bytes(bytes, "blk.0.attn_k.weight");
  bytes[second + 11] = std::byte('q');
  require_malformed(bytes, {"duplicate tensor name 'blk.0.attn_q.weight'", "tensor info #1 repeats #0",
                            offset_text(second - 8)});
}

TEST_CASE("gguf corrupt: duplicate metadata key", "[gguf][corrupt]") {
  Writer w;
  w.add_uint32("llama.block_count", 4);
  w.add_uint32("llama.block_cound", 5);
  Bytes bytes = w.to_bytes();
  const size_t second = find_bytes(bytes, "llama.block_cound");
  bytes[second + 16] = std::byte('t');
  require_malformed(bytes, {"duplicate metadata key 'llama.block_count'", "entry #1 repeats entry #0",
                            offset_text(second - 8)});
}

TEST_CASE("gguf corrupt: arrays nested too deeply", "[gguf][corrupt]") {
  auto nest = [](int depth) {
    Value v = Value::make_array(Array{ValueType::u8, {Value::make_uint(ValueType::u8, 9)}});
    for (int d = 1; d < depth; ++d) v = Value::make_array(Array{ValueType::array, {v}});
    Writer w;
    w.add("deep", v);
    return w.to_bytes();
  };
  // 64 levels are accepted...
  const File ok = File::from_bytes(nest(64));
  const Value* v = &ok.get("deep");
  for (int d = 1; d < 64; ++d) v = &v->as_array().items.at(0);
  CHECK(v->as_array().items.at(0).as_uint() == 9);
  // ...65 are not.
  const size_t innermost = 24 + 8 + 4 + 4 + 64 * 12;   // header, key, value type, 64 array headers
  require_malformed(nest(65), {"arrays nested more than 64 deep", "metadata key 'deep'", offset_text(innermost)});
  // A forged file of 100000 nested empty-looking arrays must fail the same way, not exhaust the stack.
  Bytes bytes = nest(1);
  const size_t first = 24 + 8 + 4 + 4;
  Bytes forged(bytes.begin(), bytes.begin() + ptrdiff_t(first));
  put_u64(forged, 16, 1);
  for (int d = 0; d < 100000; ++d) {
    forged.resize(forged.size() + 12);
    put_u32(forged, forged.size() - 12, uint32_t(ValueType::array));
    put_u64(forged, forged.size() - 8, 1);
  }
  put_u32(forged, first - 4, uint32_t(ValueType::array));
  require_malformed(forged, {"nested more than 64 deep"});
}

TEST_CASE("gguf corrupt: missing required metadata and missing tensor", "[gguf][corrupt]") {
  const File file = File::from_bytes(small_file(), "small.gguf");
  require_error([&] { file.get_string("general.name"); }, ErrorCode::malformed_file,
                {"small.gguf", "missing required metadata key 'general.name'"});
  require_error([&] { file.tensor("output.weight"); }, ErrorCode::malformed_file,
                {"small.gguf", "missing tensor 'output.weight'"});
  CHECK(file.find_tensor("output.weight") == nullptr);
}

TEST_CASE("gguf corrupt: missing file and empty file", "[gguf][corrupt]") {
  require_error([] { File::open("/nonexistent/ember/model.gguf"); }, ErrorCode::io,
                {"'/nonexistent/ember/model.gguf'", "No such file or directory"});
  require_error([] { File::from_bytes({}, "empty.gguf"); }, ErrorCode::malformed_file,
                {"empty.gguf", "truncated", "magic"});
}

TEST_CASE("gguf corrupt: every truncation of a small file fails cleanly", "[gguf][corrupt]") {
  const Bytes good = small_file();
  CHECK(File::from_bytes(good).tensors().size() == 2);
  size_t failures = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    try {
      File::from_bytes(prefix(good, n));
      FAIL("prefix of " << n << " of " << good.size() << " bytes parsed");
    } catch (const Error& e) {
      if (e.code() != ErrorCode::malformed_file) FAIL("prefix " << n << ": " << e.what());
      ++failures;
    }
  }
  CHECK(failures == good.size());
}

TEST_CASE("gguf corrupt: byte flips before the tensor data parse or fail cleanly", "[gguf][corrupt]") {
  const Bytes good = small_file();
  const uint64_t data_offset = File::from_bytes(good).data_offset();
  size_t parsed = 0, rejected = 0;
  for (size_t at = 0; at < data_offset; ++at) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      Bytes bytes = good;
      bytes[at] ^= std::byte(mask);
      try {
        const File file = File::from_bytes(bytes);
        for (const TensorInfo& t : file.tensors()) {   // views stay inside the image
          CHECK(t.data >= file.bytes().data());
          CHECK(t.data + t.n_bytes <= file.bytes().data() + file.file_size());
        }
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  // Flips in string bytes and float values still parse; flips in counts, types
  // and offsets do not. Both must have happened.
  CHECK(parsed > 0);
  CHECK(rejected > 0);
  CHECK(parsed + rejected == 3 * data_offset);
}
