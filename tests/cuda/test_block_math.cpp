// cuda/device/{block,kv}_math.hpp on the host: the CUDA kernels' weight-block and
// KV-format arithmetic against lib/quant's reference (bit for bit) and the online
// softmax against a two-pass softmax. Runs everywhere, GPU or not.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/catch.hpp"
#include "common/fp16.hpp"
#include "cuda/device/block_math.hpp"
#include "cuda/device/kv_math.hpp"
#include "quant/kv_formats.hpp"
#include "quant/quant.hpp"

namespace dev = ember::cuda::dev;
namespace quant = ember::quant;
using quant::DType;

namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Equal bits, or both NaN (random blocks can hold NaN scales).
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

using ValueFn = float (*)(const uint8_t*, int);
struct Format {
  DType type;
  int values;  // per block
  int bytes;   // per block
  ValueFn value;
};
const Format kFormats[] = {
    {DType::q4_0, 32, dev::kQ4_0Bytes, dev::q4_0_value}, {DType::q4_1, 32, dev::kQ4_1Bytes, dev::q4_1_value},
    {DType::q5_0, 32, dev::kQ5_0Bytes, dev::q5_0_value}, {DType::q5_1, 32, dev::kQ5_1Bytes, dev::q5_1_value},
    {DType::q8_0, 32, dev::kQ8_0Bytes, dev::q8_0_value}, {DType::q4_k, 256, dev::kQ4_KBytes, dev::q4_k_value},
    {DType::q5_k, 256, dev::kQ5_KBytes, dev::q5_k_value}, {DType::q6_k, 256, dev::kQ6_KBytes, dev::q6_k_value},
};

// Mismatches between the per-value device function and quant::dequantize_row over a row.
int mismatches(const Format& f, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> ref(size_t(n), 0.0f);
  quant::dequantize_row(f.type, row.data(), ref.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = f.value(row.data() + (i / f.values) * f.bytes, int(i % f.values));
    if (!same(v, ref[size_t(i)])) ++bad;
  }
  return bad;
}

}  // namespace

TEST_CASE("device block values equal quant::dequantize_row bit for bit", "[cuda_math]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (const Format& f : kFormats) {
    INFO(quant::type_name(f.type));
    const int64_t n = 1024;
    REQUIRE(quant::row_bytes(f.type, n) == size_t(n / f.values * f.bytes));
    // Quantized from normal values (with a few large ones), as real weights are.
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng) * (byte(rng) == 0 ? 40.0f : 1.0f);
    std::vector<uint8_t> row(quant::row_bytes(f.type, n));
    quant::quantize_row(f.type, x.data(), row.data(), n);
    CHECK(mismatches(f, row, n) == 0);
    // Arbitrary bytes: every code, every scale bit pattern (subnormal, negative, NaN).
    for (int round = 0; round < 20; ++round) {
      for (uint8_t& b : row) b = uint8_t(byte(rng));
      CHECK(mismatches(f, row, n) == 0);
    }
  }
}

TEST_CASE("online softmax and its split-K merge agree with a two-pass softmax", "[cuda_math]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int len : {1, 2, 7, 64, 333}) {
    std::vector<float> scores(static_cast<size_t>(len)), values(static_cast<size_t>(len));
    for (int i = 0; i < len; ++i) {
      scores[size_t(i)] = (i % 5 == 3) ? -INFINITY : normal(rng);  // some masked cells
      values[size_t(i)] = normal(rng);
    }
    if (len == 1) scores[0] = 2.5f;
    // Two passes in double.
    double m = -INFINITY, sum = 0.0, acc = 0.0;
    for (float s : scores) m = std::max(m, double(s));
    for (int i = 0; i < len; ++i) {
      const double w = std::isinf(scores[size_t(i)]) ? 0.0 : std::exp(double(scores[size_t(i)]) - m);
      sum += w;
      acc += w * values[size_t(i)];
    }
    const double expected = acc / sum;

    // One pass over [begin, end): the state and the weighted sum of values.
    auto run = [&](int begin, int end, float& out) {
      dev::SoftmaxState s = dev::softmax_start();
      out = 0.0f;
      for (int i = begin; i < end; ++i) {
        float w;
        const float rescale = dev::softmax_push(s, scores[size_t(i)], &w);
        out = out * rescale + w * values[size_t(i)];
      }
      return s;
    };
    float whole;
    const dev::SoftmaxState s = run(0, len, whole);
    CHECK(std::fabs(whole / s.sum - expected) <= 1e-5 * (1.0 + std::fabs(expected)));
    CHECK(std::fabs(s.max - m) == 0.0);

    for (int split : {0, len / 3, len / 2, len}) {
      float a, b, scale_a, scale_b;
      const dev::SoftmaxState sa = run(0, split, a), sb = run(split, len, b);
      const dev::SoftmaxState merged = dev::softmax_merge(sa, sb, &scale_a, &scale_b);
      const float out = (a * scale_a + b * scale_b) / merged.sum;
      CHECK(std::fabs(out - expected) <= 1e-5 * (1.0 + std::fabs(expected)));
    }
  }
  // Only masked cells: no weight, no NaN.
  dev::SoftmaxState s = dev::softmax_start();
  float w = 1.0f;
  CHECK(dev::softmax_push(s, -INFINITY, &w) == 1.0f);
  CHECK(w == 0.0f);
  CHECK(s.sum == 0.0f);
}

