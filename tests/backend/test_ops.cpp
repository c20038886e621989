// Every op of the CPU backend against the reference backend, op by op, over
// weight types and shapes (in the spirit of ggml's test-backend-ops). Tolerances
// are stated per op: they cover float summation order and the CPU's fast exp.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/ops/attention.hpp"
#include "backend/ops/elementwise.hpp"
#include "backend/ops/get_rows.hpp"
#include "backend/ops/glu.hpp"
#include "backend/ops/kv_store.hpp"
#include "backend/ops/matmul.hpp"
#include "backend/ops/rms_norm.hpp"
#include "backend/ops/rope.hpp"
#include "op_helpers.hpp"

namespace {

using namespace ember;
using namespace ember::test;

}  // namespace

TEST_CASE("matmul: CPU backend matches the reference for every weight type", "[ops][matmul]") {
  std::mt19937 rng(1);
  for (DType type : quant::weight_types()) {
    const int64_t block = quant::type_info(type).block_elems;
    const int64_t n_in = block == 256 ? 512 : 256;
    for (int64_t n_tok : {1, 5, 33}) {
      const HostTensor w = quantized(type, random_f32(67, n_in, rng));
      const HostTensor x = random_f32(n_tok, n_in, rng);
      auto [r, c] = both(3, [&](Placed& p) {
        const Tensor out = p.zeros(DType::f32, n_tok, 67);
        ops::matmul(p.be, p.put(w), p.put(x), out);
        return p.get(out);
      });
      INFO(quant::type_name(type) << " n_tok " << n_tok);
      // Same converted activations, same integer dots: only summation order differs.
      CHECK(max_abs_diff(r, c) <= 1e-4 * max_abs(r) + 1e-5);
    }
  }
}

TEST_CASE("get_rows: CPU backend matches the reference", "[ops]") {
  std::mt19937 rng(2);
  for (DType type : quant::weight_types()) {
    const HostTensor table = quantized(type, random_f32(40, 256, rng));
    const HostTensor ids = i32({3, 0, 39, 3, 17});
    auto [r, c] = both(2, [&](Placed& p) {
      const Tensor out = p.zeros(DType::f32, 5, 256);
      ops::get_rows(p.be, p.put(table), p.put(ids), out);
      return p.get(out);
    });
    INFO(quant::type_name(type));
    CHECK(max_abs_diff(r, c) == 0.0);
  }
}

TEST_CASE("elementwise ops, rms_norm and glu match the reference", "[ops]") {
  std::mt19937 rng(3);
  for (int64_t rows : {1, 7, 300}) {
    const HostTensor a = random_f32(rows, 640, rng, -4, 4), b = random_f32(rows, 640, rng, -4, 4);
    const HostTensor b1 = random_f32(1, 640, rng);
    INFO("rows " << rows);
    auto [r1, c1] = both(2, [&](Placed& p) {
      const Tensor out = p.zeros(DType::f32, rows, 640);
      ops::add(p.be, p.put(a), p.put(b1), out);  // broadcast
      ops::mul(p.be, out, p.put(b), out);
      ops::scale(p.be, out, 0.5f, out);
      return p.get(out);
    });
    CHECK(max_abs_diff(r1, c1) <= 1e-6 * max_abs(r1));
    auto [r2, c2] = both(2, [&](Placed& p) {
      const Tensor out = p.zeros(DType::f32, rows, 640);
      ops::rms_norm(p.be, p.put(a), p.put(b1), 1e-6f, out);
      return p.get(out);
    });
    CHECK(max_abs_diff(r2, c2) <= 1e-5 * max_abs(r2));
    for (auto act : {backend::Activation::silu, backend::Activation::gelu_tanh}) {
      auto [r3, c3] = both(2, [&](Placed& p) {
        const Tensor out = p.zeros(DType::f32, rows, 640);
        ops::glu(p.be, p.put(a), p.put(b), act, out);
        return p.get(out);
      });
      // The CPU's GELU reads an F16 table, as llama.cpp's CPU backend does (input and
      // result rounded to F16: relative error up to ~1e-3); SiLU is computed in float.
      const double tol = act == backend::Activation::gelu_tanh ? 1e-3 : 1e-5;
      CHECK(max_abs_diff(r3, c3) <= tol * max_abs(r3));
    }
  }
}

