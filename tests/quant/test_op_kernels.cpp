// The ops' per-level kernel tables (cpu/kernels/op_kernels.hpp): every level the CPU
// offers has one, EMBER_CPU_ISA selects each level, and the entries that are specified
// element by element give the scalar level's bits at every level.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "quant/dtype.hpp"
#include "quant/helpers.hpp"

namespace cpu = ember::cpu;
namespace quant = ember::quant;
using cpu::Isa;

namespace {

// EMBER_CPU_ISA as the test found it, restored when this goes out of scope.
class SavedIsaVariable {
 public:
  SavedIsaVariable() {
    const char* value = std::getenv("EMBER_CPU_ISA");
    saved_ = value != nullptr;
    if (saved_) value_ = value;
  }
  ~SavedIsaVariable() {
    if (saved_) {
      setenv("EMBER_CPU_ISA", value_.c_str(), 1);
    } else {
      unsetenv("EMBER_CPU_ISA");
    }
  }

 private:
  bool saved_ = false;
  std::string value_;
};

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Counts the elements whose bits differ.
int64_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += bits(a[i]) != bits(b[i]);
  return n;
}

// One level's decode-attention kernels on n rows whose exact values are `keys` and
// `values` (n x hd floats each), called as scores(q, s, ld) and pv(p, ld, acc), against
// sums in double: the scores scaled by 0.125 with nothing past n written (strides wider
// than the rows), P.V added to what acc held.
template <class Scores, class PV>
void check_scores_and_pv(std::mt19937& rng, std::normal_distribution<float>& normal, int group, int hd, int n,
                         const std::vector<float>& keys, const std::vector<float>& values, const Scores& scores,
                         const PV& pv) {
  std::vector<float> q(size_t(group) * hd);
  for (auto& x : q) x = normal(rng);
  const int ld = n + 3;
  std::vector<float> s(size_t(group) * ld, -7.0f);
  scores(q.data(), s.data(), ld);
  for (int g = 0; g < group; ++g) {
    for (int j = 0; j < n; ++j) {
      double want = 0.0, mag = 0.0;
      for (int d = 0; d < hd; ++d) {
        const double term = double(q[size_t(g * hd + d)]) * keys[size_t(j * hd + d)];
        want += term, mag += std::fabs(term);
      }
      CHECK(std::fabs(s[size_t(g * ld + j)] - 0.125 * want) <= 1e-6 * (0.125 * mag + 1e-3));
    }
    for (int j = n; j < ld; ++j) CHECK(s[size_t(g * ld + j)] == -7.0f);
  }
  std::vector<float> p(size_t(group) * ld), acc(size_t(group) * hd);
  for (auto& x : p) x = std::fabs(normal(rng));
  for (auto& x : acc) x = normal(rng);
  const std::vector<float> before = acc;
  pv(p.data(), ld, acc.data());
  for (int g = 0; g < group; ++g)
    for (int d = 0; d < hd; ++d) {
      double want = before[size_t(g * hd + d)], mag = std::fabs(want);
      for (int j = 0; j < n; ++j) {
        const double term = double(p[size_t(g * ld + j)]) * values[size_t(j * hd + d)];
        want += term, mag += std::fabs(term);
      }
      CHECK(std::fabs(acc[size_t(g * hd + d)] - want) <= 1e-6 * (mag + 1e-3));
    }
}

}  // namespace