namespace {

// Groups of KV rows: Gaussian with a few large channels, an all-zero group, a constant
// group, and one with a single huge value.
std::vector<float> kv_rows(int group, int groups) {
  std::mt19937 rng(static_cast<uint32_t>(group));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(group) * size_t(groups));
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 37 == 5 ? 30.0f : 1.0f);
  for (int j = 0; j < group; ++j) {
    x[size_t(j)] = 0.0f;
    x[size_t(group + j)] = 0.75f;
    x[size_t(2 * group + j)] = j == 3 ? 5000.0f : 0.01f * float(j);
  }
  return x;
}

int differing_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  return bad;
}

int differing_floats(const std::vector<float>& a, const std::vector<float>& b) {
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += !same(a[i], b[i]);
  return bad;
}

}  // namespace

TEST_CASE("device KV quantizers and decoders equal lib/quant's bytes and values", "[cuda_math]") {
  namespace kv = quant::kv;
  for (int group : {32, 64}) {
    INFO("G = " << group);
    const int groups = 200;
    const std::vector<float> x = kv_rows(group, groups);
    const int64_t n = int64_t(x.size());

    // INT8.
    std::vector<uint8_t> ref(size_t(groups * dev::kv_q8_bytes(group))), ours(ref.size());
    kv::quantize_q8(x.data(), ref.data(), n, group);
    for (int g = 0; g < groups; ++g) dev::kv_q8_quantize(x.data() + g * group, ours.data() + g * dev::kv_q8_bytes(group), group);
    CHECK(differing_bytes(ours, ref) == 0);
    std::vector<float> want(x.size()), got(x.size());
    kv::dequantize_q8(ref.data(), want.data(), n, group);
    for (int64_t i = 0; i < n; ++i)
      got[size_t(i)] = dev::kv_q8_value(ref.data() + (i / group) * dev::kv_q8_bytes(group), int(i % group));
    CHECK(differing_floats(got, want) == 0);

    // INT4: bytes, stored values, and the unrotated values.
    ref.assign(size_t(groups * dev::kv_q4_bytes(group)), 0);
    ours.assign(ref.size(), 0);
    kv::quantize_q4(x.data(), ref.data(), n, group);
    for (int g = 0; g < groups; ++g) {
      uint8_t* b = ours.data() + g * dev::kv_q4_bytes(group);
      dev::kv_q4_quantize(x.data() + g * group, b, b + 4, group);
    }
    CHECK(differing_bytes(ours, ref) == 0);
    kv::decode_q4_stored(ref.data(), want.data(), n, group);
    for (int64_t i = 0; i < n; ++i)
      got[size_t(i)] = dev::kv_q4_stored(ref.data() + (i / group) * dev::kv_q4_bytes(group), int(i % group), group);
    CHECK(differing_floats(got, want) == 0);
    kv::dequantize_q4(ref.data(), want.data(), n, group);
    for (int g = 0; g < groups; ++g) dev::unrotate_group(got.data() + g * group, group);
    CHECK(differing_floats(got, want) == 0);

    // INT4 with outliers.
    ref.assign(size_t(groups * dev::kv_q4o_bytes(group)), 0);
    ours.assign(ref.size(), 0);
    kv::quantize_q4o(x.data(), ref.data(), n, group);
    for (int g = 0; g < groups; ++g) dev::kv_q4o_quantize(x.data() + g * group, ours.data() + g * dev::kv_q4o_bytes(group), group);
    CHECK(differing_bytes(ours, ref) == 0);
    kv::decode_q4o_stored(ref.data(), want.data(), n, group);
    for (int g = 0; g < groups; ++g) {
      const uint8_t* b = ref.data() + g * dev::kv_q4o_bytes(group);
      for (int j = 0; j < group; ++j) got[size_t(g * group + j)] = dev::kv_q4_stored(b + 3 * dev::kKvOutliers, j, group);
      dev::kv_q4o_add_outliers(b, got.data() + g * group, group);
    }
    CHECK(differing_floats(got, want) == 0);
  }
}

