// lib/quant: block layouts against hand-built blocks, quantizer rounding rules,
// round-trip error bounds, and the reference dot products against dequantized data.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/fp16.hpp"
#include "ember/error.hpp"
#include "quant/blocks.hpp"
#include "quant/quant.hpp"
#include "quant/helpers.hpp"

using ember::ErrorCode;
using ember::quant::DType;
namespace quant = ember::quant;
namespace test = ember::test;

namespace {

template <class Block>
std::vector<float> dequantize_block(DType type, const Block& block, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  quant::dequantize_row(type, &block, out.data(), n);
  return out;
}

// Throws with `code` and a message containing `text`.
template <class F>
void require_error(F&& f, ErrorCode code, const std::string& text) {
  try {
    f();
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(e.code() == code);
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(text));
  }
}

}  // namespace

TEST_CASE("activation types follow the llama.cpp pairing", "[quant]") {
  CHECK(quant::activation_type(DType::f32) == DType::f32);
  CHECK(quant::activation_type(DType::f16) == DType::f32);
  CHECK(quant::activation_type(DType::bf16) == DType::f32);
  CHECK(quant::activation_type(DType::q8_0) == DType::q8_0);
  CHECK(quant::activation_type(DType::q4_0) == DType::q8_0);
  CHECK(quant::activation_type(DType::q5_0) == DType::q8_0);
  CHECK(quant::activation_type(DType::q4_1) == DType::q8_1);
  CHECK(quant::activation_type(DType::q5_1) == DType::q8_1);
  CHECK(quant::activation_type(DType::q4_k) == DType::q8_k);
  CHECK(quant::activation_type(DType::q5_k) == DType::q8_k);
  CHECK(quant::activation_type(DType::q6_k) == DType::q8_k);
}

TEST_CASE("bad types and lengths are reported", "[quant][errors]") {
  std::vector<std::byte> buf(1024);
  std::vector<float> f(256);
  require_error([&] { quant::dot_row(DType::q2_k, buf.data(), buf.data(), 256); }, ErrorCode::unsupported, "Q2_K");
  require_error([&] { quant::dot_row(DType::q8_k, buf.data(), buf.data(), 256); }, ErrorCode::unsupported,
                "Q8_K is not a weight type");
  require_error([&] { quant::activation_type(DType::i32); }, ErrorCode::unsupported, "I32");
  require_error([&] { quant::dequantize_row(DType::q4_0, buf.data(), f.data(), 33); }, ErrorCode::invalid_argument,
                "33 values is not a multiple of the Q4_0 block size 32");
  require_error([&] { quant::quantize_row(DType::q6_k, f.data(), buf.data(), 128); }, ErrorCode::invalid_argument,
                "block size 256");
  require_error([&] { quant::dot_row_exact(DType::q8_0, buf.data(), f.data(), -32); }, ErrorCode::invalid_argument,
                "-32 values");
}

TEST_CASE("Q4_0 and Q5_0 code positions", "[quant][layout]") {
  quant::BlockQ4_0 q4{};
  q4.d = ember::fp32_to_fp16(0.5f);
  for (int i = 0; i < 16; ++i) q4.qs[i] = uint8_t(i | (15 - i) << 4);
  const auto v = dequantize_block(DType::q4_0, q4, 32);
  for (int i = 0; i < 16; ++i) {
    CHECK(v[size_t(i)] == 0.5f * float(i - 8));
    CHECK(v[size_t(16 + i)] == 0.5f * float(15 - i - 8));
  }

  quant::BlockQ5_0 q5{};
  q5.d = ember::fp32_to_fp16(2.0f);
  const uint32_t qh = 0x80000001u;  // fifth bit of values 0 and 31
  std::memcpy(q5.qh, &qh, 4);
  for (int i = 0; i < 16; ++i) q5.qs[i] = 0x33;  // low bits 3 everywhere
  const auto w = dequantize_block(DType::q5_0, q5, 32);
  CHECK(w[0] == 2.0f * float(19 - 16));
  CHECK(w[31] == 2.0f * float(19 - 16));
  for (int i = 1; i < 31; ++i) CHECK(w[size_t(i)] == 2.0f * float(3 - 16));
}

