// Every CPU kernel level against lib/quant, for every weight type:
//   quantize_activations  bit-exact (same codes, same scale bits)
//   dequantize            bit-exact
//   dot, dot_tile         within kSummationTolerance (float summation order only);
//                         bit-exact for the formats in llama.cpp's order (quant/lanes.hpp)
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/repack.hpp"
#include "ember/error.hpp"
#include "quant/formats.hpp"
#include "quant/helpers.hpp"

namespace quant = ember::quant;
namespace test = ember::test;
using ember::cpu::Isa;
using quant::DType;

namespace {

std::string label(Isa isa, DType type, int64_t n) {
  return std::string(ember::cpu::isa_name(isa)) + " " + std::string(quant::type_name(type)) + " n=" +
         std::to_string(n);
}

}  // namespace

TEST_CASE("ISA detection", "[kernels]") {
  const auto isas = ember::cpu::available_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.front() == Isa::scalar);
  CHECK(ember::cpu::isa_name(Isa::avx512) == "avx512");
#if defined(__x86_64__)
  // The machines ember is developed and tested on have AVX2.
  CHECK(isas.size() >= 2);
#endif
#if defined(__aarch64__)
  // Every ARM64 CPU has NEON (ASIMD); the levels above it follow each other.
  REQUIRE(isas.size() >= 2);
  CHECK(isas[1] == Isa::neon);
  for (size_t i = 2; i < isas.size(); ++i) CHECK(int(isas[i]) == int(isas[i - 1]) + 1);
#endif
  // scripts/test-arm.sh names the best level each emulated CPU must be given, so that a
  // detection fault cannot quietly test fewer levels.
  if (const char* expected = std::getenv("EMBER_TEST_EXPECT_ISA"))
    CHECK(ember::cpu::isa_name(isas.back()) == std::string(expected));

  const char* saved = std::getenv("EMBER_CPU_ISA");
  const std::string saved_value = saved ? saved : "";
  setenv("EMBER_CPU_ISA", "scalar", 1);
  CHECK(ember::cpu::best_isa() == Isa::scalar);
  setenv("EMBER_CPU_ISA", "no-such-level", 1);
  CHECK(ember::cpu::best_isa() == isas.back());
  if (saved) {
    setenv("EMBER_CPU_ISA", saved_value.c_str(), 1);
  } else {
    unsetenv("EMBER_CPU_ISA");
  }
}

TEST_CASE("kernel tables cover every weight type and report missing ones", "[kernels]") {
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      CHECK(k.weight_type == type);
      CHECK(k.activation_type == quant::activation_type(type));
      CHECK(k.tile_w >= 1);
      CHECK(k.tile_x >= 1);
    }
    try {
      ember::cpu::weight_kernels(isa, DType::q2_k);
      FAIL("no exception");
    } catch (const ember::Error& e) {
      CHECK(e.code() == ember::ErrorCode::unsupported);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("Q2_K"));
    }
  }
}

TEST_CASE("quantize_activations is bit-exact with lib/quant", "[kernels]") {
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      for (int64_t n : test::test_lengths(type)) {
        INFO(label(isa, type, n));
        auto x = test::random_values(n, 31 + uint32_t(n));
        // Exact ties of the rounding rules: the largest magnitude of the first block
        // (32 or 256 values) is 127 * 2^-3, so these values land on halves of the code grid.
        if (n >= 32) {
          x[0] = 127.0f / 8;
          x[1] = 2.5f / 8;
          x[2] = -3.5f / 8;
          x[3] = 0.5f / 8;
          for (int64_t i = 4; i < std::min<int64_t>(n, 256); ++i) x[size_t(i)] = std::fmod(x[size_t(i)], 1.0f);
        }
        const auto expected = test::quantize(k.activation_type, x);
        std::vector<std::byte> got(expected.size(), std::byte{0x5a});
        k.quantize_activations(x.data(), got.data(), n);
        CHECK(std::memcmp(got.data(), expected.data(), expected.size()) == 0);
      }
    }
  }
}

