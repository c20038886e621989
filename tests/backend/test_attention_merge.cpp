// Attention's lse output and its prior merge (AttentionParams::lse, prior_out, prior_lse):
// the attention over two disjoint sets of cells, computed in two calls and merged,
// against one call over all of them, on the reference backend and the CPU backend at
// every ISA level (decode with and without split-K, prefill blocks), for F32, F16 and
// quantized caches, with grouped heads and a sliding window. Tolerances per check.
// Also AttentionParams::exclude_recent, alone and as the first of the two calls that
// split a sequence's cells into its older part and its newest tokens.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/ops/attention.hpp"
#include "op_helpers.hpp"
#include "quant/kv_formats.hpp"

namespace ember::test {
namespace {

constexpr int kPage = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Scene {
  int n_head = 4, n_kv = 2, head_dim = 64;
  int n_cells = 700;  // of sequence row 0 (row 1 has none)
  int window = 0;
  int n_query = 1;  // query tokens at the end of row 0; one more of row 1 sees no cell
  bool recent_in_front = false;  // cells 1 and n_cells - 2 swap positions
};

// Sequence row 0 holds cell c at position c (cell 5 evicted: -1) on pages in reversed
// order, but for recent_in_front (a new token written into a freed early cell: positions
// do not increase with the cell index, so no schedule can leave the newest cells out by
// their index alone); the query tokens of row 0 sit at its last positions.
struct Setup {
  Scene sc;
  HostTensor q_host, k_host;  // k_host row c: the keys of cell c (f32, before storing)
  Tensor q, kc, vc;
  backend::AttentionParams base;  // without cell_pos
  int64_t n_tok = 0;
  std::vector<int32_t> q_pos, all_pos;
};

Setup make_setup(Placed& p, DType storage, const Scene& sc) {
  std::mt19937 rng(31);
  Setup s;
  s.sc = sc;
  const int n_pages = (sc.n_cells + kPage - 1) / kPage;
  const int64_t width = int64_t(sc.n_kv) * sc.head_dim, q_width = int64_t(sc.n_head) * sc.head_dim;
  std::vector<int32_t> table(size_t(2 * n_pages), 0), slots;
  for (int pg = 0; pg < n_pages; ++pg) table[size_t(pg)] = n_pages - 1 - pg;
  s.all_pos.assign(size_t(2 * sc.n_cells), -1);
  for (int c = 0; c < sc.n_cells; ++c) {
    slots.push_back(table[size_t(c / kPage)] * kPage + c % kPage);
    s.all_pos[size_t(c)] = c == 5 ? -1 : c;
  }
  if (sc.recent_in_front) std::swap(s.all_pos[1], s.all_pos[size_t(sc.n_cells - 2)]);
  std::vector<int32_t> q_seq;
  for (int i = 0; i < sc.n_query; ++i) s.q_pos.push_back(sc.n_cells - sc.n_query + i), q_seq.push_back(0);
  s.q_pos.push_back(3), q_seq.push_back(1);
  s.n_tok = int64_t(s.q_pos.size());
  s.k_host = random_f32(sc.n_cells, width, rng);
  const HostTensor v_new = random_f32(sc.n_cells, width, rng);
  s.q_host = random_f32(s.n_tok, q_width, rng, -3, 3);
  std::tie(s.kc, s.vc) = stored_kv(p, storage, int64_t(n_pages) * kPage, s.k_host, v_new, slots);
  s.q = p.put(s.q_host);
  backend::AttentionParams& ap = s.base;
  ap.n_head = sc.n_head, ap.n_head_kv = sc.n_kv, ap.head_dim = sc.head_dim;
  ap.scale = 1.0f / std::sqrt(float(sc.head_dim)), ap.window = sc.window, ap.page_tokens = kPage;
  ap.token_pos = p.put(i32(s.q_pos)), ap.token_seq = p.put(i32(q_seq));
  ap.page_table = p.put(matrix(DType::i32, 2, n_pages, table));
  ap.seq_cells = p.put(i32({sc.n_cells, 0}));
  return s;
}

struct Result {
  std::vector<float> out, lse;
};

// Changes to a call's parameters.
struct Call {
  int exclude_recent = 0;
  int window = -1;  // -1: the scene's
  bool lse = true;  // false: no lse output (the result's lse is empty)
};

// One call over the cells whose entry in `cell_pos` (both rows) is >= 0, merged with
// `prior` when given.
Result attend(Placed& p, const Setup& s, const std::vector<int32_t>& cell_pos, const Result* prior = nullptr,
              const Call& call = {}) {
  backend::AttentionParams ap = s.base;
  ap.cell_pos = p.put(matrix(DType::i32, 2, s.sc.n_cells, cell_pos));
  ap.exclude_recent = call.exclude_recent;
  if (call.window >= 0) ap.window = call.window;
  if (call.lse) ap.lse = p.zeros(DType::f32, s.n_tok, s.sc.n_head);
  if (prior != nullptr) {
    ap.prior_out = p.put(matrix(DType::f32, s.n_tok, s.q.cols, prior->out));
    ap.prior_lse = p.put(matrix(DType::f32, s.n_tok, s.sc.n_head, prior->lse));
  }
  const Tensor out = p.zeros(DType::f32, s.n_tok, s.q.cols);
  ops::attention(p.be, s.q, s.kc, s.vc, ap, out);
  return {p.get(out), call.lse ? p.get(ap.lse) : std::vector<float>{}};
}

// The cells of `all` kept where keep(position), the rest -1.
template <typename Keep>
std::vector<int32_t> subset(const std::vector<int32_t>& all, Keep keep) {
  std::vector<int32_t> pos = all;
  for (int32_t& x : pos)
    if (x >= 0 && !keep(x)) x = -1;
  return pos;
}

// The largest |a - b| over finite entries; an entry -inf in one must be -inf in the other.
double lse_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == kNegInf || b[i] == kNegInf) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    d = std::max(d, double(std::abs(a[i] - b[i])));
  }
  return d;
}