TEST_CASE("Q4_1 and Q5_1 offsets", "[quant][layout]") {
  quant::BlockQ4_1 q4{};
  q4.d = ember::fp32_to_fp16(0.25f);
  q4.m = ember::fp32_to_fp16(-1.0f);
  q4.qs[0] = 0xf0;  // value 0: code 0, value 16: code 15
  const auto v = dequantize_block(DType::q4_1, q4, 32);
  CHECK(v[0] == -1.0f);
  CHECK(v[16] == 0.25f * 15 - 1.0f);

  quant::BlockQ5_1 q5{};
  q5.d = ember::fp32_to_fp16(1.0f);
  q5.m = ember::fp32_to_fp16(3.0f);
  q5.qh[2] = 0x01;  // bit 16: value 16 (high nibble of qs[0])
  q5.qs[0] = 0x20;
  const auto w = dequantize_block(DType::q5_1, q5, 32);
  CHECK(w[0] == 3.0f);
  CHECK(w[16] == float(16 + 2) + 3.0f);
}

TEST_CASE("K-format 6-bit scales pack and unpack", "[quant][layout]") {
  uint8_t sc[8], mn[8], packed[12];
  for (int j = 0; j < 8; ++j) sc[j] = uint8_t(63 - 5 * j), mn[j] = uint8_t(17 + 6 * j);
  quant::pack_k_scales(sc, mn, packed);
  const quant::KScales s = quant::unpack_k_scales(packed);
  for (int j = 0; j < 8; ++j) {
    CHECK(s.sc[j] == sc[j]);
    CHECK(s.mn[j] == mn[j]);
  }
}

TEST_CASE("Q4_K and Q5_K sub-block layout", "[quant][layout]") {
  quant::BlockQ5_K blk{};
  blk.d = ember::fp32_to_fp16(1.0f);
  blk.dmin = ember::fp32_to_fp16(0.5f);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) sc[j] = uint8_t(j + 1), mn[j] = uint8_t(2 * j + 40);
  quant::pack_k_scales(sc, mn, blk.scales);
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) blk.qs[32 * g + l] = uint8_t((l % 16) | ((15 - l % 16) << 4));
  blk.qh[5] = 0xa5;  // fifth bit of value 5 in sub-blocks 0, 2, 5, 7
  const auto v = dequantize_block(DType::q5_k, blk, 256);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      int q = j % 2 ? 15 - l % 16 : l % 16;
      if (l == 5 && ((0xa5 >> j) & 1)) q += 16;
      CHECK(v[size_t(32 * j + l)] == float(sc[j]) * float(q) - 0.5f * float(mn[j]));
    }

  // Q4_K shares the layout without qh; blk's first bytes line up with a Q4_K block.
  quant::BlockQ4_K q4{};
  q4.d = blk.d;
  q4.dmin = blk.dmin;
  std::memcpy(q4.scales, blk.scales, 12);
  std::memcpy(q4.qs, blk.qs, 128);
  const auto w = dequantize_block(DType::q4_k, q4, 256);
  CHECK(w[32 * 3 + 2] == 4.0f * float(13) - 0.5f * float(46));
  CHECK(w[32 * 6 + 31] == 7.0f * float(15) - 0.5f * float(52));
}

TEST_CASE("Q6_K code positions", "[quant][layout]") {
  // Every code 32 (value 0) except one code 33 at position i: only value i is non-zero.
  for (int i = 0; i < 256; i += 7) {
    std::vector<float> x(256, 0.0f);
    quant::BlockQ6_K blk{};
    blk.d = ember::fp32_to_fp16(1.0f);
    for (int j = 0; j < 16; ++j) blk.scales[j] = int8_t(j - 8);
    // Code 32 = 0b100000: high bits 2, low 0; code 33 adds low bit 1.
    for (int p = 0; p < 64; ++p) blk.qh[p] = 0xaa;
    const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    blk.ql[64 * h + l + 32 * (quarter & 1)] |= uint8_t(1 << (quarter < 2 ? 0 : 4));
    const auto v = dequantize_block(DType::q6_k, blk, 256);
    for (int k = 0; k < 256; ++k) CHECK(v[size_t(k)] == (k == i ? float(i / 16 - 8) : 0.0f));
  }
}