TEST_CASE("Q8_TR's rotation is the reference's at every level, zeros and outliers included", "[kernels][q8_wr]") {
  // The SIMD levels rotate with their own butterflies; the codes must be lib/quant's.
  for (Isa isa : ember::cpu::available_isas()) {
    const auto& k = ember::cpu::weight_kernels(isa, DType::q8_wr);
    for (int64_t n : {int64_t(64), int64_t(640), int64_t(2048)}) {
      INFO(label(isa, DType::q8_wr, n));
      auto x = test::random_values(n, 77 + uint32_t(n));
      for (int64_t i = 0; i < n; i += 7) x[size_t(i)] = 0.0f;
      for (int64_t i = 3; i < n; i += 11) x[size_t(i)] = -0.0f;
      x[size_t(n / 3)] = 300.0f;
      x[size_t(n / 2)] = -250.0f;
      const auto expected = test::quantize(DType::q8_tr, x);
      std::vector<std::byte> got(expected.size(), std::byte{0x5a});
      k.quantize_activations(x.data(), got.data(), n);
      CHECK(std::memcmp(got.data(), expected.data(), expected.size()) == 0);
    }
  }
}

TEST_CASE("dequantize kernels are bit-exact with lib/quant", "[kernels]") {
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      for (int64_t n : test::test_lengths(type)) {
        INFO(label(isa, type, n));
        const auto w = test::quantize(type, test::random_values(n, 77 + uint32_t(n)));
        const auto expected = test::dequantize(type, w.data(), n);
        std::vector<float> got(size_t(n), -1.0f);
        k.dequantize(w.data(), got.data(), n);
        CHECK(std::memcmp(got.data(), expected.data(), size_t(n) * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("dot kernels agree with quant::dot_row", "[kernels]") {
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      for (int64_t n : test::test_lengths(type)) {
        INFO(label(isa, type, n));
        const auto w = test::quantize(type, test::random_values(n, 1000 + uint32_t(n)));
        const auto a = test::quantize(k.activation_type, test::random_values(n, 2000 + uint32_t(n)));
        const double expected = quant::dot_row(type, w.data(), a.data(), n);
        const double tol = test::kSummationTolerance * test::dot_magnitude(type, w.data(), a.data(), n);
        const double got = k.dot(w.data(), a.data(), n);
        CHECK(std::fabs(got - expected) <= tol);
      }
    }
  }
}

TEST_CASE("dot_tile agrees with quant::dot_row and writes only its tile", "[kernels]") {
  // 37 weight rows x 5 and 35 activation rows: full and partial register tiles of every
  // level, whole groups of 16 rows (batched kernels) and more than 32 tokens; 37 x 1:
  // the single-row (decode) path. Rows are spaced by more than their size, outputs by a
  // wider stride.
  const int n_w = 37;
  const size_t out_stride = 41;
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      for (int64_t n : test::test_lengths(type)) for (int n_x : {5, 35, 1}) {
        INFO(label(isa, type, n) << " n_x=" << n_x);
        const size_t w_row = quant::row_bytes(type, n) + 64, a_row = quant::row_bytes(k.activation_type, n) + 32;
        std::vector<std::byte> w(w_row * n_w), a(a_row * n_x);
        for (int r = 0; r < n_w; ++r) {
          const auto row = test::quantize(type, test::random_values(n, 3000 + uint32_t(r * 17 + n)));
          std::memcpy(w.data() + r * w_row, row.data(), row.size());
        }
        for (int t = 0; t < n_x; ++t) {
          const auto row = test::quantize(k.activation_type, test::random_values(n, 4000 + uint32_t(t * 13 + n)));
          std::memcpy(a.data() + t * a_row, row.data(), row.size());
        }
        const float sentinel = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> out(out_stride * n_x + 3, sentinel);
        k.dot_tile(w.data(), w_row, n_w, a.data(), a_row, n_x, out.data(), out_stride, n);
        for (int t = 0; t < n_x; ++t) {
          for (int r = 0; r < n_w; ++r) {
            const std::byte* wr = w.data() + r * w_row;
            const std::byte* ar = a.data() + t * a_row;
            const double expected = quant::dot_row(type, wr, ar, n);
            const double tol = test::kSummationTolerance * test::dot_magnitude(type, wr, ar, n);
            CHECK(std::fabs(double(out[t * out_stride + size_t(r)]) - expected) <= tol);
          }
          for (size_t c = size_t(n_w); c < out_stride && t * out_stride + c < out.size(); ++c)
            CHECK(std::isnan(out[t * out_stride + c]));
        }
      }
    }
  }
}

