// Attention over long sequences (cpu/ops/attention_flash.cpp: tiles of 64 cells, split-K
// chunks of 512 for lone query tokens, past 1024 cells for F16 / F32 caches) against the
// reference backend, for every KV storage type, window, head layout and ISA level, at
// lengths around the tile, chunk and flash boundaries.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "backend/ops/attention.hpp"
#include "backend/ops/kv_store.hpp"
#include "op_helpers.hpp"
#include "quant/kv_formats.hpp"

namespace ember::test {
namespace {

constexpr int kPage = 16;

struct LongScene {
  int n_head = 8, n_kv = 2, head_dim = 64;
  int n_cells = 1025;  // of sequence row 0; row 1 holds 10
  int window = 0;
  int n_query = 3;     // query tokens at the end of row 0 (< 8: lone tokens, split-K)
  bool scores = false;
};

struct LongResult {
  std::vector<float> out, score_acc;
};

// Row 0: n_cells cells on pages in reversed order, cells 7, 600 and 1030 evicted (-1);
// row 1: 10 cells on its own page with one query token; row 2: one token with no cells.
LongResult run_long(Placed& p, DType storage, const LongScene& sc, std::mt19937 rng,
                    std::optional<DType> v_storage = std::nullopt) {
  const int n_pages0 = (sc.n_cells + kPage - 1) / kPage;
  const int n_slots = (n_pages0 + 1) * kPage;
  const int64_t width = int64_t(sc.n_kv) * sc.head_dim, q_width = int64_t(sc.n_head) * sc.head_dim;
  std::vector<int32_t> table(size_t(3 * n_pages0), 0), slots, cell_pos(size_t(3 * sc.n_cells), -1);
  for (int pg = 0; pg < n_pages0; ++pg) table[size_t(pg)] = n_pages0 - pg;  // page 0 belongs to row 1
  table[size_t(n_pages0)] = 0;
  for (int c = 0; c < sc.n_cells; ++c) {
    slots.push_back(table[size_t(c / kPage)] * kPage + c % kPage);
    cell_pos[size_t(c)] = (c == 7 || c == 600 || c == 1030) ? -1 : c;
  }
  for (int c = 0; c < 10; ++c) slots.push_back(c), cell_pos[size_t(sc.n_cells + c)] = c;
  std::vector<int32_t> q_pos, q_seq;
  for (int i = 0; i < sc.n_query; ++i) q_pos.push_back(sc.n_cells - sc.n_query + i), q_seq.push_back(0);
  q_pos.push_back(9), q_seq.push_back(1);
  q_pos.push_back(3), q_seq.push_back(2);
  const auto n_tok = int64_t(q_pos.size());

  const HostTensor k_new = random_f32(int64_t(slots.size()), width, rng);
  const HostTensor v_new = random_f32(int64_t(slots.size()), width, rng);
  // Each query row from its own position and sequence, so that a token's query does
  // not depend on how many tokens the scene has.
  HostTensor q = random_f32(n_tok, q_width, rng, -3, 3);
  for (int64_t t = 0; t < n_tok; ++t) {
    std::mt19937 row_rng(uint32_t(q_pos[size_t(t)] * 7 + q_seq[size_t(t)]));
    const HostTensor row = random_f32(1, q_width, row_rng, -3, 3);
    std::copy(row.bytes.begin(), row.bytes.end(), q.bytes.begin() + t * q_width * 4);
  }
  const auto [kc, vc] = stored_kv(p, storage, n_slots, k_new, v_new, slots, v_storage);
  backend::AttentionParams ap;
  ap.n_head = sc.n_head, ap.n_head_kv = sc.n_kv, ap.head_dim = sc.head_dim;
  ap.scale = 1.0f / std::sqrt(float(sc.head_dim)), ap.window = sc.window;
  ap.page_tokens = kPage;
  ap.token_pos = p.put(i32(q_pos)), ap.token_seq = p.put(i32(q_seq));
  ap.page_table = p.put(matrix(DType::i32, 3, n_pages0, table));
  ap.seq_cells = p.put(i32({sc.n_cells, 10, 0}));
  ap.cell_pos = p.put(matrix(DType::i32, 3, sc.n_cells, cell_pos));
  if (sc.scores) {
    const std::vector<float> start(size_t(3 * sc.n_cells * sc.n_kv), 0.5f);
    ap.score_acc = p.put(matrix(DType::f32, 3, int64_t(sc.n_cells) * sc.n_kv, start));
  }
  const Tensor out = p.zeros(DType::f32, n_tok, q_width);
  ops::attention(p.be, p.put(q), kc, vc, ap, out);
  return {p.get(out), sc.scores ? p.get(ap.score_acc) : std::vector<float>{}};
}

LongResult run_on(Backend& be, DType storage, const LongScene& sc, std::optional<DType> v_storage = std::nullopt) {
  Placed placed{be, {}};
  return run_long(placed, storage, sc, std::mt19937(21), v_storage);
}

}  // namespace

TEST_CASE("attention over long sequences matches the reference for every KV type and level", "[ops][attention]") {
  // Key and value types: the same for every storage, int8 keys with int4 values for k8v4.
  const std::pair<DType, DType> storages[] = {
      {DType::f32, DType::f32},             {DType::f16, DType::f16},             {DType::kv_q8_g32, DType::kv_q8_g32},
      {DType::kv_q8_g64, DType::kv_q8_g64}, {DType::kv_q4_g32, DType::kv_q4_g32}, {DType::kv_q4_g64, DType::kv_q4_g64},
      {DType::kv_q4o_g32, DType::kv_q4o_g32}, {DType::kv_q8_g32, DType::kv_q4_g32}, {DType::kv_q8_g64, DType::kv_q4_g64}};
  struct Heads {
    int n_head, n_kv, head_dim;
  };
  auto ref = reference::make_reference_backend();
  for (const Heads heads : {Heads{8, 2, 64}, Heads{4, 1, 256}}) {
    for (const int n_cells : {1024, 1025, 1601}) {
      for (const int window : {0, 300, 700}) {  // 300: a window split into kChunk / 4 chunks
        for (const int n_query : {3, 40}) {  // lone tokens (split-K); blocks of 32 + 8
          if (window == 300 && n_cells != 1025) continue;
          LongScene sc;
          sc.n_head = heads.n_head, sc.n_kv = heads.n_kv, sc.head_dim = heads.head_dim;
          sc.n_cells = n_cells, sc.window = window, sc.n_query = n_query;
          sc.scores = window == 0 && n_cells == 1601;
          for (const auto& [storage, v_storage] : storages) {
            const LongResult r = run_on(*ref, storage, sc, v_storage);
            for (const cpu::Isa isa : cpu::available_isas()) {
              auto cpu_be = cpu::make_cpu_backend({.threads = 2, .isa = isa});
              const LongResult c = run_on(*cpu_be, storage, sc, v_storage);
              INFO(quant::type_name(storage) << "/" << quant::type_name(v_storage) << " heads " << heads.n_head << "/"
                                             << heads.n_kv << " hd " << heads.head_dim << " cells " << n_cells
                                             << " window " << window << " queries " << n_query << " isa "
                                             << cpu::isa_name(isa));
              // The reference decodes the same stored values: only the summation order and
              // the fast exp differ (at 1024 cells and below an F16 cache also rounds queries
              // and probabilities to F16, as llama.cpp does).
              const double tol = storage == DType::f16 ? 2e-3 : 5e-5;
              CHECK(max_abs_diff(r.out, c.out) <= tol * max_abs(r.out));
              const size_t row_width = size_t(heads.n_head) * heads.head_dim;
              for (size_t d = r.out.size() - row_width; d < r.out.size(); ++d) REQUIRE(c.out[d] == 0.0f);
              if (sc.scores) CHECK(max_abs_diff(r.score_acc, c.score_acc) <= tol * max_abs(r.score_acc));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("attention rejects keys and values of different float types", "[ops][attention]") {
  // Mixed types only where both are quantized (k8v4); an F16 key cache with INT4 values
  // is a typed error on every backend, not a misread.
  LongScene sc;
  sc.n_head = 4, sc.n_kv = 1, sc.head_dim = 64, sc.n_cells = 40, sc.n_query = 2;
  auto ref = reference::make_reference_backend();
  auto cpu_be = cpu::make_cpu_backend({.threads = 2});
  for (Backend* be : {ref.get(), cpu_be.get()}) {
    CHECK_THROWS_AS(run_on(*be, DType::f16, sc, DType::kv_q4_g32), ember::Error);
    CHECK_THROWS_AS(run_on(*be, DType::kv_q8_g32, sc, DType::f32), ember::Error);
    CHECK_NOTHROW(run_on(*be, DType::kv_q8_g32, sc, DType::kv_q4_g32));
  }
}

TEST_CASE("split-K attention does not depend on the thread count", "[ops][attention]") {
  for (const DType storage : {DType::f16, DType::kv_q4_g32}) {
    LongScene sc;
    sc.n_head = 4, sc.n_kv = 1, sc.head_dim = 64, sc.n_cells = 2100, sc.n_query = 2;
    auto one = cpu::make_cpu_backend({.threads = 1});
    auto three = cpu::make_cpu_backend({.threads = 3});
    const LongResult a = run_on(*one, storage, sc), b = run_on(*three, storage, sc);
    INFO(quant::type_name(storage));
    REQUIRE(max_abs(a.out) > 0.0);
    CHECK(a.out == b.out);
  }
}

TEST_CASE("batch-invariant attention gives a query token the bits it gets alone", "[ops][attention][invariant]") {
  // A decode step (1 query token) and a step of 40 (a long verification or an Engine
  // batch: blocks of 32 outside batch-invariant mode): the last token's row must agree
  // bit for bit, for every cache type and level.
  for (const DType storage : {DType::f16, DType::kv_q8_g32, DType::kv_q4_g32}) {
    for (const cpu::Isa isa : cpu::available_isas()) {
      auto be = cpu::make_cpu_backend({.threads = 2, .isa = isa});
      be->set_sum_order(backend::SumOrder::batch_invariant);
      LongScene one, many;
      one.n_cells = many.n_cells = 700;
      one.n_query = 1, many.n_query = 40;
      const LongResult a = run_on(*be, storage, one), b = run_on(*be, storage, many);
      const size_t row_width = size_t(one.n_head) * one.head_dim;
      // Row 0's last query is row n_query - 1 of each output.
      const std::vector<float> alone(a.out.begin(), a.out.begin() + long(row_width));
      const std::vector<float> among(b.out.begin() + long(39 * row_width), b.out.begin() + long(40 * row_width));
      INFO(quant::type_name(storage) << " " << cpu::isa_name(isa));
      REQUIRE(max_abs(alone) > 0.0);
      CHECK(alone == among);
    }
  }
}

}  // namespace ember::test