// The scale of an lse tolerance: the largest finite |lse|, at least 1.
double lse_scale(const std::vector<float>& lse) {
  double m = 1.0;
  for (const float x : lse)
    if (x != kNegInf) m = std::max(m, double(std::abs(x)));
  return m;
}

std::vector<Scene> scenes() {
  std::vector<Scene> all;
  for (const auto& [n_head, n_kv, hd] : {std::tuple{4, 2, 64}, std::tuple{4, 1, 256}}) {
    // Decode over 100 cells (one item) and 700 (split-K chunks of 512), a prefill block
    // of 12 tokens, and both with a sliding window of 100 (chunks of 128).
    for (const auto& [n_cells, n_query, window] : {std::tuple{100, 1, 0}, std::tuple{700, 1, 0}, std::tuple{700, 12, 0},
                                                  std::tuple{700, 1, 100}, std::tuple{700, 12, 100}}) {
      Scene sc;
      sc.n_head = n_head, sc.n_kv = n_kv, sc.head_dim = hd;
      sc.n_cells = n_cells, sc.n_query = n_query, sc.window = window;
      all.push_back(sc);
    }
  }
  return all;
}

std::string describe(DType storage, const Scene& sc) {
  return std::string(quant::type_name(storage)) + " heads " + std::to_string(sc.n_head) + "/" +
         std::to_string(sc.n_kv) + " hd " + std::to_string(sc.head_dim) + " cells " + std::to_string(sc.n_cells) +
         " queries " + std::to_string(sc.n_query) + " window " + std::to_string(sc.window) +
         (sc.recent_in_front ? " recent in front" : "");
}

constexpr DType kStorages[] = {DType::f32, DType::f16, DType::kv_q4_g32, DType::kv_q8_g32};

// Scenes for exclude_recent: decode over 100 cells and over 700 (split-K, also after the
// newest 40 are excluded), prefill of 12 tokens (one block) and of 40 (a full block of 32
// and one of 8, tiles all visible to a block's rows next to masked ones), both with and
// without a window of 100; and 8 tokens over 40 cells (exclude_recent 40 hides all).
// Grouped heads of 64 with the second newest position in cell 1, one kv head of 256 with
// positions in cell order.
std::vector<Scene> exclude_scenes() {
  std::vector<Scene> all;
  for (const auto& [n_head, n_kv, hd] : {std::tuple{4, 2, 64}, std::tuple{4, 1, 256}}) {
    for (const auto& [n_cells, n_query, window] :
         {std::tuple{100, 1, 0}, std::tuple{700, 1, 0}, std::tuple{700, 12, 0}, std::tuple{700, 40, 0},
          std::tuple{700, 1, 100}, std::tuple{700, 40, 100}, std::tuple{40, 8, 0}}) {
      Scene sc;
      sc.n_head = n_head, sc.n_kv = n_kv, sc.head_dim = hd;
      sc.n_cells = n_cells, sc.n_query = n_query, sc.window = window;
      sc.recent_in_front = n_kv > 1;
      all.push_back(sc);
    }
  }
  return all;
}