TEST_CASE("packed prefill kernels agree with quant::dot_row", "[kernels][packed]") {
  // Lengths with whole packed steps, remainders (whole and odd block counts), and none;
  // 7 rows (no whole group of 16 rows) and 37 (two groups and a tail).
  const int n_x = 5;
  int tested = 0;
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      if (!k.packed.dot_tile) continue;
      REQUIRE(k.packed.row_bytes);
      REQUIRE(k.packed.pack);
      CHECK(k.packed.tile_w >= 1);
      CHECK(k.packed.tile_x >= 1);
      ++tested;
      const int64_t block = quant::type_info(type).block_elems;
      const std::vector<int64_t> lengths =
          block == 256 ? std::vector<int64_t>{256, 512, 768, 2048 + 256, 4096}
          : block > 32 ? std::vector<int64_t>{block, 3 * block, 1024 + block, 4096}
                       : std::vector<int64_t>{32, 96, 512, 1024 + 96, 1024 + 64, 4096};
      for (const int n_w : {7, 37})
      for (int64_t n : lengths) {
        INFO(label(isa, type, n) << " rows " << n_w);
        const size_t out_stride = size_t(n_w) + 2;
        const size_t w_row = quant::row_bytes(type, n) + 8, p_row = k.packed.row_bytes(n) + 24;
        std::vector<std::byte> w(w_row * n_w), a(quant::row_bytes(k.activation_type, n) * n_x), p(p_row * n_x);
        for (int r = 0; r < n_w; ++r) {
          const auto row = test::quantize(type, test::random_values(n, 5000 + uint32_t(r * 31 + n)));
          std::memcpy(w.data() + r * w_row, row.data(), row.size());
        }
        const size_t a_row = quant::row_bytes(k.activation_type, n);
        for (int t = 0; t < n_x; ++t) {
          k.quantize_activations(test::random_values(n, 6000 + uint32_t(t * 7 + n)).data(), a.data() + t * a_row, n);
          k.packed.pack(a.data() + t * a_row, p.data() + t * p_row, n);
        }
        std::vector<float> out(out_stride * n_x, std::numeric_limits<float>::quiet_NaN());
        k.packed.dot_tile(w.data(), w_row, n_w, p.data(), p_row, n_x, out.data(), out_stride, n);
        for (int t = 0; t < n_x; ++t) {
          for (int r = 0; r < n_w; ++r) {
            const std::byte* wr = w.data() + r * w_row;
            const std::byte* ar = a.data() + t * a_row;
            const double expected = quant::dot_row(type, wr, ar, n);
            const double tol = test::kSummationTolerance * test::dot_magnitude(type, wr, ar, n);
            CHECK(std::fabs(double(out[t * out_stride + size_t(r)]) - expected) <= tol);
          }
          CHECK(std::isnan(out[t * out_stride + size_t(n_w)]));
        }
      }
    }
  }
  // The AVX-512 level has a packed path for Q4_1, Q5_1 and Q5_K (Q4_0 batches use
  // 16-row kernels, the llama.cpp-order formats theirs).
  bool has_avx512 = false;
  for (Isa isa : ember::cpu::available_isas()) has_avx512 |= isa == Isa::avx512;
  if (has_avx512) CHECK(tested >= 3);
}