TEST_CASE("op kernels: one table per level, selected by EMBER_CPU_ISA", "[kernels]") {
  const SavedIsaVariable saved;
  for (const Isa isa : cpu::available_isas()) {
    INFO(cpu::isa_name(isa));
    setenv("EMBER_CPU_ISA", std::string(cpu::isa_name(isa)).c_str(), 1);
    REQUIRE(cpu::best_isa() == isa);
    const cpu::OpKernels& k = cpu::op_kernels(cpu::best_isa());
    CHECK(k.level == cpu::op_level(isa));
    CHECK(cpu::op_level(k.level) == k.level);
    CHECK(&cpu::op_kernels(k.level) == &k);  // levels that share op code share the table
    const void* entries[] = {
        reinterpret_cast<const void*>(k.add_row),      reinterpret_cast<const void*>(k.mul_row),
        reinterpret_cast<const void*>(k.scale_row),    reinterpret_cast<const void*>(k.silu_glu_row),
        reinterpret_cast<const void*>(k.gelu_glu_row), reinterpret_cast<const void*>(k.scale_weighted),
        reinterpret_cast<const void*>(k.rotate_neox),  reinterpret_cast<const void*>(k.rotate_normal),
        reinterpret_cast<const void*>(k.to_f16),       reinterpret_cast<const void*>(k.f16_to_f32),
        reinterpret_cast<const void*>(k.dot_f16),      reinterpret_cast<const void*>(k.axpy_f16),
        reinterpret_cast<const void*>(k.dot_f32),      reinterpret_cast<const void*>(k.axpy_f32),
        reinterpret_cast<const void*>(k.dot64_f16),    reinterpret_cast<const void*>(k.dot64_f32),
        reinterpret_cast<const void*>(k.dot16_f16),    reinterpret_cast<const void*>(k.dot16_f32),
        reinterpret_cast<const void*>(k.gemm16),       reinterpret_cast<const void*>(k.reduce_lanes),
        reinterpret_cast<const void*>(k.exp_row),      reinterpret_cast<const void*>(k.exp_masked),
        reinterpret_cast<const void*>(k.exp_masked16),
        reinterpret_cast<const void*>(k.add_into),     reinterpret_cast<const void*>(k.scale_by),
        reinterpret_cast<const void*>(k.gemm_nt),      reinterpret_cast<const void*>(k.gemm_nn),
        reinterpret_cast<const void*>(k.kv_rows)};
    for (const void* entry : entries) CHECK(entry != nullptr);
    for (const quant::DType type : {quant::DType::kv_q8_g32, quant::DType::kv_q8_g64, quant::DType::kv_q4_g32,
                                    quant::DType::kv_q4_g64})
      CHECK(k.kv_rows(type) != nullptr);
    CHECK(k.kv_rows(quant::DType::f16) == nullptr);
    // A vector level runs its own code for the F16 conversions, the GELU row, the
    // attention rows and products and the quantized KV rows (tables.cpp).
    if (k.level != Isa::scalar) {
      const cpu::OpKernels& s = cpu::op_kernels(Isa::scalar);
      CHECK(k.to_f16 != s.to_f16);
      CHECK(k.f16_to_f32 != s.f16_to_f32);
      CHECK(k.gelu_glu_row != s.gelu_glu_row);
      CHECK(k.dot_f16 != s.dot_f16);
      CHECK(k.dot16_f32 != s.dot16_f32);
      CHECK(k.gemm16 != s.gemm16);
      CHECK(k.gemm_nt != s.gemm_nt);
      CHECK(k.gemm_nn != s.gemm_nn);
      for (const quant::DType type : {quant::DType::kv_q8_g32, quant::DType::kv_q4_g64})
        CHECK(k.kv_rows(type)->dot != s.kv_rows(type)->dot);
      // The fused decode-attention kernels: every vector level has its own (x86 and NEON).
      CHECK((k.scores_f16 != nullptr && k.scores_f16 != s.scores_f16));
      CHECK((k.pv_f16 != nullptr && k.pv_f16 != s.pv_f16));
      CHECK((k.scores_q8 != nullptr && k.scores_q8 != s.scores_q8));
      CHECK((k.pv_q8 != nullptr && k.pv_q8 != s.pv_q8));
      CHECK((k.scores_q4 != nullptr && k.scores_q4 != s.scores_q4));
      CHECK((k.pv_q4 != nullptr && k.pv_q4 != s.pv_q4));
    }
  }
  // Distinct op levels have distinct tables (the vector levels run their own code).
  const auto isas = cpu::available_isas();
  if (cpu::op_level(isas.back()) != Isa::scalar)
    CHECK(&cpu::op_kernels(isas.back()) != &cpu::op_kernels(Isa::scalar));
  // A level of the other architecture is not available here.
#if defined(__x86_64__)
  const Isa foreign = Isa::neon;
#else
  const Isa foreign = Isa::avx2;
#endif
  ember::test::expect_error([&] { (void)cpu::op_kernels(foreign); }, ember::ErrorCode::unsupported,
                            "cannot run the");
}

