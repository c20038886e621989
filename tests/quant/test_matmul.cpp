// cpu::matmul and cpu::get_rows against naive loops over lib/quant, with real thread
// pools of 1 and 3 threads, every kernel level, strided x and out.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/host_buffer.hpp"
#include "common/catch.hpp"
#include "cpu/ops/ops.hpp"
#include "ember/error.hpp"
#include "quant/helpers.hpp"

namespace quant = ember::quant;
namespace test = ember::test;
using ember::backend::HostBuffer;
using ember::backend::Tensor;
using ember::cpu::Isa;
using ember::cpu::OpContext;
using ember::cpu::ThreadPool;
using quant::DType;

namespace {

// A [rows, cols] tensor of `type` with `pad` extra bytes after each row, in its own buffer.
struct OwnedTensor {
  std::unique_ptr<HostBuffer> buffer;
  Tensor tensor;
  OwnedTensor(DType type, int64_t rows, int64_t cols, size_t pad = 0) {
    const size_t row = quant::row_bytes(type, cols) + pad;
    buffer = std::make_unique<HostBuffer>(row * size_t(rows) + 1);
    tensor.buffer = buffer.get();
    tensor.type = type;
    tensor.rows = rows;
    tensor.cols = cols;
    tensor.row_stride = row;
  }
};

OwnedTensor random_weights(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  OwnedTensor w(type, rows, cols);
  const auto values = test::random_values(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r) quant::quantize_row(type, values.data() + r * cols, w.tensor.row_ptr(r), cols);
  return w;
}

struct Shape {
  int64_t n_out, n_in, n_tok;
};

void check_matmul(ThreadPool& pool, Isa isa, DType type, const Shape& s) {
  INFO(ember::cpu::isa_name(isa) << " " << quant::type_name(type) << " threads=" << pool.size() << " [" << s.n_out
                                 << ", " << s.n_in << "] x " << s.n_tok);
  const OwnedTensor w = random_weights(type, s.n_out, s.n_in, uint32_t(s.n_out * 7 + s.n_in));
  // x and out with row strides larger than their rows.
  OwnedTensor x(DType::f32, s.n_tok, s.n_in, 48);
  OwnedTensor out(DType::f32, s.n_tok, s.n_out, 20);
  const auto xv = test::random_values(s.n_tok * s.n_in, uint32_t(s.n_tok + 5));
  for (int64_t t = 0; t < s.n_tok; ++t) std::memcpy(x.tensor.row_ptr(t), xv.data() + t * s.n_in, s.n_in * 4);
  std::memset(out.buffer->host_data(), 0xff, out.buffer->size());  // NaN everywhere

  std::vector<std::byte> scratch;
  OpContext ctx{pool, isa, scratch, {}};
  ember::cpu::matmul(ctx, w.tensor, x.tensor, out.tensor);

  const DType act = quant::activation_type(type);
  std::vector<std::byte> a(quant::row_bytes(act, s.n_in));
  int64_t bad = 0;
  for (int64_t t = 0; t < s.n_tok; ++t) {
    quant::quantize_row(act, x.tensor.row_ptr<const float>(t), a.data(), s.n_in);
    const float* got = out.tensor.row_ptr<const float>(t);
    for (int64_t o = 0; o < s.n_out; ++o) {
      const std::byte* wr = w.tensor.row_ptr(o);
      const double expected = quant::dot_row(type, wr, a.data(), s.n_in);
      const double tol = test::kSummationTolerance * test::dot_magnitude(type, wr, a.data(), s.n_in);
      if (!(std::fabs(double(got[o]) - expected) <= tol)) {
        if (bad++ < 3) FAIL_CHECK("out[" << t << "][" << o << "] = " << got[o] << ", expected " << expected);
      }
    }
    // The padding after each output row is untouched.
    if (t + 1 < s.n_tok) {
      uint32_t pad_bits;
      std::memcpy(&pad_bits, out.tensor.row_ptr<const float>(t) + s.n_out, 4);
      CHECK(pad_bits == 0xffffffffu);
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cpu::matmul matches dot_row for every type, level and thread count", "[matmul]") {
  ThreadPool pool1(1), pool3(3);
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const int64_t block = quant::type_info(type).block_elems;
      // n_in 288 = 9 blocks: an odd block count (tails of two-block steps).
      // n_in 1120 = 2 packed groups of 16 blocks + 3 blocks (prefill remainder path).
      // Groups of 64 or 128 values: 3 and 9 groups.
      const int64_t odd = block == 256 ? 512 : block > 32 ? 3 * block : 288;
      const int64_t remainder = block == 256 ? 1280 : block > 32 ? 9 * block : 1120;
      const std::vector<Shape> shapes = {{64, 256, 1}, {100, odd, 3}, {257, 1024, 17}, {1000, 2048, 1}, {40, remainder, 9}};
      for (const Shape& s : shapes) {
        // The scalar level is slow on large shapes; one thread count is enough there.
        if (isa == Isa::scalar && s.n_out * s.n_in > 300000) continue;
        check_matmul(pool1, isa, type, s);
        check_matmul(pool3, isa, type, s);
      }
    }
  }
}

TEST_CASE("cpu::matmul with many tokens uses tiles over tokens", "[matmul]") {
  ThreadPool pool(2);
  const Isa isa = ember::cpu::available_isas().back();
  for (DType type : {DType::q4_k, DType::q8_0, DType::f16})
    check_matmul(pool, isa, type, {96, 512, 64});
}

TEST_CASE("cpu::matmul's Q8_0 prefill keeps llama.cpp's order over blocks of tokens", "[matmul][lanes]") {
  // 300 tokens: at the AVX2 levels the packed path passes over the weights in blocks of
  // at most 128 tokens (Packed::token_block; here 104, 104 and 92); 44 rows: 5 groups of 8
  // and 4 more; 2144 values: 4 chunks of 16 blocks and 3 blocks. Every level sums Q8_0 in
  // quant::dot_row's order, so every output is bit-identical to it.
  const int64_t n_out = 44, n_in = 2144, n_tok = 300;
  const OwnedTensor w = random_weights(DType::q8_0, n_out, n_in, 11);
  OwnedTensor x(DType::f32, n_tok, n_in);
  const auto xv = test::random_values(n_tok * n_in, 12);
  std::memcpy(x.tensor.row_ptr(0), xv.data(), xv.size() * 4);
  std::vector<std::byte> a(quant::row_bytes(DType::q8_0, n_in) * size_t(n_tok));
  for (int64_t t = 0; t < n_tok; ++t)
    quant::quantize_row(DType::q8_0, x.tensor.row_ptr<const float>(t), a.data() + size_t(t) * (a.size() / n_tok), n_in);
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : ember::cpu::available_isas()) {
    if (isa == Isa::scalar) continue;  // slow here; the reference itself
    for (ThreadPool* pool : {&pool2, &pool3}) {
      INFO(ember::cpu::isa_name(isa) << " threads=" << pool->size());
      OwnedTensor out(DType::f32, n_tok, n_out);
      std::vector<std::byte> scratch;
      OpContext ctx{*pool, isa, scratch, {}};
      ember::cpu::matmul(ctx, w.tensor, x.tensor, out.tensor);
      int64_t mismatches = 0;
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t o = 0; o < n_out; ++o)
          mismatches += out.tensor.row_ptr<const float>(t)[o] !=
                        quant::dot_row(DType::q8_0, w.tensor.row_ptr(o), a.data() + size_t(t) * (a.size() / n_tok), n_in);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("cpu::get_rows dequantizes the selected rows", "[get_rows]") {
  ThreadPool pool(3);
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      INFO(ember::cpu::isa_name(isa) << " " << quant::type_name(type));
      const int64_t rows = 40, cols = 512;
      const OwnedTensor table = random_weights(type, rows, cols, 4242);
      // 300 ids x 512 values: enough to run on several threads.
      const int64_t n = 300;
      OwnedTensor ids(DType::i32, n, 1, 4);  // strided ids
      for (int64_t i = 0; i < n; ++i) *ids.tensor.row_ptr<int32_t>(i) = int32_t((i * 7 + 3) % rows);
      OwnedTensor out(DType::f32, n, cols, 8);
      std::vector<std::byte> scratch;
      OpContext ctx{pool, isa, scratch, {}};
      ember::cpu::get_rows(ctx, table.tensor, ids.tensor, out.tensor);
      std::vector<float> expected(static_cast<size_t>(cols));
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        quant::dequantize_row(type, table.tensor.row_ptr((i * 7 + 3) % rows), expected.data(), cols);
        if (std::memcmp(out.tensor.row_ptr(i), expected.data(), cols * 4) != 0) ++mismatches;
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("cpu::get_rows rejects ids outside the table", "[get_rows][errors]") {
  ThreadPool pool(1);
  const OwnedTensor table = random_weights(DType::q8_0, 10, 64, 1);
  OwnedTensor ids(DType::i32, 3, 1);
  *ids.tensor.row_ptr<int32_t>(0) = 1;
  *ids.tensor.row_ptr<int32_t>(1) = 10;
  *ids.tensor.row_ptr<int32_t>(2) = 2;
  OwnedTensor out(DType::f32, 3, 64);
  std::memset(out.buffer->host_data(), 0, out.buffer->size());
  std::vector<std::byte> scratch;
  OpContext ctx{pool, ember::cpu::best_isa(), scratch, {}};
  try {
    ember::cpu::get_rows(ctx, table.tensor, ids.tensor, out.tensor);
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::invalid_argument);
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("id 10 at position 1"));
  }
  // Nothing was written before the check failed.
  CHECK(*out.tensor.row_ptr<float>(0) == 0.0f);
}

TEST_CASE("cpu::matmul rejects weight types without kernels", "[matmul][errors]") {
  ThreadPool pool(1);
  OwnedTensor w(DType::q2_k, 4, 256);
  OwnedTensor x(DType::f32, 1, 256);
  OwnedTensor out(DType::f32, 1, 4);
  std::vector<std::byte> scratch;
  OpContext ctx{pool, ember::cpu::best_isa(), scratch, {}};
  try {
    ember::cpu::matmul(ctx, w.tensor, x.tensor, out.tensor);
    FAIL("no exception");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::unsupported);
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("Q2_K"));
  }
}

