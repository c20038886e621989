// Tensors: every type of the dtype table written and read back, alignment,
// version 2, zero-copy views, and the writer's argument checks.
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "gguf_test_util.hpp"

using namespace ember;
using namespace ember::gguf;
using ember::test::Bytes;
using ember::test::pattern_bytes;
using ember::test::require_error;

namespace {

// Every type id the dtype table knows (ids 0..63 probed, so a type added to the
// table is picked up here without editing this test).
std::vector<quant::TypeInfo> all_types() {
  std::vector<quant::TypeInfo> out;
  for (uint32_t id = 0; id < 64; ++id)
    if (auto info = quant::type_info_from_id(id)) out.push_back(*info);
  return out;
}

struct Written {
  std::string name;
  quant::DType type;
  std::vector<int64_t> shape;
  Bytes data;
};

// One tensor per type, with shapes of 1 to 4 dimensions in rotation.
std::vector<Written> one_tensor_per_type() {
  std::vector<Written> out;
  uint32_t k = 0;
  for (const quant::TypeInfo& info : all_types()) {
    const int64_t cols = 2 * int64_t(info.block_elems);
    std::vector<int64_t> shape;
    switch (k % 4) {
      case 0: shape = {cols}; break;
      case 1: shape = {cols, 3}; break;
      case 2: shape = {cols, 2, 3}; break;
      default: shape = {cols, 1, 2, 2}; break;
    }
    int64_t rows = 1;
    for (size_t j = 1; j < shape.size(); ++j) rows *= shape[j];
    const size_t n_bytes = 2 * size_t(info.block_bytes) * size_t(rows);
    out.push_back({fmt::format("t{}.{}", k, info.name), info.type, shape, pattern_bytes(n_bytes, k + 10)});
    ++k;
  }
  return out;
}

void check_tensors(const File& file, const std::vector<Written>& written) {
  REQUIRE(file.tensors().size() == written.size());
  const std::byte* base = file.bytes().data();
  for (size_t k = 0; k < written.size(); ++k) {
    const Written& w = written[k];
    const TensorInfo& t = file.tensors()[k];
    INFO("tensor " << w.name);
    CHECK(t.name == w.name);
    CHECK(&file.tensor(w.name) == &t);
    CHECK(t.type == w.type);
    CHECK(t.shape == w.shape);
    CHECK(t.cols() == w.shape[0]);
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    CHECK(t.n_elements == n);
    CHECK(t.rows() == n / w.shape[0]);
    CHECK(t.n_bytes == w.data.size());
    CHECK(t.offset % file.alignment() == 0);
    CHECK(t.data == base + file.data_offset() + t.offset);
    CHECK(std::memcmp(t.data, w.data.data(), w.data.size()) == 0);
  }
}

std::filesystem::path temp_path(std::string_view stem) {
  return std::filesystem::temp_directory_path() / fmt::format("ember-gguf-{}-{}.gguf", stem, ::getpid());
}

}  // namespace

TEST_CASE("gguf: tensors of every type round-trip", "[gguf][tensors]") {
  const std::vector<Written> written = one_tensor_per_type();
  REQUIRE(written.size() >= 31);   // the GGUF types in quant/dtype.cpp
  Writer w;
  w.add_string("general.architecture", "test");
  for (const Written& t : written) w.add_tensor(t.name, t.type, t.shape, t.data);
  const Bytes bytes = w.to_bytes();
  const File file = File::from_bytes(bytes, "types.gguf");

  CHECK(file.alignment() == 32);
  CHECK(file.data_offset() % 32 == 0);
  CHECK(file.file_size() == bytes.size());
  check_tensors(file, written);
  // The writer puts nothing after the last tensor.
  const TensorInfo& last = file.tensors().back();
  CHECK(file.data_offset() + last.offset + last.n_bytes == file.file_size());
  // from_bytes keeps its own copy.
  CHECK(file.bytes().data() != bytes.data());
  CHECK(file.find_tensor("absent") == nullptr);
}