TEST_CASE("op kernels: elementwise entries give the scalar level's bits at every level", "[kernels]") {
  constexpr int64_t n = 1000;  // not a multiple of any vector width: tails are covered
  constexpr int half = 40;     // rotations: 2 * half values
  const std::vector<float> a = ember::test::random_values(n, 1), b = ember::test::random_values(n, 2);
  std::vector<float> gate = ember::test::random_values(n, 3);
  for (int64_t i = 0; i < n; i += 50) gate[size_t(i)] *= 40.0f;  // beyond GELU's +-10 cut-offs
  std::vector<uint16_t> f16(n);
  std::mt19937 rng(4);
  for (auto& h : f16)
    do h = uint16_t(rng()); while (((h >> 10) & 31) == 31);  // finite values only (F16C quiets NaNs)
  std::vector<float> cs(size_t(2 * half));
  for (int i = 0; i < half; ++i) {
    cs[size_t(2 * i)] = std::cos(0.1f * float(i));
    cs[size_t(2 * i + 1)] = std::sin(0.1f * float(i));
  }
  std::vector<float> scores = ember::test::random_values(n, 5);
  for (auto& s : scores) s *= 20.0f;

  // Every entry's output at one level, concatenated.
  auto outputs = [&](const cpu::OpKernels& k) {
    std::vector<float> all, out(n);
    auto keep = [&] { all.insert(all.end(), out.begin(), out.end()); };
    k.add_row(a.data(), b.data(), out.data(), n), keep();
    k.mul_row(a.data(), b.data(), out.data(), n), keep();
    k.scale_row(a.data(), 0.37f, out.data(), n), keep();
    k.silu_glu_row(gate.data(), b.data(), out.data(), n), keep();
    k.gelu_glu_row(gate.data(), b.data(), out.data(), n), keep();
    k.scale_weighted(a.data(), b.data(), 1.7f, out.data(), n), keep();
    k.scale_weighted(a.data(), nullptr, 1.7f, out.data(), n), keep();
    std::fill(out.begin(), out.end(), 0.0f);
    k.rotate_neox(a.data(), out.data(), cs.data(), half), keep();
    k.rotate_normal(a.data(), out.data(), cs.data(), half), keep();
    std::vector<uint16_t> h(n);
    k.to_f16(a.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = float(h[size_t(i)]);
    keep();
    k.f16_to_f32(f16.data(), out.data(), int(n)), keep();
    out = b;
    k.axpy_f16(out.data(), 0.3f, f16.data(), int(n)), keep();
    out = b;
    k.axpy_f32(out.data(), 0.3f, a.data(), int(n)), keep();
    out = scores;
    k.exp_row(out.data(), n, 20.0f), keep();
    std::vector<float> part(64 * 15);  // 64 lanes x 15 values
    for (size_t i = 0; i < part.size(); ++i) part[i] = a[i % size_t(n)];
    k.reduce_lanes(part.data(), 64, 15, out.data()), keep();
    const int m = 992;  // lanes16: a multiple of 16; lanes64: a tail after 15 x 64
    out.assign(size_t(n), 0.0f);
    out[0] = k.dot16_f16(a.data(), f16.data(), m);
    out[1] = k.dot16_f32(a.data(), b.data(), m);
    out[2] = k.dot64_f16(a.data(), f16.data(), m);
    out[3] = k.dot64_f32(a.data(), b.data(), n);
    k.gemm16(3, 5, 32, a.data(), 32, b.data(), 32, out.data() + 4, 5);
    keep();
    return all;
  };
  const std::vector<float> expected = outputs(cpu::op_kernels(Isa::scalar));
  for (const Isa isa : cpu::available_isas()) {
    INFO(cpu::isa_name(isa));
    CHECK(bit_mismatches(outputs(cpu::op_kernels(isa)), expected) == 0);
  }
}

// The fused decode-attention entries (attention_flash.cpp's lone-token path), where a level
// has them, against sums in double over the same F16 rows: every group size the
// register blocking splits (1..8 heads, 16), head sizes of one and several 64-column slices
// and a 16-column tail, and key counts around the 16-key and 32-row blocks.
TEST_CASE("op kernels: F16 decode-attention scores and P.V agree with double sums", "[kernels]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& k = cpu::op_kernels(isa);
    if (k.scores_f16 == nullptr) continue;
    REQUIRE(k.pv_f16 != nullptr);
    for (const int group : {1, 2, 3, 4, 5, 7, 8, 16})
      for (const int hd : {16, 64, 80, 256})
        for (const int n : {1, 15, 16, 17, 31, 33, 70}) {
          INFO(cpu::isa_name(isa) << " group " << group << " head_dim " << hd << " keys " << n);
          std::vector<uint16_t> keys(size_t(n) * hd), values(size_t(n) * hd);
          for (auto& h : keys) h = ember::fp32_to_fp16(normal(rng));
          for (auto& h : values) h = ember::fp32_to_fp16(normal(rng));
          std::vector<const uint16_t*> krows(static_cast<size_t>(n)), vrows(static_cast<size_t>(n));
          for (int j = 0; j < n; ++j) krows[size_t(j)] = keys.data() + size_t(j) * hd;
          for (int j = 0; j < n; ++j) vrows[size_t(j)] = values.data() + size_t(j) * hd;
          std::vector<float> kf(keys.size()), vf(values.size());
          for (size_t i = 0; i < keys.size(); ++i)
            kf[i] = ember::fp16_to_fp32(keys[i]), vf[i] = ember::fp16_to_fp32(values[i]);
          check_scores_and_pv(
              rng, normal, group, hd, n, kf, vf,
              [&](const float* q, float* s, int ld) { k.scores_f16(q, group, hd, krows.data(), n, 0.125f, s, ld); },
              [&](const float* p, int ld, float* acc) { k.pv_f16(p, ld, group, hd, vrows.data(), n, acc); });
        }
  }
}