constexpr int kExcludeRecent[] = {1, 5, 40};

struct NamedBackend {
  std::unique_ptr<Backend> be;
  std::string name;
};

// The cpu backends at every ISA level, in both sum orders.
std::vector<NamedBackend> cpu_backends() {
  std::vector<NamedBackend> all;
  for (const cpu::Isa isa : cpu::available_isas())
    for (const backend::SumOrder order : {backend::SumOrder::llama_cpp, backend::SumOrder::batch_invariant}) {
      all.push_back({cpu::make_cpu_backend({.threads = 2, .isa = isa}),
                     "cpu " + std::string(cpu::isa_name(isa)) +
                         (order == backend::SumOrder::batch_invariant ? " batch_invariant" : " llama_cpp")});
      all.back().be->set_sum_order(order);
    }
  return all;
}

}  // namespace

TEST_CASE("attention lse matches the reference and its definition", "[ops][attention][lse]") {
  auto ref = reference::make_reference_backend();
  for (const Scene& sc : scenes()) {
    for (const DType storage : kStorages) {
      Placed rp{*ref, {}};
      const Setup rs = make_setup(rp, storage, sc);
      const Result r = attend(rp, rs, rs.all_pos);
      INFO(describe(storage, sc));
      // The token of row 1 sees no cell: -inf and zeros.
      const size_t last = size_t(rs.n_tok - 1);
      for (int h = 0; h < sc.n_head; ++h) REQUIRE(r.lse[last * size_t(sc.n_head) + size_t(h)] == kNegInf);
      REQUIRE(std::all_of(r.out.begin() + long(last * rs.q.cols), r.out.end(), [](float x) { return x == 0.0f; }));
      if (storage == DType::f32) {
        // The reference's lse against log(sum e^(scale q.k)) over the visible cells, from the
        // host's keys (an F32 cache stores them exactly).
        const auto* qf = reinterpret_cast<const float*>(rs.q_host.bytes.data());
        const auto* kf = reinterpret_cast<const float*>(rs.k_host.bytes.data());
        const int group = sc.n_head / sc.n_kv, hd = sc.head_dim;
        for (int64_t t = 0; t + 1 < rs.n_tok; ++t)
          for (int h = 0; h < sc.n_head; ++h) {
            double total = 0;
            for (int c = 0; c < sc.n_cells; ++c) {
              const int32_t kp = rs.all_pos[size_t(c)], qp = rs.q_pos[size_t(t)];
              if (kp < 0 || kp > qp || (sc.window > 0 && qp - kp >= sc.window)) continue;
              double dot = 0;
              for (int d = 0; d < hd; ++d)
                dot += double(qf[t * rs.q.cols + h * hd + d]) * kf[int64_t(c) * rs.kc.cols + (h / group) * hd + d];
              total += std::exp(dot * rs.base.scale);
            }
            REQUIRE(std::abs(r.lse[size_t(t * sc.n_head + h)] - std::log(total)) <= 1e-5 * std::max(1.0, std::log(total)));
          }
      }
      for (const cpu::Isa isa : cpu::available_isas()) {
        auto cpu_be = cpu::make_cpu_backend({.threads = 2, .isa = isa});
        Placed cp{*cpu_be, {}};
        const Setup cs = make_setup(cp, storage, sc);
        const Result c = attend(cp, cs, cs.all_pos);
        INFO("isa " << cpu::isa_name(isa));
        // Same stored values: only the summation order and the fast exp differ.
        CHECK(max_abs_diff(r.out, c.out) <= 5e-5 * max_abs(r.out));
        CHECK(lse_diff(r.lse, c.lse) <= 2e-5 * lse_scale(r.lse));
      }
    }
  }
}