TEST_CASE("gguf: a scalar tensor (no dimensions) has one element", "[gguf][tensors]") {
  Writer w;
  w.add_tensor("scale", quant::DType::f32, {}, pattern_bytes(4, 3));
  const File file = File::from_bytes(w.to_bytes());
  const TensorInfo& t = file.tensor("scale");
  CHECK(t.shape.empty());
  CHECK(t.n_elements == 1);
  CHECK(t.rows() == 1);
  CHECK(t.cols() == 1);
  CHECK(t.n_bytes == 4);
}

TEST_CASE("gguf: a non-default alignment is written, read and honoured", "[gguf][tensors]") {
  for (uint64_t alignment : {uint64_t(1), uint64_t(8), uint64_t(64), uint64_t(4096)}) {
    INFO("alignment " << alignment);
    Writer w(alignment);
    std::vector<Written> written = {
        {"a", quant::DType::f32, {3}, pattern_bytes(12, 1)},
        {"b", quant::DType::f16, {5, 2}, pattern_bytes(20, 2)},
        {"c", quant::DType::q4_0, {32}, pattern_bytes(18, 3)},
    };
    for (const Written& t : written) w.add_tensor(t.name, t.type, t.shape, t.data);
    const File file = File::from_bytes(w.to_bytes());
    CHECK(file.alignment() == alignment);
    if (alignment == 32) CHECK(file.find("general.alignment") == nullptr);
    else CHECK(file.get_uint("general.alignment") == alignment);
    CHECK(file.data_offset() % alignment == 0);
    check_tensors(file, written);
    if (alignment >= 64) CHECK(file.tensors()[1].offset == alignment);   // 12 bytes of "a", then padding
  }
}

TEST_CASE("gguf: version 2 files are read (same layout as version 3)", "[gguf][tensors]") {
  Bytes bytes = ember::test::small_file();
  ember::test::put_u32(bytes, 4, 2);
  const File file = File::from_bytes(bytes);
  CHECK(file.version() == 2);
  CHECK(file.get_string("general.architecture") == "llama");
  CHECK(file.tensor("beta.weight").type == quant::DType::q8_0);
}

TEST_CASE("gguf: File::open maps the file and views point into the mapping", "[gguf][tensors]") {
  const std::vector<Written> written = {
      {"embd", quant::DType::q8_0, {64, 4}, pattern_bytes(4 * 68, 7)},
      {"norm", quant::DType::f32, {64}, pattern_bytes(256, 8)},
  };
  Writer w;
  w.add_string("general.architecture", "llama");
  for (const Written& t : written) w.add_tensor(t.name, t.type, t.shape, t.data);
  const std::filesystem::path path = temp_path("open");
  w.write(path);

  File file = File::open(path);
  std::filesystem::remove(path);   // the mapping stays valid after unlink
  CHECK(file.name() == path.string());
  CHECK(file.file_size() == w.to_bytes().size());
  check_tensors(file, written);
  const std::string_view arch = file.get_string("general.architecture");
  CHECK(arch.data() == reinterpret_cast<const char*>(file.bytes().data()) + 24 + 8 + 20 + 4 + 8);

  // Moving the File keeps every view valid.
  const std::byte* data = file.tensor("embd").data;
  File moved = std::move(file);
  CHECK(moved.tensor("embd").data == data);
  CHECK(moved.get_string("general.architecture") == "llama");
  CHECK(moved.find("general.architecture")->as_string().data() == arch.data());
}

TEST_CASE("gguf: open and write report io errors naming the path", "[gguf][tensors]") {
  require_error([] { File::open("/nonexistent-dir/model.gguf"); }, ErrorCode::io,
                {"/nonexistent-dir/model.gguf", "No such file"});
  require_error([] { Writer().write("/nonexistent-dir/out.gguf"); }, ErrorCode::io,
                {"/nonexistent-dir/out.gguf", "No such file"});
}