// The INT8 decode-attention scores and P.V (KV_Q8_G32 / G64 rows read in place), where a level
// has them, against sums in double of q times the decoded values: both the keys-across-
// lanes form (small heads, wide groups) and the dims-across-lanes one, groups of 16
// heads split in 8s, blocks of 32 and 64, key counts around the 16-key blocks. A key
// count that is not a multiple of 16 must leave the scores past n untouched.
TEST_CASE("op kernels: INT8 decode-attention scores and P.V agree with double sums", "[kernels]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(-127, 127);
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& k = cpu::op_kernels(isa);
    if (k.scores_q8 == nullptr) continue;
    REQUIRE(k.pv_q8 != nullptr);
    for (const int gsize : {32, 64})
      for (const int group : {1, 3, 4, 8, 16})
        for (const int hd : {64, 128, 256})
          for (const int n : {1, 15, 16, 17, 40}) {
            INFO(cpu::isa_name(isa) << " block " << gsize << " group " << group << " head_dim " << hd << " keys " << n);
            const int block_bytes = gsize + 2, blocks = hd / gsize;
            std::vector<uint8_t> keys(size_t(n) * size_t(blocks * block_bytes));
            std::vector<float> decoded(size_t(n) * hd);
            for (int j = 0; j < n; ++j)
              for (int b = 0; b < blocks; ++b) {
                uint8_t* block = keys.data() + (size_t(j) * blocks + size_t(b)) * size_t(block_bytes);
                const uint16_t d = ember::fp32_to_fp16(0.01f + std::fabs(normal(rng)) * 0.02f);
                std::memcpy(block, &d, 2);
                for (int i = 0; i < gsize; ++i) {
                  const auto c = int8_t(code(rng));
                  block[2 + i] = uint8_t(c);
                  decoded[size_t(j * hd + b * gsize + i)] = ember::fp16_to_fp32(d) * float(c);
                }
              }
            std::vector<const uint8_t*> rows(static_cast<size_t>(n));
            for (int j = 0; j < n; ++j) rows[size_t(j)] = keys.data() + size_t(j) * size_t(blocks * block_bytes);
            check_scores_and_pv(
                rng, normal, group, hd, n, decoded, decoded,
                [&](const float* q, float* s, int ld) {
                  k.scores_q8(q, group, hd, gsize, rows.data(), n, 0.125f, s, ld);
                },
                [&](const float* p, int ld, float* acc) { k.pv_q8(p, ld, group, hd, gsize, rows.data(), n, acc); });
          }
  }
}