TEST_CASE("activation quantizers round half to even, as llama.cpp's x86 code", "[quant][rounding]") {
  std::vector<float> x(256, 0.0f);
  x[0] = 127.0f;  // amax 127: scale 1 in every format
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 3.5f;
  x[4] = 0.5f;
  x[5] = -126.6f;

  quant::BlockQ8_0 q8[8];
  quant::quantize_row(DType::q8_0, x.data(), q8, 256);
  CHECK(q8[0].d == 0x3c00);  // fp16 1.0
  CHECK(q8[0].qs[0] == 127);
  CHECK(q8[0].qs[1] == 2);
  CHECK(q8[0].qs[2] == -2);
  CHECK(q8[0].qs[3] == 4);
  CHECK(q8[0].qs[4] == 0);
  CHECK(q8[0].qs[5] == -127);
  CHECK(q8[1].d == 0);  // all-zero block

  quant::BlockQ8_1 q81[8];
  quant::quantize_row(DType::q8_1, x.data(), q81, 256);
  CHECK(q81[0].qs[1] == 2);
  CHECK(ember::fp16_to_fp32(q81[0].s) == float(127 + 2 - 2 + 4 + 0 - 127));

  quant::BlockQ8_K q8k;
  quant::quantize_row(DType::q8_k, x.data(), &q8k, 256);
  CHECK(q8k.d == 1.0f);
  CHECK(q8k.qs[0] == 127);
  CHECK(q8k.qs[1] == 2);
  CHECK(q8k.qs[2] == -2);
  CHECK(q8k.qs[3] == 4);
  CHECK(q8k.qs[4] == 0);
  CHECK(q8k.qs[5] == -127);
  CHECK(q8k.bsums[0] == 127 + 2 - 2 + 4 - 127);
  CHECK(q8k.bsums[1] == 0);

  std::vector<float> zeros(256, 0.0f);
  quant::quantize_row(DType::q8_k, zeros.data(), &q8k, 256);
  CHECK(q8k.d == 0.0f);
  CHECK(q8k.qs[17] == 0);
}

TEST_CASE("Q4_0 quantizer maps the largest magnitude to code 0", "[quant][rounding]") {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i) - 16.0f;  // -16 .. 15: max magnitude -16
  quant::BlockQ4_0 b;
  quant::quantize_row(DType::q4_0, x.data(), &b, 32);
  CHECK(ember::fp16_to_fp32(b.d) == 2.0f);  // -16 / -8
  CHECK((b.qs[0] & 15) == 0);               // -16 / 2 + 8.5 -> 0
  CHECK((b.qs[15] >> 4) == 15);             // 15 / 2 + 8.5 = 16 -> clamped to 15
}

namespace {

struct RoundTrip {
  DType type;
  double max_error;  // of |x - x'| / (largest |x| in x's block)
  double rms_error;  // of sqrt(sum (x - x')^2 / sum x^2) over the row
};

// Max bounds derived from each format's step (d / 2 per value with d = amax / 127,
// amax / 8 at Q4_0's clamped end, ...) plus fp16 rounding of the scales. RMS bounds
// and the K formats' max bounds (ember's simple quantizer, whose 6/8-bit scale
// coding adds up to a step) are measured on this data (seed 1234) with ~1.2-1.5x margin:
// F16 4.7e-4 / 2.1e-4, BF16 3.7e-3 / 1.7e-3, Q8_0 4.1e-3 / 5.2e-3, Q4_0 0.124 / 0.082,
// Q5_0 0.061 / 0.041, Q4_1 0.066 / 0.076, Q5_1 0.032 / 0.036, Q4_K 0.066 / 0.076,
// Q5_K 0.032 / 0.037, Q6_K 0.025 / 0.019, Q8_K 3.9e-3 / 9.9e-3 (max / rms). Q4_G128 and
// Q4_G64 (relative to the largest magnitude of the whole group): max d / 2 <= 1/15 of it
// plus fp16 rounding, rms measured 0.134 / 0.103. Q8_W: one scale for the whole 4096
// values (one row), so a block of small values keeps the row's step: max measured
// 0.229 of the block's largest magnitude, rms 0.0141. Q8_WR: the same step, spread by the
// rotation over each group of 64 (its block), so small values get errors from their
// group's larger ones: max measured 0.327 of the group's largest magnitude, rms 0.0148.
const RoundTrip kRoundTrips[] = {
    {DType::f32, 0.0, 0.0},         {DType::f16, 1.0 / 2048, 3e-4},   {DType::bf16, 1.0 / 256, 2.5e-3},
    {DType::q8_0, 0.0045, 0.007},   {DType::q4_0, 0.126, 0.10},       {DType::q5_0, 0.0632, 0.05},
    {DType::q4_1, 0.071, 0.08},     {DType::q5_1, 0.036, 0.04},       {DType::q4_k, 0.10, 0.09},
    {DType::q5_k, 0.05, 0.045},      {DType::q6_k, 0.035, 0.022},       {DType::q8_1, 0.0045, 0.007},
    {DType::q8_k, 0.0045, 0.013},       {DType::q4_g128, 0.068, 0.17},     {DType::q4_g64, 0.068, 0.13},
    {DType::q8_w, 0.25, 0.02},      {DType::q8_wr, 0.4, 0.02},
};

}  // namespace