TEST_CASE("gguf: writer rejects inconsistent tensors", "[gguf][tensors]") {
  Writer w;
  w.add_tensor("x", quant::DType::f32, {2}, pattern_bytes(8, 1));
  require_error([&] { w.add_tensor("x", quant::DType::f32, {2}, pattern_bytes(8, 1)); }, ErrorCode::invalid_argument,
                {"duplicate tensor 'x'"});
  require_error([&] { w.add_tensor("y", quant::DType::f32, {2}, pattern_bytes(7, 1)); }, ErrorCode::invalid_argument,
                {"'y'", "8 bytes", "got 7"});
  require_error([&] { w.add_tensor("z", quant::DType::q4_k, {128}, pattern_bytes(72, 1)); },
                ErrorCode::invalid_argument, {"'z'", "128", "Q4_K", "256"});
  require_error([&] { w.add_tensor("w", quant::DType::f32, {2, 0}, {}); }, ErrorCode::invalid_argument,
                {"'w'", "dimension 1"});
  require_error([&] { w.add_tensor("v", quant::DType::f32, {1, 1, 1, 1, 1}, pattern_bytes(4, 1)); },
                ErrorCode::invalid_argument, {"'v'", "5 dimensions"});
  // The failed calls left the writer as it was: one tensor.
  CHECK(File::from_bytes(w.to_bytes()).tensors().size() == 1);
}

TEST_CASE("gguf: deferred tensors are made at write time and give the same bytes", "[gguf][tensors]") {
  const std::vector<std::byte> a = pattern_bytes(4 * 68, 3), b = pattern_bytes(256, 4);
  Writer direct, deferred;
  for (Writer* w : {&direct, &deferred}) w->add_string("general.architecture", "llama");
  direct.add_tensor("a", quant::DType::q8_0, {64, 4}, a);
  direct.add_tensor("b", quant::DType::f32, {64}, b);
  int calls = 0;
  deferred.add_deferred_tensor("a", quant::DType::q8_0, {64, 4}, [&](std::span<std::byte> out) {
    ++calls;
    REQUIRE(out.size() == a.size());
    std::memcpy(out.data(), a.data(), a.size());
  });
  deferred.add_tensor("b", quant::DType::f32, {64}, b);
  CHECK(calls == 0);   // nothing is made before writing
  CHECK(deferred.to_bytes() == direct.to_bytes());
  CHECK(calls == 1);
  const std::filesystem::path path = temp_path("deferred");
  deferred.write(path);
  CHECK(calls == 2);
  const File file = File::open(path);
  CHECK(std::memcmp(file.tensor("a").data, a.data(), a.size()) == 0);
  std::filesystem::remove(path);

  // A fill that throws stops the write with its error; duplicate names and bad shapes are
  // rejected when the tensor is added, as for add_tensor.
  Writer failing;
  failing.add_deferred_tensor("x", quant::DType::f32, {4}, [](std::span<std::byte>) {
    throw ember::Error(ErrorCode::unsupported, "made-up failure");
  });
  require_error([&] { failing.write(temp_path("failing")); }, ErrorCode::unsupported, {"made-up failure"});
  std::filesystem::remove(temp_path("failing"));
  require_error([&] { failing.add_deferred_tensor("x", quant::DType::f32, {4}, [](std::span<std::byte>) {}); },
                ErrorCode::invalid_argument, {"duplicate tensor 'x'"});
  require_error([&] { failing.add_deferred_tensor("y", quant::DType::q4_k, {128}, [](std::span<std::byte>) {}); },
                ErrorCode::invalid_argument, {"'y'", "Q4_K"});
  require_error([&] { failing.add_deferred_tensor("z", quant::DType::f32, {4}, nullptr); },
                ErrorCode::invalid_argument, {"'z'", "no fill function"});
}