// The INT4 entries likewise (KV_Q4_G32 / G64 rows in their stored domain, y = d * code
// + m; element i of a block in the low nibble of byte i, element i + G/2 in the high one).
TEST_CASE("op kernels: INT4 decode-attention scores and P.V agree with double sums", "[kernels]") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> code(0, 15);
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& k = cpu::op_kernels(isa);
    if (k.scores_q4 == nullptr) continue;
    REQUIRE(k.pv_q4 != nullptr);
    for (const int gsize : {32, 64})
      for (const int group : {1, 3, 4, 8, 16})
        for (const int hd : {64, 128, 256})
          for (const int n : {1, 15, 16, 17, 40}) {
            INFO(cpu::isa_name(isa) << " block " << gsize << " group " << group << " head_dim " << hd << " keys " << n);
            const int half = gsize / 2, block_bytes = half + 4, blocks = hd / gsize;
            std::vector<uint8_t> rows_bytes(size_t(n) * size_t(blocks * block_bytes));
            std::vector<float> decoded(size_t(n) * hd);
            for (int j = 0; j < n; ++j)
              for (int b = 0; b < blocks; ++b) {
                uint8_t* block = rows_bytes.data() + (size_t(j) * blocks + size_t(b)) * size_t(block_bytes);
                const uint16_t d = ember::fp32_to_fp16(0.01f + std::fabs(normal(rng)) * 0.1f);
                const uint16_t m = ember::fp32_to_fp16(normal(rng));
                std::memcpy(block, &d, 2);
                std::memcpy(block + 2, &m, 2);
                for (int i = 0; i < half; ++i) {
                  const int lo = code(rng), hi = code(rng);
                  block[4 + i] = uint8_t(lo | hi << 4);
                  decoded[size_t(j * hd + b * gsize + i)] = ember::fp16_to_fp32(d) * float(lo) + ember::fp16_to_fp32(m);
                  decoded[size_t(j * hd + b * gsize + half + i)] =
                      ember::fp16_to_fp32(d) * float(hi) + ember::fp16_to_fp32(m);
                }
              }
            std::vector<const uint8_t*> rows(static_cast<size_t>(n));
            for (int j = 0; j < n; ++j) rows[size_t(j)] = rows_bytes.data() + size_t(j) * size_t(blocks * block_bytes);
            check_scores_and_pv(
                rng, normal, group, hd, n, decoded, decoded,
                [&](const float* q, float* s, int ld) {
                  k.scores_q4(q, group, hd, gsize, rows.data(), n, 0.125f, s, ld);
                },
                [&](const float* p, int ld, float* acc) { k.pv_q4(p, ld, group, hd, gsize, rows.data(), n, acc); });
          }
  }
}

// pv_lanes_f16 is axpy_f16 over slices of many rows: the lane partials it leaves must be
// the bits that axpy_f16 row by row leaves (attention.cpp relies on it for llama.cpp's
// sums).
TEST_CASE("op kernels: pv_lanes_f16 gives axpy_f16's bits", "[kernels]") {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int levels_with_it = 0;
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& k = cpu::op_kernels(isa);
    if (k.pv_lanes_f16 == nullptr) continue;
    ++levels_with_it;
    for (const int lanes : {16, 64})
      for (const int group : {1, 3, 4, 6})
        for (const int hd : {16, 64, 96, 256})
          for (const int n : {1, 17, 130}) {
            INFO(cpu::isa_name(isa) << " lanes " << lanes << " group " << group << " head_dim " << hd << " rows " << n);
            const int width = hd + 16;  // rows are slices of wider cache rows
            std::vector<uint16_t> values(size_t(n) * width);
            for (uint16_t& v : values) v = ember::fp32_to_fp16(normal(rng));
            std::vector<const uint16_t*> rows(static_cast<size_t>(n));
            std::vector<int32_t> lane(static_cast<size_t>(n));
            std::vector<float> w(size_t(group) * n);
            for (int j = 0; j < n; ++j) {
              rows[size_t(j)] = values.data() + size_t(j) * width + 8;
              lane[size_t(j)] = int32_t((j * 7 + 3) % lanes);  // lanes revisited out of order
            }
            for (float& x : w) x = normal(rng);
            // Row by row with axpy_f16 over the whole head.
            std::vector<float> want(size_t(group) * lanes * hd, 0.0f);
            for (int j = 0; j < n; ++j)
              for (int g = 0; g < group; ++g)
                k.axpy_f16(want.data() + (size_t(g) * lanes + size_t(lane[size_t(j)])) * hd, w[size_t(g) * n + j],
                           rows[size_t(j)], hd);
            // Slice by slice of `cols` columns (16, the level's own width, and wider).
            for (const int cols : {16, 32, 48, 64, k.pv_lanes_cols, hd}) {
              if (cols <= 0 || hd % cols != 0) continue;
              INFO("slice " << cols);
              for (int c0 = 0; c0 < hd; c0 += cols) {
                std::vector<float> part(size_t(group) * lanes * cols, 0.0f);
                k.pv_lanes_f16(w.data(), n, group, rows.data(), lane.data(), n, c0, cols, lanes, part.data());
                bool same = true;
                for (int g = 0; g < group; ++g)
                  for (int l = 0; l < lanes; ++l)
                    for (int c = 0; c < cols; ++c)
                      same = same && std::memcmp(&part[(size_t(g) * lanes + size_t(l)) * cols + size_t(c)],
                                                 &want[(size_t(g) * lanes + size_t(l)) * hd + size_t(c0 + c)],
                                                 sizeof(float)) == 0;
                CHECK(same);
              }
            }
          }
  }
  for (const Isa isa : cpu::available_isas())
    if (isa == Isa::avx2) CHECK(levels_with_it > 0);  // the AVX2 and AVX-512 levels have it
}

