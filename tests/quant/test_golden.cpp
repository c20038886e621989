// lib/quant's dequantizers against values computed independently by gguf-py's
// numpy dequantizers from real tensors of the golden models (tests/data/quant/README.md).
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "quant/quant.hpp"

namespace quant = ember::quant;
using quant::DType;

namespace {

std::vector<char> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

TEST_CASE("dequantize_row matches gguf-py on real tensors", "[quant][golden]") {
  const DType types[] = {DType::f16,  DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                         DType::q5_0, DType::q5_1, DType::q4_k, DType::q5_k, DType::q6_k};
  for (DType type : types) {
    const std::string name(quant::type_name(type));
    const auto dir = ember::test::data_dir() / "quant";
    const std::vector<char> raw = read_file(dir / (name + ".bin"));
    const std::vector<char> expected_bytes = read_file(dir / (name + ".f32"));
    const int64_t n = int64_t(expected_bytes.size() / 4);
    INFO(name << ": " << n << " values");
    REQUIRE(n >= 1024);
    REQUIRE(raw.size() == quant::row_bytes(type, n));
    std::vector<float> expected(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::memcpy(expected.data(), expected_bytes.data(), expected_bytes.size());
    quant::dequantize_row(type, raw.data(), got.data(), n);
    int64_t mismatches = 0, nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Bit-exact: both compute the same float operations in the same order.
      if (bits(got[size_t(i)]) != bits(expected[size_t(i)])) ++mismatches;
      if (expected[size_t(i)] != 0.0f) ++nonzero;
    }
    CHECK(mismatches == 0);
    CHECK(nonzero > n / 2);  // the data is not degenerate
    CHECK(got[0] == expected[0]);
    CHECK(got[size_t(n - 1)] == expected[size_t(n - 1)]);
  }
}