TEST_CASE("attention merged over two disjoint cell sets equals one call over their union", "[ops][attention][lse]") {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(reference::make_reference_backend());
  for (const cpu::Isa isa : cpu::available_isas()) backends.push_back(cpu::make_cpu_backend({.threads = 2, .isa = isa}));
  for (const Scene& sc : scenes()) {
    // Splits of row 0's cells by position: halves; a cut after the first query tokens'
    // positions (the second set is empty for them, and for a decode token); every other
    // cell. Under the window of 100 the first half is out of every token's reach.
    const int first_query = sc.n_cells - sc.n_query;
    const int cuts[] = {sc.n_cells / 2, first_query + 2};
    for (const DType storage : kStorages) {
      std::vector<float> ref_full_out;
      for (const auto& be : backends) {
        Placed p{*be, {}};
        const Setup s = make_setup(p, storage, sc);
        const Result full = attend(p, s, s.all_pos);
        if (be == backends.front()) ref_full_out = full.out;
        for (int split = 0; split < 3; ++split) {
          const auto in_a = [&](int32_t pos) { return split < 2 ? pos < cuts[split] : pos % 2 == 0; };
          const Result a = attend(p, s, subset(s.all_pos, in_a));
          const Result merged = attend(p, s, subset(s.all_pos, [&](int32_t pos) { return !in_a(pos); }), &a);
          INFO(describe(storage, sc) << " backend " << be->name() << " split " << split);
          if (split == 1) {  // the first query token sees no cell of the second set
            const Result b = attend(p, s, subset(s.all_pos, [&](int32_t pos) { return !in_a(pos); }));
            REQUIRE(b.lse[0] == kNegInf);
            REQUIRE(merged.out[0] == a.out[0]);
          }
          // The same backend and stored values; the sums are cut differently (chunks of
          // compacted cells) and the prior passes through f32.
          CHECK(max_abs_diff(full.out, merged.out) <= 2e-5 * max_abs(full.out));
          CHECK(lse_diff(full.lse, merged.lse) <= 2e-6 * lse_scale(full.lse));
          // And against the reference's single call.
          CHECK(max_abs_diff(ref_full_out, merged.out) <= 5e-5 * max_abs(ref_full_out));
        }
      }
    }
  }
}