TEST_CASE("rope matches the reference in both modes", "[ops]") {
  std::mt19937 rng(4);
  for (auto mode : {backend::RopeMode::normal, backend::RopeMode::neox}) {
    for (int n_rot : {64, 48}) {
      const HostTensor x = random_f32(9, 4 * 64, rng);
      const HostTensor pos = i32({0, 1, 2, 7, 100, 1000, 4095, 30000, 5});
      const backend::RopeParams params{4, 64, n_rot, mode, 1e6f, 0.5f, 1.0f, {}};
      auto [r, c] = both(2, [&](Placed& p) {
        const Tensor t = p.put(x);
        ops::rope(p.be, t, p.put(pos), params, t);  // in place, as the model uses it
        return p.get(t);
      });
      INFO("mode " << int(mode) << " n_rot " << n_rot);
      // The CPU forms the angles in float as llama.cpp does (theta_{i+1} = theta_i *
      // base^(-2/n_rot)); their error grows with the position (~1e-8 * pos rad here).
      CHECK(max_abs_diff(r, c) <= 1e-5 + 3e-8 * 30000);
      // Position 0 leaves values unchanged.
      const auto* x0 = reinterpret_cast<const float*>(x.bytes.data());
      for (int i = 0; i < 4 * 64; ++i) REQUIRE(r[size_t(i)] == Approx(x0[i]).margin(1e-6));
    }
  }
}

TEST_CASE("kv_store and attention over pages match the reference", "[ops][attention]") {
  std::mt19937 rng(5);
  for (DType storage : {DType::f32, DType::f16}) {
    for (int window : {0, 5}) {
      // Two sequences over 4-token pages: seq row 0 owns pages {2, 0, 3}, row 1 owns {1}.
      const int hd = 64, n_head = 4, n_kv = 2, page = 4, n_slots = 16;
      const HostTensor k_new = random_f32(14, n_kv * hd, rng), v_new = random_f32(14, n_kv * hd, rng);
      std::vector<int32_t> slots, slot_pos(n_slots, -1), pos, seq;
      const int32_t pages0[] = {2, 0, 3};
      for (int c = 0; c < 10; ++c) {
        const int32_t slot = pages0[c / page] * page + c % page;
        slots.push_back(slot), slot_pos[size_t(slot)] = c, pos.push_back(c), seq.push_back(0);
      }
      for (int c = 0; c < 4; ++c) {
        const int32_t slot = 1 * page + c;
        slots.push_back(slot), slot_pos[size_t(slot)] = c, pos.push_back(c), seq.push_back(1);
      }
      const HostTensor q = random_f32(14, n_head * hd, rng, -3, 3);
      auto [r, c] = both(2, [&](Placed& p) {
        const Tensor kc = p.zeros(storage, n_slots, n_kv * hd), vc = p.zeros(storage, n_slots, n_kv * hd);
        const Tensor t_slots = p.put(i32(slots));
        ops::kv_store(p.be, p.put(k_new), kc, t_slots);
        ops::kv_store(p.be, p.put(v_new), vc, t_slots);
        HostTensor table{DType::i32, 2, 3, std::vector<std::byte>(24)};
        const int32_t rows[6] = {2, 0, 3, 1, 0, 0};
        std::memcpy(table.bytes.data(), rows, 24);
        backend::AttentionParams ap;
        ap.n_head = n_head, ap.n_head_kv = n_kv, ap.head_dim = hd, ap.scale = 0.125f, ap.window = window;
        ap.page_tokens = page;
        ap.token_pos = p.put(i32(pos)), ap.token_seq = p.put(i32(seq)), ap.page_table = p.put(table);
        ap.seq_cells = p.put(i32({10, 4}));
        std::vector<int32_t> cell_pos(2 * 10, -1);
        for (int c = 0; c < 10; ++c) cell_pos[size_t(c)] = slot_pos[size_t(pages0[c / page] * page + c % page)];
        for (int c = 0; c < 4; ++c) cell_pos[size_t(10 + c)] = slot_pos[size_t(page + c)];
        HostTensor cp{DType::i32, 2, 10, std::vector<std::byte>(80)};
        std::memcpy(cp.bytes.data(), cell_pos.data(), 80);
        ap.cell_pos = p.put(cp);
        const Tensor out = p.zeros(DType::f32, 14, n_head * hd);
        ops::attention(p.be, p.put(q), kc, vc, ap, out);
        return p.get(out);
      });
      INFO("storage " << quant::type_name(storage) << " window " << window);
      // With an F16 cache the CPU rounds queries and probabilities to F16 as llama.cpp does.
      CHECK(max_abs_diff(r, c) <= (storage == DType::f16 ? 2e-3 : 2e-5) * max_abs(r));
      // Token 0 of each sequence sees only itself: its output is its own value row.
      const auto* v0 = reinterpret_cast<const float*>(v_new.bytes.data());
      const double tol = storage == DType::f16 ? 1e-3 : 1e-6;
      for (int d = 0; d < hd; ++d) {
        REQUIRE(std::abs(r[size_t(d)] - v0[d]) <= tol);                               // head 0 -> kv head 0
        REQUIRE(std::abs(r[size_t(10 * n_head * hd + 3 * hd + d)] - v0[10 * n_kv * hd + hd + d]) <= tol);  // head 3 -> kv 1
      }
    }
  }
}