TEST_CASE("quantize then dequantize stays within each format's error bound", "[quant][roundtrip]") {
  // Every weight type of the registry has a bound here.
  for (DType type : quant::weight_types()) {
    bool listed = false;
    for (const RoundTrip& rt : kRoundTrips) listed |= rt.type == type;
    INFO(quant::type_name(type));
    CHECK(listed);
  }
  for (const RoundTrip& rt : kRoundTrips) {
    const int64_t n = 4096;
    // Errors relative to the largest magnitude of the block (32 values for plain types).
    const int64_t group = quant::type_info(rt.type).block_elems == 1 ? 32 : quant::type_info(rt.type).block_elems;
    const auto x = test::random_values(n, 1234);
    const auto q = test::quantize(rt.type, x);
    const auto y = test::dequantize(rt.type, q.data(), n);
    double worst = 0.0, err2 = 0.0, sum2 = 0.0;
    for (int64_t b = 0; b < n; b += group) {
      double amax = 0.0;
      for (int64_t i = b; i < b + group; ++i) amax = std::max(amax, double(std::fabs(x[size_t(i)])));
      for (int64_t i = b; i < b + group; ++i) {
        const double e = std::fabs(double(x[size_t(i)]) - double(y[size_t(i)]));
        worst = std::max(worst, amax > 0 ? e / amax : e);
        err2 += e * e;
        sum2 += double(x[size_t(i)]) * double(x[size_t(i)]);
      }
    }
    INFO(quant::type_name(rt.type) << ": max " << worst << " rms " << std::sqrt(err2 / sum2));
    CHECK(worst <= rt.max_error);
    CHECK(std::sqrt(err2 / sum2) <= rt.rms_error);
    if (rt.type == DType::f32) CHECK(worst == 0.0);
  }
}

TEST_CASE("Q8_WR: the rotation keeps W8A8 products exact in law and spreads activation outliers",
          "[quant][q8_wr]") {
  // Activations with a few channels 60x the rest (as a transformer's ffn_down inputs
  // have): one scale per token sets Q8_T's step by them, and every other channel is
  // rounded to that step. Rotated per group of 32, an outlier is spread over its group,
  // whose step then follows the group's norm.
  const int64_t n = 2048, rows = 64;
  std::mt19937 rng(4242);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n), 0.0f);
  for (float& v : x) v = normal(rng);
  for (int64_t c : {17, 600, 1031, 1990}) x[size_t(c)] = (c % 2 ? 60.0f : -60.0f);
  const std::vector<float> w = test::random_values(n * rows, 4343);
  double err2[2] = {0, 0}, ref2 = 0;
  for (int k = 0; k < 2; ++k) {
    const DType wt = k == 0 ? DType::q8_w : DType::q8_wr;
    const auto a = test::quantize(quant::activation_type(wt), x);
    // The rotated activations decode back to x (the rotation is undone exactly up to f32).
    // The rotated activations decode back to x up to the rounding of the codes: rms
    // error below the per-token step of Q8_T over sqrt(12) (the rotation keeps norms).
    const auto back = test::dequantize(quant::activation_type(wt), a.data(), n);
    double back2 = 0;
    for (int64_t i = 0; i < n; ++i) back2 += std::pow(double(back[size_t(i)]) - x[size_t(i)], 2);
    INFO(quant::type_name(wt) << ": rms error of the decoded activations " << std::sqrt(back2 / double(n)));
    CHECK(std::sqrt(back2 / double(n)) <= 60.0 / 127 / std::sqrt(12.0) * 1.1);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(w.begin() + r * n, w.begin() + (r + 1) * n);
      const auto q = test::quantize(wt, row);
      // Against the decoded weights: what is left is the activations' rounding.
      const auto wq = test::dequantize(wt, q.data(), n);
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) exact += double(wq[size_t(i)]) * double(x[size_t(i)]);
      const double got = quant::dot_row(wt, q.data(), a.data(), n);
      err2[k] += (got - exact) * (got - exact);
      if (k == 0) ref2 += exact * exact;
    }
  }
  const double rel_w = std::sqrt(err2[0] / ref2), rel_wr = std::sqrt(err2[1] / ref2);
  INFO("relative rms error of the products: Q8_W " << rel_w << ", Q8_WR " << rel_wr);
  CHECK(rel_wr < 0.4 * rel_w);
}