TEST_CASE("repacked (rows8 layout) kernels agree with quant::dot_row, token by token", "[kernels][repack]") {
  // 24 rows (3 groups of 8) in the rows8 layout against the file's layout through
  // quant::dot_row; 1, 5 and 35 tokens (decode, prefill, more than one pass of 32), each
  // token's results bit-identical whatever the other tokens of the call.
  const int n_w = 24;
  const size_t out_stride = 29;
  int tested = 0;
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      if (!k.repacked.dot_tile) continue;
      REQUIRE(ember::cpu::rows8_layout_defined(type));
      CHECK(k.repacked.tile_x >= 1);
      ++tested;
      for (int64_t n : test::test_lengths(type)) {
        // Symmetric formats: Q8_0 rows that carry their blocks' code sums, as matmul gives them.
        const bool sums = k.repacked.activation_sums != 0;
        if (sums) REQUIRE(k.activation_type == DType::q8_0);
        const size_t w_row = quant::row_bytes(type, n);
        const size_t a_row =
            sums ? ember::cpu::activation_row_bytes_with_sums(n) : quant::row_bytes(k.activation_type, n);
        std::vector<std::byte> w(w_row * n_w), packed(w_row * n_w), a(a_row * 35);
        for (int r = 0; r < n_w; ++r) {
          const auto row = test::quantize(type, test::random_values(n, 7000 + uint32_t(r * 11 + n)));
          std::memcpy(w.data() + r * w_row, row.data(), row.size());
        }
        ember::cpu::repack_rows8(type, w.data(), w_row, packed.data(), n_w, n);
        CHECK(packed != w);
        for (int t = 0; t < 35; ++t) {
          const auto row = test::quantize(k.activation_type, test::random_values(n, 8000 + uint32_t(t * 5 + n)));
          std::memcpy(a.data() + t * a_row, row.data(), row.size());
          if (sums) ember::cpu::append_activation_sums(a.data() + t * a_row, n, k.repacked.activation_sums);
        }
        std::vector<float> single(out_stride * 35, std::numeric_limits<float>::quiet_NaN());
        for (int t = 0; t < 35; ++t)
          k.repacked.dot_tile(packed.data(), w_row, n_w, a.data() + t * a_row, a_row, 1, single.data() + t * out_stride,
                              out_stride, n);
        for (int n_x : {1, 5, 35}) {
          INFO(label(isa, type, n) << " n_x=" << n_x);
          std::vector<float> out(out_stride * size_t(n_x), std::numeric_limits<float>::quiet_NaN());
          k.repacked.dot_tile(packed.data(), w_row, n_w, a.data(), a_row, n_x, out.data(), out_stride, n);
          for (int t = 0; t < n_x; ++t) {
            for (int r = 0; r < n_w; ++r) {
              const std::byte* wr = w.data() + r * w_row;
              const std::byte* ar = a.data() + t * a_row;
              const double expected = quant::dot_row(type, wr, ar, n);
              const double tol = test::kSummationTolerance * test::dot_magnitude(type, wr, ar, n);
              const float got = out[t * out_stride + size_t(r)];
              CHECK(std::fabs(double(got) - expected) <= tol);
              CHECK(std::memcmp(&got, &single[t * out_stride + size_t(r)], sizeof(float)) == 0);
            }
            for (size_t c = size_t(n_w); c < out_stride; ++c) CHECK(std::isnan(out[t * out_stride + c]));
          }
        }
      }
    }
  }
  // The AVX2 levels repack Q4_0, Q4_1, Q5_1, Q4_G128, Q4_G64, Q4_K and Q5_K.
  bool has_avx2 = false;
  for (Isa isa : ember::cpu::available_isas()) has_avx2 |= isa == Isa::avx2;
  if (has_avx2) {
    CHECK(tested >= 7);
    CHECK(ember::cpu::weight_kernels(Isa::avx2, DType::q4_k).repacked.dot_tile != nullptr);
  }
  // The ARM levels below i8mm repack Q4_0, Q4_1, Q5_1, Q4_G128 and Q4_G64 (neon/rows8.hpp),
  // Q4_K and Q5_K (neon/rows8_k.hpp); Q4_0's kernels take the activation code sums, the
  // others' Q8_1 and Q8_K blocks carry their own.
  for (Isa isa : ember::cpu::available_isas())
    if (isa == Isa::neon || isa == Isa::dotprod)
      for (DType type :
           {DType::q4_0, DType::q4_1, DType::q5_1, DType::q4_g128, DType::q4_g64, DType::q4_k, DType::q5_k}) {
        INFO(label(isa, type, 0));
        CHECK(ember::cpu::weight_kernels(isa, type).repacked.dot_tile != nullptr);
        CHECK(ember::cpu::weight_kernels(isa, type).repacked.activation_sums == (type == DType::q4_0 ? -8 : 0));
      }
}