TEST_CASE("ops reject mismatched shapes and types with a named error", "[ops][errors]") {
  auto be = reference::make_reference_backend();
  Placed p{*be, {}};
  std::mt19937 rng(6);
  const Tensor w = p.put(random_f32(8, 32, rng)), x = p.put(random_f32(2, 16, rng));
  const Tensor out = p.zeros(DType::f32, 2, 8);
  try {
    ops::matmul(*be, w, x, out);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("matmul: x is [2, 16], expected [2, 32]"));
  }
  const Tensor ids = p.put(i32({0, 9}));
  try {
    ops::get_rows(*be, w, ids, p.zeros(DType::f32, 2, 32));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("id 9"));
  }
  const backend::RopeParams bad{3, 5, 4, backend::RopeMode::neox, 10000.0f, 1.0f, 1.0f, {}};
  CHECK_THROWS_AS(ops::rope(*be, out, p.put(i32({0, 1})), bad, out), Error);
}

TEST_CASE("attention over many query tokens (GEMM schedule) matches the reference", "[ops][attention]") {
  std::mt19937 rng(7);
  for (DType storage : {DType::f32, DType::f16}) {
    for (int window : {0, 13}) {
      // Sequence row 0: 70 tokens (GEMM schedule) on pages {3, 0, 5, 1, 7}; row 1: 3 tokens
      // (per-token schedule) on page {2}; row 2: one token with no cells (sees nothing).
      const int hd = 64, n_head = 8, n_kv = 2, page = 16, n_slots = 8 * page;
      const int32_t pages0[] = {3, 0, 5, 1, 7};
      std::vector<int32_t> slots, slot_pos(n_slots, -1), pos, seq;
      for (int c = 0; c < 70; ++c) {
        const int32_t slot = pages0[c / page] * page + c % page;
        slots.push_back(slot), slot_pos[size_t(slot)] = c, pos.push_back(c), seq.push_back(0);
      }
      for (int c = 0; c < 3; ++c) {
        const int32_t slot = 2 * page + c;
        slots.push_back(slot), slot_pos[size_t(slot)] = 100 + c, pos.push_back(100 + c), seq.push_back(1);
      }
      const int n_tok = 74;
      const HostTensor k_new = random_f32(73, n_kv * hd, rng), v_new = random_f32(73, n_kv * hd, rng);
      const HostTensor q = random_f32(n_tok, n_head * hd, rng, -2, 2);
      std::vector<int32_t> q_pos = pos, q_seq = seq;
      q_pos.push_back(5), q_seq.push_back(2);
      auto [r, c] = both(2, [&](Placed& p) {
        const Tensor kc = p.zeros(storage, n_slots, n_kv * hd), vc = p.zeros(storage, n_slots, n_kv * hd);
        const Tensor t_slots = p.put(i32(slots));
        ops::kv_store(p.be, p.put(k_new), kc, t_slots);
        ops::kv_store(p.be, p.put(v_new), vc, t_slots);
        HostTensor table{DType::i32, 3, 5, std::vector<std::byte>(60)};
        const int32_t rows[15] = {3, 0, 5, 1, 7, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(table.bytes.data(), rows, 60);
        backend::AttentionParams ap;
        ap.n_head = n_head, ap.n_head_kv = n_kv, ap.head_dim = hd, ap.scale = 0.125f, ap.window = window;
        ap.page_tokens = page;
        ap.token_pos = p.put(i32(q_pos)), ap.token_seq = p.put(i32(q_seq)), ap.page_table = p.put(table);
        ap.seq_cells = p.put(i32({70, 3, 0}));
        std::vector<int32_t> cell_pos(3 * 70, -1);
        for (int c = 0; c < 70; ++c) cell_pos[size_t(c)] = slot_pos[size_t(pages0[c / page] * page + c % page)];
        for (int c = 0; c < 3; ++c) cell_pos[size_t(70 + c)] = slot_pos[size_t(2 * page + c)];
        HostTensor cp{DType::i32, 3, 70, std::vector<std::byte>(3 * 70 * 4)};
        std::memcpy(cp.bytes.data(), cell_pos.data(), cp.bytes.size());
        ap.cell_pos = p.put(cp);
        const Tensor out = p.zeros(DType::f32, n_tok, n_head * hd);
        ops::attention(p.be, p.put(q), kc, vc, ap, out);
        return p.get(out);
      });
      INFO("storage " << quant::type_name(storage) << " window " << window);
      // With an F16 cache the CPU rounds queries and probabilities to F16 as llama.cpp does.
      CHECK(max_abs_diff(r, c) <= (storage == DType::f16 ? 2e-3 : 2e-5) * max_abs(r));
      for (int d = 0; d < n_head * hd; ++d) REQUIRE(c[size_t(73 * n_head * hd + d)] == 0.0f);
    }
  }
}