// SumOrder::batch_invariant (the Engine): a token's row of out must not depend on the
// other tokens of the op, bit for bit, at every level, for every weight type.
TEST_CASE("batch-invariant matmul gives every token the bits it gets alone", "[matmul][invariant]") {
  ThreadPool pool(2);
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : quant::weight_types()) {
      const bool k_format = quant::type_info(type).block_elems == 256;
      // 83 rows: 16-row groups and a tail; float rows of 2088 values: several segments of
      // the sequential invariant path and a tail.
      const bool float_format = quant::type_info(type).block_elems == 1;
      const int64_t n_out = 83, n_in = k_format ? 512 : float_format ? 2088 : 640, n_tok = 35;
      INFO(ember::cpu::isa_name(isa) << " " << quant::type_name(type));
      const OwnedTensor w = random_weights(type, n_out, n_in, 99);
      OwnedTensor x(DType::f32, n_tok, n_in);
      const auto xv = test::random_values(n_tok * n_in, 7);
      std::memcpy(x.tensor.row_ptr(0), xv.data(), xv.size() * 4);
      std::vector<std::byte> scratch;
      OpContext ctx{pool, isa, scratch, {}};
      ctx.batch_invariant = true;
      OwnedTensor all(DType::f32, n_tok, n_out);
      ember::cpu::matmul(ctx, w.tensor, x.tensor, all.tensor);
      int64_t bad = 0;
      // Alone, and inside batches of other sizes (4: a Q4_K group; 2: a pair; 17: tiles and a tail).
      for (int64_t batch : {1, 2, 4, 17}) {
        for (int64_t t0 = 0; t0 + batch <= n_tok; t0 += batch) {
          OwnedTensor part(DType::f32, batch, n_out);
          ember::cpu::matmul(ctx, w.tensor, x.tensor.slice_rows(t0, batch), part.tensor);
          for (int64_t t = 0; t < batch; ++t)
            if (std::memcmp(part.tensor.row_ptr(t), all.tensor.row_ptr(t0 + t), size_t(n_out) * 4) != 0 &&
                bad++ < 3)
              FAIL_CHECK("token " << t0 + t << " in a batch of " << batch << " differs from the batch of " << n_tok);
        }
      }
      CHECK(bad == 0);
      // And the sums are right: within the summation tolerance of quant::dot_row.
      const DType act = quant::activation_type(type);
      std::vector<std::byte> arow(quant::row_bytes(act, n_in));
      int64_t wrong = 0;
      for (int64_t t = 0; t < n_tok; ++t) {
        quant::quantize_row(act, x.tensor.row_ptr<const float>(t), arow.data(), n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          const double expected = quant::dot_row(type, w.tensor.row_ptr(o), arow.data(), n_in);
          const double tol = test::kSummationTolerance * test::dot_magnitude(type, w.tensor.row_ptr(o), arow.data(), n_in);
          if (!(std::fabs(double(all.tensor.row_ptr<const float>(t)[o]) - expected) <= tol) && wrong++ < 3)
            FAIL_CHECK("out[" << t << "][" << o << "] = " << all.tensor.row_ptr<const float>(t)[o] << ", expected "
                              << expected);
        }
      }
      CHECK(wrong == 0);
    }
  }
}