// exp_masked and exp_masked16: -inf entries become 0, the rest e^(s - max) within
// exp_approx's 3e-7, and the returned sum is theirs.
TEST_CASE("op kernels: exp_masked zeroes masked entries and returns the sum", "[kernels]") {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (const Isa isa : cpu::available_isas())
    for (const int64_t n : {1, 15, 16, 17, 100}) {
      INFO(cpu::isa_name(isa) << " n " << n);
      std::vector<float> s(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) s[size_t(j)] = j % 7 == 3 ? kNegInf : -0.25f * float(j % 11);
      for (const bool lanes : {false, true}) {
        std::vector<float> e = s;
        const cpu::OpKernels& k = cpu::op_kernels(isa);
        const float total = (lanes ? k.exp_masked16 : k.exp_masked)(e.data(), n, 0.5f);
        double want_total = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          const double want = s[size_t(j)] == kNegInf ? 0.0 : std::exp(double(s[size_t(j)]) - 0.5);
          CHECK(std::fabs(e[size_t(j)] - want) <= 1e-6 * want);
          want_total += want;
        }
        CHECK(std::fabs(total - want_total) <= 1e-6 * want_total);
      }
    }
}

TEST_CASE("op kernels: the f32 GEMMs match a double-precision product at every level", "[kernels]") {
  // Shapes on both sides of the register tiles' edges (4 rows; 4 and 16 columns; depths
  // in steps of 4 and 16) and larger leading strides than the rows need.
  const int rows[] = {1, 2, 3, 4, 5, 8, 17};
  const int cols[] = {1, 3, 4, 5, 15, 16, 17, 33, 64};
  const int depths[] = {1, 3, 4, 7, 16, 31, 64, 65, 128};
  constexpr float kAlpha = 0.125f, kSentinel = 1234.5f;
  const std::vector<float> a_values = ember::test::random_values(17 * 140, 21);
  const std::vector<float> b_values = ember::test::random_values(140 * 70, 22);
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& ops = cpu::op_kernels(isa);
    for (const int m : rows)
      for (const int n : cols)
        for (const int k : depths) {
          INFO(cpu::isa_name(isa) << " m " << m << " n " << n << " k " << k);
          // Rounding bound of a k-term f32 sum in any order (FMAs or not), plus alpha's.
          const double tolerance = 1.2e-7 * (k + 2);
          // gemm_nt: C[m][n] = alpha A[m][k] B[n][k]^T; A, B, C with strides k + 3, k + 5, n + 2.
          const int lda = k + 3, ldb = k + 5, ldc = n + 2;
          std::vector<float> c(size_t(m) * ldc, kSentinel);
          ops.gemm_nt(m, n, k, a_values.data(), lda, b_values.data(), ldb, c.data(), ldc, kAlpha);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              double exact = 0.0, magnitude = 0.0;
              for (int t = 0; t < k; ++t) {
                const double p = double(a_values[size_t(i * lda + t)]) * b_values[size_t(j * ldb + t)];
                exact += p;
                magnitude += std::abs(p);
              }
              REQUIRE(std::abs(c[size_t(i * ldc + j)] - kAlpha * exact) <= tolerance * kAlpha * magnitude);
            }
            for (int j = n; j < ldc; ++j) REQUIRE(c[size_t(i * ldc + j)] == kSentinel);  // no writes past n
          }
          // gemm_nn: C[m][n] = A[m][k] B[k][n]; strides k + 2, n + 3, n + 1.
          const int lda_nn = k + 2, ldb_nn = n + 3, ldc_nn = n + 1;
          std::vector<float> d(size_t(m) * ldc_nn, kSentinel);
          ops.gemm_nn(m, n, k, a_values.data(), lda_nn, b_values.data(), ldb_nn, d.data(), ldc_nn);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              double exact = 0.0, magnitude = 0.0;
              for (int t = 0; t < k; ++t) {
                const double p = double(a_values[size_t(i * lda_nn + t)]) * b_values[size_t(t * ldb_nn + j)];
                exact += p;
                magnitude += std::abs(p);
              }
              REQUIRE(std::abs(d[size_t(i * ldc_nn + j)] - exact) <= tolerance * magnitude);
            }
            REQUIRE(d[size_t(i * ldc_nn + n)] == kSentinel);
          }
        }
  }
}