TEST_CASE("attention with a prior of no cells returns its own result, and zeros for neither", "[ops][attention][lse]") {
  Scene sc;
  sc.n_cells = 40, sc.n_query = 8;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(reference::make_reference_backend());
  backends.push_back(cpu::make_cpu_backend({.threads = 2, .isa = std::nullopt}));
  for (const auto& be : backends) {
    Placed p{*be, {}};
    const Setup s = make_setup(p, DType::f32, sc);
    const Result own = attend(p, s, s.all_pos);
    Result empty{std::vector<float>(own.out.size(), 7.0f), std::vector<float>(own.lse.size(), kNegInf)};
    const Result merged = attend(p, s, s.all_pos, &empty);
    INFO(be->name());
    CHECK(merged.out == own.out);
    CHECK(merged.lse == own.lse);
    // A prior over cells but none of this call's: the prior comes back.
    const std::vector<int32_t> no_cells(s.all_pos.size(), -1);
    const Result prior_only = attend(p, s, no_cells, &own);
    CHECK(prior_only.out == own.out);
    CHECK(prior_only.lse == own.lse);
    // Neither: zeros and -inf, whatever prior_out holds.
    const Result neither = attend(p, s, no_cells, &empty);
    CHECK(std::all_of(neither.out.begin(), neither.out.end(), [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(neither.lse.begin(), neither.lse.end(), [](float x) { return x == kNegInf; }));
  }
}

TEST_CASE("attention with exclude_recent matches the reference and its definition", "[ops][attention][exclude]") {
  auto ref = reference::make_reference_backend();
  const auto cpus = cpu_backends();
  for (const Scene& sc : exclude_scenes()) {
    for (const DType storage : kStorages) {
      Placed rp{*ref, {}};
      const Setup rs = make_setup(rp, storage, sc);
      // The reference's results by [exclude_recent index][lse], for the cpu backends.
      Result refs[std::size(kExcludeRecent)][2];
      for (size_t e = 0; e < std::size(kExcludeRecent); ++e) {
        const int exclude = kExcludeRecent[e];
        refs[e][0] = attend(rp, rs, rs.all_pos, nullptr, {.exclude_recent = exclude, .lse = false});
        INFO(describe(storage, sc) << " exclude_recent " << exclude);
        const Result& r = refs[e][1] = attend(rp, rs, rs.all_pos, nullptr, {.exclude_recent = exclude});
        REQUIRE(refs[e][0].out == r.out);
        // Per token and head: whether it sees a cell (else zeros and -inf); for F32, the
        // lse against log(sum e^(scale q.k)) over the cells the contract makes visible.
        const auto* qf = reinterpret_cast<const float*>(rs.q_host.bytes.data());
        const auto* kf = reinterpret_cast<const float*>(rs.k_host.bytes.data());
        const int group = sc.n_head / sc.n_kv, hd = sc.head_dim;
        int64_t blind = 0;  // (token, head) pairs that see no cell
        for (int64_t t = 0; t < rs.n_tok; ++t)
          for (int h = 0; h < sc.n_head; ++h) {
            const int32_t qp = rs.q_pos[size_t(t)];
            double total = 0;
            int seen = 0;
            for (int c = 0; c < sc.n_cells && t + 1 < rs.n_tok; ++c) {
              const int32_t kp = rs.all_pos[size_t(c)];
              if (kp < 0 || kp > qp || (sc.window > 0 && qp - kp >= sc.window) || qp - kp < exclude) continue;
              ++seen;
              double dot = 0;
              for (int d = 0; d < hd; ++d)
                dot += double(qf[t * rs.q.cols + h * hd + d]) * kf[int64_t(c) * rs.kc.cols + (h / group) * hd + d];
              total += std::exp(dot * rs.base.scale);
            }
            const float lse = r.lse[size_t(t * sc.n_head + h)];
            if (seen == 0) {
              ++blind;
              REQUIRE(lse == kNegInf);
              const auto o = r.out.begin() + long(t * rs.q.cols + h * hd);
              REQUIRE(std::all_of(o, o + hd, [](float x) { return x == 0.0f; }));
            } else if (storage == DType::f32) {
              REQUIRE(std::abs(lse - std::log(total)) <= 1e-5 * std::max(1.0, std::abs(std::log(total))));
            } else {
              REQUIRE(lse != kNegInf);
            }
          }
        // Only the token of row 1 is blind, but for exclude_recent 40 over 40 cells all are.
        CHECK(blind == (sc.n_cells <= exclude ? rs.n_tok : 1) * sc.n_head);
      }
      for (const auto& [be, name] : cpus) {
        Placed cp{*be, {}};
        const Setup s = make_setup(cp, storage, sc);
        for (size_t e = 0; e < std::size(kExcludeRecent); ++e) {
          const int exclude = kExcludeRecent[e];
          // With an lse output every cache type takes the flash schedules; without one
          // F32 and F16 caches take llama.cpp's (per token, and GEMM blocks of >= 8
          // tokens), where an F16 cache rounds queries and probabilities to F16.
          for (const bool with_lse : {true, false}) {
            if (!with_lse && quant::kv::is_quantized(storage)) continue;
            const Call call{.exclude_recent = exclude, .lse = with_lse};
            const Result& r = refs[e][with_lse ? 1 : 0];
            const Result c = attend(cp, s, s.all_pos, nullptr, call);
            INFO(describe(storage, sc) << " exclude_recent " << exclude << " lse " << with_lse << " " << name);
            const double tol = !with_lse && storage == DType::f16 ? 2e-3 : 5e-5;
            CHECK(max_abs_diff(r.out, c.out) <= tol * std::max(max_abs(r.out), 1e-6));
            if (with_lse) CHECK(lse_diff(r.lse, c.lse) <= 2e-5 * lse_scale(r.lse));
          }
        }
      }
    }
  }
}

TEST_CASE("attention with exclude_recent, then a window prior, equals one call", "[ops][attention][exclude]") {
  std::vector<NamedBackend> backends;
  backends.push_back({reference::make_reference_backend(), "reference"});
  for (NamedBackend& be : cpu_backends()) backends.push_back(std::move(be));
  for (const Scene& sc : exclude_scenes()) {
    for (const DType storage : kStorages) {
      std::vector<float> ref_full_out;
      for (const auto& [be, name] : backends) {
        Placed p{*be, {}};
        const Setup s = make_setup(p, storage, sc);
        const Result full = attend(p, s, s.all_pos);
        if (&be == &backends.front().be) ref_full_out = full.out;
        for (const int exclude : kExcludeRecent) {
          // The older cells, then the newest `exclude` positions of each query (the same
          // cells here; a caller keeps them in a second cache) with the first as prior.
          const Result older = attend(p, s, s.all_pos, nullptr, {.exclude_recent = exclude});
          const int recent = sc.window > 0 ? std::min(exclude, sc.window) : exclude;
          const Result merged = attend(p, s, s.all_pos, &older, {.window = recent});
          INFO(describe(storage, sc) << " " << name << " exclude_recent " << exclude);
          CHECK(max_abs_diff(full.out, merged.out) <= 2e-5 * max_abs(full.out));
          CHECK(lse_diff(full.lse, merged.lse) <= 2e-6 * lse_scale(full.lse));
          CHECK(max_abs_diff(ref_full_out, merged.out) <= 5e-5 * max_abs(ref_full_out));
        }
      }
    }
  }
}

TEST_CASE("attention rejects bad lse and prior operands", "[ops][attention][errors]") {
  Scene sc;
  sc.n_cells = 40, sc.n_query = 2;
  auto be = reference::make_reference_backend();
  Placed p{*be, {}};
  const Setup s = make_setup(p, DType::f32, sc);
  const Tensor out = p.zeros(DType::f32, s.n_tok, s.q.cols);
  const auto expect = [&](const backend::AttentionParams& ap, const Tensor& o, const char* message) {
    try {
      ops::attention(*be, s.q, s.kc, s.vc, ap, o);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(message));
    }
  };
  backend::AttentionParams ok = s.base;
  ok.cell_pos = p.put(matrix(DType::i32, 2, sc.n_cells, s.all_pos));
  const Tensor lse = p.zeros(DType::f32, s.n_tok, sc.n_head);
  {
    backend::AttentionParams ap = ok;
    ap.score_acc = p.zeros(DType::f32, 2, int64_t(sc.n_cells) * sc.n_kv);
    ap.lse = lse;
    expect(ap, out, "score_acc is not combined with lse or prior_out");
    ap.lse = {};
    ap.prior_out = p.zeros(DType::f32, s.n_tok, s.q.cols), ap.prior_lse = lse;
    expect(ap, out, "score_acc is not combined with lse or prior_out");
  }
  {
    backend::AttentionParams ap = ok;
    ap.lse = p.zeros(DType::f32, s.n_tok, sc.n_head + 1);
    expect(ap, out, "attention: lse is [3, 5], expected [3, 4]");
  }
  {
    backend::AttentionParams ap = ok;
    ap.prior_out = p.zeros(DType::f32, s.n_tok, s.q.cols);
    expect(ap, out, "attention: prior_lse is [0, 0], expected [3, 4]");
    ap.prior_lse = p.zeros(DType::f32, s.n_tok - 1, sc.n_head);
    expect(ap, out, "attention: prior_lse is [2, 4], expected [3, 4]");
    ap.prior_lse = lse;
    ap.prior_out = p.zeros(DType::f32, s.n_tok, s.q.cols - 1);
    expect(ap, out, "attention: prior_out is [3, 255], expected [3, 256]");
    ap.prior_out = out;  // the op would overwrite the prior while reading it
    expect(ap, out, "attention: prior_out overlaps out");
  }
  {
    backend::AttentionParams ap = ok;
    ap.prior_lse = lse;
    expect(ap, out, "attention: prior_lse is given without prior_out");
  }
  {
    backend::AttentionParams ap = ok;
    ap.exclude_recent = -1;
    expect(ap, out, "attention: exclude_recent is -1, must be >= 0");
  }
  CHECK_NOTHROW(ops::attention(*be, s.q, s.kc, s.vc, ok, out));
}

}  // namespace ember::test