TEST_CASE("repack_rows8 rejects what its layout does not cover", "[kernels][repack]") {
  std::vector<std::byte> src(18 * 8 * 2), dst(src.size());
  CHECK_FALSE(ember::cpu::rows8_layout_defined(DType::q8_0));
  CHECK_THROWS_AS(ember::cpu::repack_rows8(DType::q8_0, src.data(), 34, dst.data(), 8, 32), ember::Error);
  CHECK_THROWS_AS(ember::cpu::repack_rows8(DType::q4_0, src.data(), 18, dst.data(), 7, 32), ember::Error);
  CHECK_NOTHROW(ember::cpu::repack_rows8(DType::q4_0, src.data(), 36, dst.data(), 8, 64));
}

TEST_CASE("dot_tile over one activation row streams long rows in segments", "[kernels]") {
  // n = 32768 + 96: the decode path's activation buffer holds only part of the row for
  // every format, so partial sums of several segments are added (and a tail for the
  // 32-value formats' two-block steps).
  const int n_w = 3;
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      const int64_t block = quant::type_info(type).block_elems;
      // An odd count of steps beyond 32768 for every block size.
      const int64_t n = block == 256 ? 32768 + 512 : block > 32 ? 32768 + 3 * block : 32768 + 96;
      INFO(label(isa, type, n));
      const size_t w_row = quant::row_bytes(type, n);
      std::vector<std::byte> w(w_row * n_w);
      for (int r = 0; r < n_w; ++r) {
        const auto row = test::quantize(type, test::random_values(n, 7000 + uint32_t(r)));
        std::memcpy(w.data() + r * w_row, row.data(), row.size());
      }
      const auto a = test::quantize(k.activation_type, test::random_values(n, 8000));
      float out[n_w];
      k.dot_tile(w.data(), w_row, n_w, a.data(), a.size(), 1, out, 1, n);
      for (int r = 0; r < n_w; ++r) {
        const std::byte* wr = w.data() + r * w_row;
        const double expected = quant::dot_row(type, wr, a.data(), n);
        CHECK(std::fabs(double(out[r]) - expected) <=
              test::kSummationTolerance * test::dot_magnitude(type, wr, a.data(), n));
      }
    }
  }
}