TEST_CASE("dot_row equals the dot product of the dequantized rows", "[quant][dot]") {
  // dot_row works on integer codes; the same data dequantized and multiplied in double
  // must agree up to float rounding of the per-block scale products.
  for (DType type : quant::weight_types()) {
    for (int64_t n : test::test_lengths(type)) {
      const auto w = test::quantize(type, test::random_values(n, 7 + uint32_t(n)));
      const auto a = test::quantize(quant::activation_type(type), test::random_values(n, 99 + uint32_t(n)));
      const auto wf = test::dequantize(type, w.data(), n);
      const auto af = test::dequantize(quant::activation_type(type), a.data(), n);
      double expected = 0.0;
      for (int64_t i = 0; i < n; ++i) expected += double(wf[size_t(i)]) * double(af[size_t(i)]);
      // Q4_1 / Q5_1 carry the min through Q8_1's fp16 sum s instead of the exact sum of
      // the dequantized activations: allow that rounding (2^-11 of sum |a| per block).
      const bool fp16_sum = quant::activation_type(type) == DType::q8_1;
      const double tol = test::dot_magnitude(type, w.data(), a.data(), n) * (fp16_sum ? 2e-3 : 2e-6);
      INFO(quant::type_name(type) << " n=" << n);
      CHECK(std::fabs(double(quant::dot_row(type, w.data(), a.data(), n)) - expected) <= tol);
    }
  }
}

TEST_CASE("dot_row stays within the activation rounding of dot_row_exact", "[quant][dot]") {
  // The only difference is the rounding of x to 8 bits: |x - a| <= amax/254 per value
  // plus the fp16 scale (2^-11 relative), so |dot_row - exact| <= C * sum |w_i| * amax(block of i).
  for (DType type : quant::weight_types()) {
    const int64_t n = 4096;
    const auto x = test::random_values(n, 555);
    const auto w = test::quantize(type, test::random_values(n, 556));
    const DType act = quant::activation_type(type);
    const auto wf = test::dequantize(type, w.data(), n);
    const double exact = quant::dot_row_exact(type, w.data(), x.data(), n);
    double bound = 0.0, magnitude = 0.0;
    const int64_t group = act == DType::f32 ? 1 : int64_t(quant::type_info(act).block_elems);
    for (int64_t b = 0; b < n; b += group) {
      double amax = 0.0, wsum = 0.0;
      for (int64_t i = b; i < b + group; ++i) {
        amax = std::max(amax, double(std::fabs(x[size_t(i)])));
        wsum += std::fabs(wf[size_t(i)]);
        magnitude += std::fabs(double(wf[size_t(i)]) * x[size_t(i)]);
      }
      bound += wsum * amax;
    }
    const double c = act == DType::f32 ? 0.0 : act == DType::q8_k ? 1.0 / 254 : 1.0 / 254 + 1.0 / 2048;
    std::vector<std::byte> a(quant::row_bytes(act, n));
    quant::quantize_row(act, x.data(), a.data(), n);
    const double got = quant::dot_row(type, w.data(), a.data(), n);
    INFO(quant::type_name(type) << ": dot_row " << got << " exact " << exact);
    CHECK(std::fabs(got - exact) <= c * bound + 1e-6 * magnitude + (act == DType::q8_1 ? 1e-3 * magnitude : 0.0));
    // And the result is not trivially small: the rows are not orthogonal by accident.
    CHECK(magnitude > 0.0);
  }
}