// The one-token kernels of the batch-invariant order (AVX-512 rows16_one and rows16_g_one:
// contiguous loads, a different integer grouping) must give the bits of the multi-token
// ones (rows16, rows16_g) for every block count (odd ones end in a lone block), whole 16-row groups and
// tails, and weights at the extremes of their codes.
TEST_CASE("batch-invariant one-token sums of the 32-value formats equal the batch's", "[matmul][invariant]") {
  ThreadPool pool(2);
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : {DType::q4_0, DType::q5_0, DType::q8_0, DType::q8_w, DType::q4_g64, DType::q4_g128}) {
      for (const int64_t n_in : {32, 64, 96, 128, 384, 608, 640, 2080, 2176}) {
        if (n_in % quant::type_info(type).block_elems != 0) continue;
        for (const int64_t n_out : {16, 45, 83}) {
          INFO(ember::cpu::isa_name(isa) << " " << quant::type_name(type) << " [" << n_out << ", " << n_in << "]");
          OwnedTensor w = random_weights(type, n_out, n_in, uint32_t(n_in + n_out));
          if (n_out == 45) {
            // Rows of one large value among small ones: codes at the ends of their range.
            std::vector<float> v(size_t(n_in), 0.001f);
            for (int64_t r = 0; r < n_out; r += 3) {
              v[size_t(r % n_in)] = r % 2 ? -1.0f : 1.0f;
              quant::quantize_row(type, v.data(), w.tensor.row_ptr(r), n_in);
              v[size_t(r % n_in)] = 0.001f;
            }
          }
          constexpr int64_t n_tok = 9;
          OwnedTensor x(DType::f32, n_tok, n_in);
          const auto xv = test::random_values(n_tok * n_in, uint32_t(n_in));
          std::memcpy(x.tensor.row_ptr(0), xv.data(), xv.size() * 4);
          std::vector<std::byte> scratch;
          OpContext ctx{pool, isa, scratch, {}};
          ctx.batch_invariant = true;
          OwnedTensor all(DType::f32, n_tok, n_out);
          ember::cpu::matmul(ctx, w.tensor, x.tensor, all.tensor);
          int64_t bad = 0;
          for (int64_t t = 0; t < n_tok; ++t) {
            OwnedTensor one(DType::f32, 1, n_out);
            ember::cpu::matmul(ctx, w.tensor, x.tensor.slice_rows(t, 1), one.tensor);
            for (int64_t o = 0; o < n_out; ++o)
              if (std::memcmp(one.tensor.row_ptr<float>(0) + o, all.tensor.row_ptr<float>(t) + o, 4) != 0 && bad++ < 3)
                FAIL_CHECK("token " << t << " row " << o << ": alone " << one.tensor.row_ptr<float>(0)[o]
                                    << ", in the batch " << all.tensor.row_ptr<float>(t)[o]);
          }
          CHECK(bad == 0);
        }
      }
    }
  }
}