TEST_CASE("kernels in llama.cpp's summation order are bit-exact with lib/quant", "[kernels][lanes]") {
  // Q8_0, Q5_0, Q4_K and Q6_K: every level performs the reference's float operations
  // in its order (quant/lanes.hpp), for one token (whole-row decode), for tiles of
  // tokens, and (Q4_K) in the grouped order of whole groups of 4 tokens.
  // 37 rows: whole groups of 16 (batched kernels) and a remainder; 35 tokens: more than
  // one group of 32 tokens.
  const int n_w = 37, n_x = 35;
  const size_t out_stride = 40;
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : {DType::q8_0, DType::q5_0, DType::q4_k, DType::q6_k}) {
      const auto& k = ember::cpu::weight_kernels(isa, type);
      // A packed path only where it keeps the order: Q8_0 at the AVX2 levels (rows8_i16.hpp).
      const bool avx2_level = isa == Isa::avx2 || isa == Isa::avx2vnni;
      CHECK((k.packed.dot_tile != nullptr) == (type == DType::q8_0 && avx2_level));
      CHECK((k.dot_tile_grouped != nullptr) == (type == DType::q4_k));
      const bool k_format = quant::type_info(type).block_elems == 256;
      const std::vector<int64_t> lengths = k_format ? std::vector<int64_t>{256, 768, 2048, 32768 + 256}
                                                    : std::vector<int64_t>{32, 96, 640, 2048, 32768 + 96};
      for (int64_t n : lengths) {
        INFO(label(isa, type, n));
        const size_t w_row = quant::row_bytes(type, n), a_row = quant::row_bytes(k.activation_type, n);
        std::vector<std::byte> w(w_row * n_w), a(a_row * n_x);
        for (int r = 0; r < n_w; ++r) {
          const auto row = test::quantize(type, test::random_values(n, 7000 + uint32_t(r * 13 + n)));
          std::memcpy(w.data() + r * w_row, row.data(), row.size());
        }
        for (int t = 0; t < n_x; ++t)
          k.quantize_activations(test::random_values(n, 8000 + uint32_t(t * 5 + n)).data(), a.data() + t * a_row, n);
        const auto expected = [&](int r, int t, bool grouped) {
          const std::byte* wr = w.data() + r * w_row;
          const std::byte* ar = a.data() + t * a_row;
          return grouped ? quant::ref::dot_q4_k_grouped(wr, ar, n) : quant::dot_row(type, wr, ar, n);
        };
        int mismatches = 0;
        for (int r = 0; r < n_w; ++r) mismatches += k.dot(w.data() + r * w_row, a.data(), n) != expected(r, 0, false);
        // One token: the decode path.
        std::vector<float> out(out_stride * n_x);
        k.dot_tile(w.data(), w_row, n_w, a.data(), a_row, 1, out.data(), out_stride, n);
        for (int r = 0; r < n_w; ++r) mismatches += out[size_t(r)] != expected(r, 0, false);
        // Tiles of tokens, plain and (Q4_K) grouped.
        for (const bool grouped : {false, true}) {
          const auto fn = grouped ? k.dot_tile_grouped : k.dot_tile;
          if (!fn) continue;
          fn(w.data(), w_row, n_w, a.data(), a_row, n_x, out.data(), out_stride, n);
          for (int t = 0; t < n_x; ++t)
            for (int r = 0; r < n_w; ++r) mismatches += out[t * out_stride + size_t(r)] != expected(r, t, grouped);
        }
        // Other token counts: the batch kernels' thresholds (AVX2 Q8_0: rows8_lanes
        // below 8 tokens, int16 codes from 8 on) and partial passes.
        for (int nx : {2, 7, 8, 13}) {
          std::fill(out.begin(), out.end(), 0.0f);
          k.dot_tile(w.data(), w_row, n_w, a.data(), a_row, nx, out.data(), out_stride, n);
          for (int t = 0; t < nx; ++t)
            for (int r = 0; r < n_w; ++r) mismatches += out[t * out_stride + size_t(r)] != expected(r, t, false);
        }
        // The packed path (rows packed once, as matmul does for prefill), same thresholds;
        // packed rows 24 bytes longer than row_bytes, so not 64-byte aligned.
        if (k.packed.dot_tile) {
          const size_t p_row = k.packed.row_bytes(n) + 24;
          std::vector<std::byte> p(p_row * n_x);
          for (int t = 0; t < n_x; ++t) k.packed.pack(a.data() + t * a_row, p.data() + t * p_row, n);
          for (int nx : {2, 7, 8, 13, n_x}) {
            std::fill(out.begin(), out.end(), 0.0f);
            k.packed.dot_tile(w.data(), w_row, n_w, p.data(), p_row, nx, out.data(), out_stride, n);
            for (int t = 0; t < nx; ++t)
              for (int r = 0; r < n_w; ++r) mismatches += out[t * out_stride + size_t(r)] != expected(r, t, false);
          }
        }
        // Weights repacked at load (Q4_K: rows8 layout): the first 32 rows, one token,
        // all tokens, and the grouped order.
        if (k.repacked.dot_tile) {
          const int n_r = n_w / 8 * 8;
          std::vector<std::byte> packed(w_row * size_t(n_r));
          ember::cpu::repack_rows8(type, w.data(), w_row, packed.data(), n_r, n);
          for (const bool grouped : {false, true}) {
            const auto fn = grouped ? k.repacked.dot_tile_grouped : k.repacked.dot_tile;
            if (!fn) continue;
            for (int nx : {1, 5, n_x}) {
              if (grouped && nx % 4 != 0) continue;
              std::fill(out.begin(), out.end(), 0.0f);
              fn(packed.data(), w_row, n_r, a.data(), a_row, nx, out.data(), out_stride, n);
              for (int t = 0; t < nx; ++t)
                for (int r = 0; r < n_r; ++r) mismatches += out[t * out_stride + size_t(r)] != expected(r, t, grouped);
            }
          }
          CHECK((k.repacked.dot_tile_grouped != nullptr) == (type == DType::q4_k));
        }
        CHECK(mismatches == 0);
      }
    }
  }
}