TEST_CASE("op kernels: few-row f32 GEMMs sum each element alike whatever the shape", "[kernels]") {
  // Batch-invariant attention (speculative verification, the Engine; SumOrder::batch_invariant)
  // scores one query token's heads (a few rows) against tiles whose width depends on which
  // other cells the step holds, and multiplies probabilities that are zero for cells it must
  // not see. A score or output element must not change with the tile's width, the number of
  // rows, or zero-probability terms after it: the same bits as the product of its row and
  // column alone. Depths are head sizes (multiples of 16), widths odd and even.
  const int rows[] = {1, 2, 3, 4, 5, 8, 16};
  const int widths[] = {1, 5, 16, 17, 37, 64};
  const int depths[] = {64, 128, 256};
  const std::vector<float> a_values = ember::test::random_values(16 * 256, 31);
  const std::vector<float> b_values = ember::test::random_values(80 * 256, 32);
  constexpr float kAlpha = 0.0625f;
  for (const Isa isa : cpu::available_isas()) {
    const cpu::OpKernels& ops = cpu::op_kernels(isa);
    for (const int m : rows)
      for (const int k : depths) {
        INFO(cpu::isa_name(isa) << " m " << m << " k " << k);
        // gemm_nt: every score equals the 1 x 1 product of its query row and key row.
        for (const int n : widths) {
          std::vector<float> c(size_t(m) * n), one(1);
          ops.gemm_nt(m, n, k, a_values.data(), k, b_values.data(), k, c.data(), n, kAlpha);
          int64_t differ = 0;
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
              ops.gemm_nt(1, 1, k, a_values.data() + size_t(i) * k, k, b_values.data() + size_t(j) * k, k, one.data(),
                          1, kAlpha);
              differ += bits(one[0]) != bits(c[size_t(i) * n + j]);
            }
          INFO("gemm_nt n " << n);
          CHECK(differ == 0);
        }
        // gemm_nn: m probability rows over `cells` value rows of width k; each output row
        // equals its 1-row product, and zero probabilities after the cells change nothing.
        for (const int cells : {5, 37, 64}) {
          const int padded = cells + 11;
          std::vector<float> p(size_t(m) * padded, 0.0f);
          for (int i = 0; i < m; ++i)
            for (int t = 0; t < cells; ++t) p[size_t(i) * padded + t] = std::abs(a_values[size_t(i) * 256 + t]);
          std::vector<float> out(size_t(m) * size_t(k)), out_padded(size_t(m) * size_t(k)), row(static_cast<size_t>(k));
          ops.gemm_nn(m, k, cells, p.data(), padded, b_values.data(), k, out.data(), k);
          ops.gemm_nn(m, k, padded, p.data(), padded, b_values.data(), k, out_padded.data(), k);
          INFO("gemm_nn cells " << cells);
          CHECK(bit_mismatches(out, out_padded) == 0);
          for (int i = 0; i < m; ++i) {
            ops.gemm_nn(1, k, cells, p.data() + size_t(i) * padded, padded, b_values.data(), k, row.data(), k);
            CHECK(bit_mismatches(row, std::vector<float>(out.begin() + int64_t(i) * k,
                                                         out.begin() + int64_t(i + 1) * k)) == 0);
          }
        }
      }
  }
}