TEST_CASE("device activation quantizers give lib/quant's Q8_0, Q8_1 and Q8_K bytes", "[cuda_math]") {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 53 == 7 ? 50.0f : 1.0f);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = 0.0f;          // an all-zero Q8_K block
  for (int i = 256; i < 288; ++i) x[size_t(i)] = float(i % 5) - 2.0f;  // exact halves of 127/2
  struct Case {
    DType type;
    int values, bytes;
    void (*quantize)(const float*, uint8_t*);
  };
  for (const Case& c : {Case{DType::q8_0, 32, dev::kQ8_0Bytes, dev::q8_0_quantize},
                        Case{DType::q8_1, 32, dev::kQ8_1Bytes, dev::q8_1_quantize},
                        Case{DType::q8_k, 256, dev::kQ8_KBytes, dev::q8_k_quantize}}) {
    INFO(quant::type_name(c.type));
    std::vector<uint8_t> ref(quant::row_bytes(c.type, n)), ours(ref.size());
    REQUIRE(ref.size() == size_t(n / c.values * c.bytes));
    quant::quantize_row(c.type, x.data(), ref.data(), n);
    for (int64_t b = 0; b < n / c.values; ++b) c.quantize(x.data() + b * c.values, ours.data() + b * c.bytes);
    CHECK(differing_bytes(ours, ref) == 0);
  }
}

TEST_CASE("device block dot products sum to quant::dot_row", "[cuda_math]") {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 2048;
  using DotFn = float (*)(const uint8_t*, const uint8_t*);
  struct Case {
    DType type;
    DotFn dot;
  };
  for (const Case& c : {Case{DType::q4_0, dev::q4_0_dot}, Case{DType::q5_0, dev::q5_0_dot},
                        Case{DType::q8_0, dev::q8_0_dot}, Case{DType::q4_1, dev::q4_1_dot},
                        Case{DType::q5_1, dev::q5_1_dot}, Case{DType::q4_k, dev::q4_k_dot},
                        Case{DType::q5_k, dev::q5_k_dot}, Case{DType::q6_k, dev::q6_k_dot}}) {
    INFO(quant::type_name(c.type));
    const DType act = quant::activation_type(c.type);
    const int64_t values = int64_t(quant::type_info(c.type).block_elems);
    const size_t w_block = quant::row_bytes(c.type, values), a_block = quant::row_bytes(act, values);
    for (int round = 0; round < 10; ++round) {
      std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(n));
      for (float& v : w) v = normal(rng);
      for (float& v : x) v = normal(rng) * (round % 3 == 0 ? 20.0f : 1.0f);
      std::vector<uint8_t> wq(quant::row_bytes(c.type, n)), aq(quant::row_bytes(act, n));
      quant::quantize_row(c.type, w.data(), wq.data(), n);
      quant::quantize_row(act, x.data(), aq.data(), n);
      const double want = quant::dot_row(c.type, wq.data(), aq.data(), n);
      double got = 0.0, magnitude = 0.0;
      for (int64_t b = 0; b < n / values; ++b) {
        const float part = c.dot(wq.data() + b * w_block, aq.data() + b * a_block);
        got += part;
        magnitude += std::fabs(part);
      }
      CHECK(std::fabs(got - want) <= 1e-5 * magnitude + 1e-6);
    }
  }
}
