// The paged KV cache on its own: page tables, sliding windows, eviction, forks,
// rewinds and state blobs, checked against invariants and against the row
// contents (every live cell must still hold the row written for its token).
#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "backend/ops/kv_store.hpp"
#include "backend/reference/reference_backend.hpp"
#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "ember/error.hpp"
#include "kv/kv_cache.hpp"
#include "quant/quant.hpp"

using namespace ember;

namespace {

constexpr int64_t kWidth = 8;
constexpr int kLayers = 3;

std::shared_ptr<kv::Pool> make_pool(backend::Backend& be, int32_t pages, int32_t page_tokens = 4,
                                    quant::DType type = quant::DType::f16) {
  kv::PoolConfig pc;
  pc.k_width = pc.v_width = kWidth;
  pc.storage = type;
  pc.page_tokens = page_tokens;
  pc.n_pages = pages;
  return std::make_shared<kv::Pool>(be, pc);
}

kv::CacheConfig config(kv::Eviction policy, int32_t budget, int32_t sinks = 0, int32_t heavy = 0,
                       int32_t recent = 0) {
  kv::CacheConfig c;
  c.n_layer = kLayers;
  c.layer_window = {0, 6, 0};  // layer 1 slides over 6 positions
  c.max_seq_tokens = budget;
  c.eviction = {policy, sinks, heavy, recent};
  return c;
}

// Row written for token `idx` in `layer`: small integers, exact in F16.
std::vector<float> row_for(int32_t idx, int layer, bool value) {
  std::vector<float> r(kWidth, 0.0f);
  r[0] = float(idx % 1024);
  r[1] = float(layer);
  r[2] = value ? 1.0f : -1.0f;
  r[3] = float(idx / 1024);
  return r;
}

struct Harness {
  std::unique_ptr<backend::Backend> be = reference::make_reference_backend();
  std::shared_ptr<kv::Pool> pool;

  // Appends n tokens to seq and writes their rows.
  void append(kv::KVCache& c, int32_t seq, int32_t n) {
    std::vector<kv::CellRequest> req;
    const int32_t first = c.next_index(seq);
    for (int32_t i = 0; i < n; ++i) req.push_back({seq, first + i});
    const kv::Placement p = c.place(req);
    write_rows(c, first, n, p.slots);
    if (c.exact() != nullptr) write_rows(*c.exact(), first, n, p.exact_slots);
    c.commit(p);
  }

  // Rows of tokens [first, first + n) into a cache's slots (per layer).
  void write_rows(const kv::KVCache& c, int32_t first, int32_t n, const std::vector<std::vector<int32_t>>& slots) {
    for (int layer = 0; layer < kLayers; ++layer)
      for (bool value : {false, true}) {
        std::vector<float> rows;
        for (int32_t i = 0; i < n; ++i) {
          const auto r = row_for(first + i, layer, value);
          rows.insert(rows.end(), r.begin(), r.end());
        }
        auto buf = be->allocate(size_t(n) * (kWidth * 4 + 4) + 64);
        const auto src = backend::make_tensor(*buf, 0, quant::DType::f32, n, kWidth);
        const auto slot_t = backend::make_tensor(*buf, size_t(n) * kWidth * 4, quant::DType::i32, n, 1);
        be->upload(src, rows.data());
        be->upload(slot_t, slots[size_t(layer)].data());
        ops::kv_store(*be, src, value ? c.v() : c.k(), slot_t);
      }
  }

  // The exact window of `seq` holds its newest `recent - 1` tokens at least, each with its
  // token's rows; or zeros, in a sliding-window layer, for a token that layer had freed.
  void check_window(const kv::KVCache& c, int32_t seq, int32_t recent) {
    const kv::KVCache& e = *c.exact();
    const int32_t next = c.next_index(seq);
    for (int layer = 0; layer < kLayers; ++layer) {
      kv::KVCache::LayerTables t;
      const int32_t seqs[] = {seq};
      e.layer_tables(layer, seqs, t);
      std::vector<int32_t> held;
      for (int32_t cell = 0; cell < t.cells[0]; ++cell) {
        const int32_t pos = t.cell_pos[size_t(cell)];
        if (pos < 0) continue;
        held.push_back(pos);
        const int32_t slot = t.page_table[size_t(cell / e.page_tokens())] * e.page_tokens() + cell % e.page_tokens();
        for (bool value : {false, true}) {
          std::vector<float> got(kWidth);
          quant::dequantize_row(e.k().type, (value ? e.v() : e.k()).row_ptr(slot), got.data(), kWidth);
          const int32_t w = c.config().layer_window[size_t(layer)];
          if (w > 0 && got == std::vector<float>(kWidth, 0.0f) && next - pos >= w) continue;
          REQUIRE(got == row_for(pos, layer, value));
        }
      }
      std::sort(held.begin(), held.end());
      REQUIRE(int32_t(held.size()) >= std::min(next, recent - 1));
      for (size_t i = 0; i < held.size(); ++i) REQUIRE(held[i] == next - int32_t(held.size() - i));
    }
  }

  // Every live cell holds its token's rows (keys of moved sinks excepted: the model
  // rewrites those).
  void check_rows(const kv::KVCache& c, int32_t seq) {
    for (int layer = 0; layer < kLayers; ++layer) {
      kv::KVCache::LayerTables t;
      const int32_t seqs[] = {seq};
      c.layer_tables(layer, seqs, t);
      for (int32_t cell = 0; cell < t.cells[0]; ++cell) {
        if (t.cell_pos[size_t(cell)] < 0) continue;
        const int32_t slot = t.page_table[size_t(cell / c.page_tokens())] * c.page_tokens() + cell % c.page_tokens();
        for (bool value : {false, true}) {
          std::vector<float> got(kWidth);
          quant::dequantize_row(c.k().type, (value ? c.v() : c.k()).row_ptr(slot), got.data(), kWidth);
          const bool moved_sink = !value && got[0] != float(t.cell_pos[size_t(cell)] % 1024);
          if (moved_sink) continue;
          REQUIRE(got[1] == float(layer));
          REQUIRE(got[2] == (value ? 1.0f : -1.0f));
          const int32_t idx = int32_t(got[0]) + 1024 * int32_t(got[3]);
          if (c.config().eviction.policy != kv::Eviction::streaming) REQUIRE(idx == t.cell_pos[size_t(cell)]);
        }
      }
    }
  }
};

}  // namespace

TEST_CASE("no page leaks and consistent tables after 10,000 random operations", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 400);
  std::vector<std::unique_ptr<kv::KVCache>> caches;
  // Two caches per policy, so that forks also cross sessions.
  for (int i = 0; i < 2; ++i) {
    caches.push_back(std::make_unique<kv::KVCache>(h.pool, *h.be, config(kv::Eviction::none, 40)));
    caches.push_back(std::make_unique<kv::KVCache>(h.pool, *h.be, config(kv::Eviction::streaming, 20, 2)));
    caches.push_back(std::make_unique<kv::KVCache>(h.pool, *h.be, config(kv::Eviction::h2o, 16, 0, 6, 10)));
  }
  std::mt19937 rng(42);
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  int full = 0, forks = 0, rewinds = 0, evictions_seen = 0;
  for (int op = 0; op < 10000; ++op) {
    const int ci = pick(int(caches.size()));
    kv::KVCache& c = *caches[size_t(ci)];
    const int32_t seq = pick(3);
    const int kind = pick(10);
    if (kind < 6) {
      const int32_t before = c.n_cells(seq);
      const int32_t n = 1 + pick(6);
      try {
        h.append(c, seq, n);
        if (c.n_cells(seq) < before + n) ++evictions_seen;
      } catch (const Error& e) {
        REQUIRE(e.code() == ErrorCode::cache_full);
        ++full;
        if (c.config().eviction.policy == kv::Eviction::none) REQUIRE(c.n_cells(seq) == before);
      }
    } else if (kind < 8) {
      c.truncate(seq, pick(c.next_index(seq) + 1));
      ++rewinds;
    } else if (kind < 9) {
      // Fork into a cache of the same configuration (ci ^ 3 pairs them up) or the same one.
      kv::KVCache& dst = pick(2) ? *caches[size_t((ci + 3) % 6)] : c;
      const int32_t dst_seq = pick(3);
      if (&dst != &c || dst_seq != seq) {
        dst.fork_from(c, seq, dst_seq);
        ++forks;
      }
    } else if (c.config().eviction.policy == kv::Eviction::h2o) {
      kv::KVCache::LayerTables t;
      const int32_t seqs[] = {seq};
      for (int layer = 0; layer < kLayers; ++layer) {
        c.layer_tables(layer, seqs, t);
        std::vector<float> s(size_t(t.max_cells));
        for (auto& x : s) x = float(rng() % 100) / 100.0f;
        c.add_scores(layer, seqs, t.max_cells, 1, s);
      }
    } else {
      c.remove(seq);
    }
    (void)c.take_sink_moves(seq);
    // Invariants: tables are consistent, and the pool's counts equal the references.
    std::map<int32_t, int32_t> refs;
    for (const auto& cache : caches) cache->check_invariants(&refs);
    for (const auto& [page, count] : refs) REQUIRE(h.pool->refcount(page) == count);
    REQUIRE(h.pool->stats().pages_used == int32_t(refs.size()));
    if (op % 50 == 0)
      for (const auto& cache : caches)
        for (int32_t s : cache->sequences()) h.check_rows(*cache, s);
  }
  INFO("cache_full " << full << ", forks " << forks << ", rewinds " << rewinds);
  CHECK(full > 0);
  CHECK(forks > 100);
  CHECK(evictions_seen > 100);
  caches.clear();
  CHECK(h.pool->stats().pages_used == 0);
}

TEST_CASE("sliding-window layers free the pages that fall out of their window", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 64);
  kv::KVCache c(h.pool, *h.be, config(kv::Eviction::none, 100));
  for (int i = 0; i < 10; ++i) h.append(c, 0, 4);
  kv::KVCache::LayerTables full, window;
  const int32_t seqs[] = {0};
  c.layer_tables(0, seqs, full);
  c.layer_tables(1, seqs, window);
  CHECK(full.cells[0] == 40);
  // Layer 1 (window 6) keeps at most 6 positions plus page slack: 2 or 3 pages of 4.
  CHECK(window.max_pages <= 3);
  CHECK(c.stats(0).pages == 10 + int32_t(window.max_pages) + 10);
  h.check_rows(c, 0);
  // Rewinding inside the window is exact; further back it is not (the layer lost cells).
  kv::KVCache short_one(h.pool, *h.be, config(kv::Eviction::none, 100));
  h.append(short_one, 0, 5);
  CHECK(short_one.truncate(0, 2));  // nothing dropped yet: exact
  CHECK(c.truncate(0, 38));
  CHECK_FALSE(c.truncate(0, 20));
}

TEST_CASE("StreamingLLM keeps the sinks and the most recent tokens", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 64);
  kv::KVCache c(h.pool, *h.be, config(kv::Eviction::streaming, 12, 4));
  for (int i = 0; i < 30; ++i) h.append(c, 0, 1);
  kv::KVCache::LayerTables t;
  const int32_t seqs[] = {0};
  c.layer_tables(0, seqs, t);
  std::vector<int32_t> pos;
  for (int32_t cell = 0; cell < t.cells[0]; ++cell)
    if (t.cell_pos[size_t(cell)] >= 0) pos.push_back(t.cell_pos[size_t(cell)]);
  // Tokens 22..29 are the window; the 4 sinks sit at the 4 positions just before it.
  CHECK(pos == std::vector<int32_t>{18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29});
  CHECK(c.n_cells(0) == 12);
  // The cache rewrites the moved sinks' keys (reported once, with their original row).
  const auto moves = c.take_sink_moves(0);
  CHECK(!moves.empty());
  for (const auto& m : moves) CHECK(m.delta == 18);
  CHECK(c.take_sink_moves(0).empty());
}

TEST_CASE("H2O keeps the heavy hitters and the recent window", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 64);
  kv::CacheConfig cfg = config(kv::Eviction::h2o, 6, 0, 2, 4);
  cfg.layer_window = {0, 0, 0};
  kv::KVCache c(h.pool, *h.be, cfg);
  h.append(c, 0, 6);
  // Token 1 and token 3 receive the most attention in every layer.
  const int32_t seqs[] = {0};
  for (int layer = 0; layer < kLayers; ++layer) {
    kv::KVCache::LayerTables t;
    c.layer_tables(layer, seqs, t);
    std::vector<float> s(size_t(t.max_cells), 0.1f);
    s[1] = 5.0f, s[3] = 4.0f;
    c.add_scores(layer, seqs, t.max_cells, 1, s);
  }
  h.append(c, 0, 2);  // 8 > 6: two cells go, the lowest scored outside the 4 recent
  for (int layer = 0; layer < kLayers; ++layer) {
    kv::KVCache::LayerTables t;
    c.layer_tables(layer, seqs, t);
    std::vector<int32_t> pos;
    for (int32_t cell = 0; cell < t.cells[0]; ++cell)
      if (t.cell_pos[size_t(cell)] >= 0) pos.push_back(t.cell_pos[size_t(cell)]);
    std::sort(pos.begin(), pos.end());
    CHECK(pos == std::vector<int32_t>{1, 3, 4, 5, 6, 7});
  }
  h.check_rows(c, 0);
}

TEST_CASE("a full cache without eviction fails, keeps everything, and works after a rewind", "[kv][errors]") {
  Harness h;
  h.pool = make_pool(*h.be, 64);
  kv::CacheConfig cfg = config(kv::Eviction::none, 10);
  kv::KVCache c(h.pool, *h.be, cfg);
  h.append(c, 0, 8);
  const auto pages = h.pool->stats().pages_used;
  try {
    h.append(c, 0, 3);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::cache_full);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("budget of 10"));
  }
  CHECK(c.n_cells(0) == 8);
  CHECK(h.pool->stats().pages_used == pages);
  h.check_rows(c, 0);
  CHECK(c.truncate(0, 6));
  h.append(c, 0, 3);
  CHECK(c.n_cells(0) == 9);
  h.check_rows(c, 0);
  // A pool that runs out is cache_full too, and changes nothing.
  auto small = make_pool(*h.be, 3);
  kv::KVCache d(small, *h.be, config(kv::Eviction::none, 100));
  CHECK_THROWS_AS(h.append(d, 0, 8), Error);
  CHECK(small->stats().pages_used == 0);
}

TEST_CASE("forks share pages and copy a page only when they write into it", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 200);
  kv::CacheConfig cfg = config(kv::Eviction::none, 100);
  cfg.layer_window = {0, 0, 0};
  kv::KVCache parent(h.pool, *h.be, cfg);
  h.append(parent, 0, 40);  // 10 pages per layer
  const int32_t one = h.pool->stats().pages_used;
  std::vector<std::unique_ptr<kv::KVCache>> forks;
  for (int i = 0; i < 8; ++i) {
    forks.push_back(std::make_unique<kv::KVCache>(h.pool, *h.be, cfg));
    forks.back()->fork_from(parent, 0, 0);
  }
  CHECK(h.pool->stats().pages_used == one);
  for (auto& f : forks) h.append(*f, 0, 1);  // each fork starts a page of its own per layer
  CHECK(h.pool->stats().pages_used == one + 8 * kLayers);
  for (auto& f : forks) h.check_rows(*f, 0);
  h.check_rows(parent, 0);
  parent.truncate(0, 38);  // the parent's last page is shared: it is copied before the write
  h.append(parent, 0, 1);
  for (auto& f : forks) h.check_rows(*f, 0);
  h.check_rows(parent, 0);
}

TEST_CASE("a saved sequence restores with the same rows; bad blobs are typed errors", "[kv][errors]") {
  Harness h;
  h.pool = make_pool(*h.be, 200);
  kv::KVCache a(h.pool, *h.be, config(kv::Eviction::streaming, 12, 2));
  for (int i = 0; i < 5; ++i) h.append(a, 0, 5);
  std::string blob;
  a.save(0, blob);
  kv::KVCache b(h.pool, *h.be, config(kv::Eviction::streaming, 12, 2));
  b.load(3, blob);
  const int32_t s0[] = {0}, s3[] = {3};
  for (int layer = 0; layer < kLayers; ++layer) {
    kv::KVCache::LayerTables ta, tb;
    a.layer_tables(layer, s0, ta);
    b.layer_tables(layer, s3, tb);
    CHECK(ta.cell_pos == tb.cell_pos);
  }
  h.check_rows(b, 3);
  CHECK_THROWS_AS(b.load(3, blob), Error);  // not empty
  for (size_t cut : {size_t(0), size_t(3), blob.size() / 2, blob.size() - 1}) {
    const auto used = h.pool->stats().pages_used;
    CHECK_THROWS_AS(b.load(7, std::string_view(blob).substr(0, cut)), Error);
    CHECK(h.pool->stats().pages_used == used);
  }
  // Tables that do not fit the sequence are refused, and nothing stays allocated. The
  // blob: a 32-byte header, next_idx (i32), then layer 0's live and dropped_max (i32)
  // and its idx table (u64 count, i32 entries); cells 0 and 1 hold the two sinks.
  const auto patched = [&](size_t offset, int32_t value) {
    std::string bad = blob;
    std::memcpy(bad.data() + offset, &value, 4);
    return bad;
  };
  int32_t next_idx = 0, idx0 = 0;
  std::memcpy(&next_idx, blob.data() + 32, 4);
  std::memcpy(&idx0, blob.data() + 52, 4);
  REQUIRE(next_idx == 25);
  const std::pair<std::string, const char*> tampered[] = {
      {patched(32, 1), "only 1 tokens exist"},           // next_idx below the tokens held
      {patched(52, -5), "holds token -5"},               // a negative token index
      {patched(56, idx0), "holds a token twice"},        // two cells with one token
      {patched(40, next_idx), "dropped token 25 of 25"}, // a drop of a token never placed
  };
  for (const auto& [bad, message] : tampered) {
    const auto used = h.pool->stats().pages_used;
    test::expect_error([&] { b.load(9, bad); }, ErrorCode::invalid_argument, message);
    CHECK(h.pool->stats().pages_used == used);
    CHECK(b.n_cells(9) == 0);
  }
  auto other = make_pool(*h.be, 50, 8);
  kv::KVCache c(other, *h.be, config(kv::Eviction::streaming, 12, 2));
  try {
    c.load(0, blob);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("pages of 4"));
  }
}

TEST_CASE("bad cache configurations are typed errors", "[kv][errors]") {
  Harness h;
  h.pool = make_pool(*h.be, 16);
  auto expect = [](const std::function<void()>& fn, const std::string& needle) {
    test::expect_error(fn, ErrorCode::invalid_argument, needle);
  };
  expect([&] { kv::KVCache(h.pool, *h.be, config(kv::Eviction::streaming, 4, 4)); }, "larger than the sinks");
  expect([&] { kv::KVCache(h.pool, *h.be, config(kv::Eviction::none, 0)); }, "budget");
  expect([&] { kv::KVCache(h.pool, *h.be, config(kv::Eviction::h2o, 10, 0, 3, 0)); }, "recent >= 1");
  expect([&] { make_pool(*h.be, 16, 0); }, "page_tokens");
  expect([&] { make_pool(*h.be, 0); }, "at least one page");
  kv::PoolConfig pc;
  pc.k_width = pc.v_width = 40;  // not whole groups of 32
  pc.storage = quant::DType::kv_q4_g32;
  pc.n_pages = 4;
  expect([&] { kv::Pool(*h.be, pc); }, "whole groups");
}

TEST_CASE("a rolled-back step leaves no trace: evictions, sink moves and windows come back", "[kv][transactions]") {
  Harness h;
  h.pool = make_pool(*h.be, 200);
  struct Case {
    const char* name;
    kv::CacheConfig config;
  };
  const Case cases[] = {{"streaming", config(kv::Eviction::streaming, 20, 2)},
                        {"h2o", config(kv::Eviction::h2o, 16, 0, 6, 10)},
                        {"window only", config(kv::Eviction::none, 100)}};
  for (const Case& k : cases) {
    INFO(k.name);
    kv::KVCache c(h.pool, *h.be, k.config);
    for (int i = 0; i < 15; ++i) h.append(c, 0, 2);  // past every budget and past layer 1's window
    if (k.config.eviction.policy == kv::Eviction::h2o) {
      kv::KVCache::LayerTables t;
      const int32_t seqs[] = {0};
      for (int layer = 0; layer < kLayers; ++layer) {
        c.layer_tables(layer, seqs, t);
        std::vector<float> s(size_t(t.max_cells));
        for (size_t i = 0; i < s.size(); ++i) s[i] = float((i * 7) % 11);
        c.add_scores(layer, seqs, t.max_cells, 1, s);
      }
    }
    (void)c.take_sink_moves(0);
    std::string before;
    c.save(0, before);
    const int32_t pages_before = h.pool->stats().pages_used;

    // A step of 3 tokens that drops cells, then fails: undo restores everything.
    std::vector<kv::CellRequest> req = {{0, 30}, {0, 31}, {0, 32}};
    kv::Placement p = c.place(req);
    CHECK(c.n_cells(0) == std::min<int32_t>(33, k.config.max_seq_tokens));
    if (k.config.eviction.policy == kv::Eviction::none) {
      // Only layer 1 (the window) drops cells: the open step holds the pages of that
      // layer alone, not those of the layers it only appends to.
      kv::KVCache::LayerTables t;
      const int32_t seqs[] = {0};
      for (int layer : {0, 2}) {
        c.layer_tables(layer, seqs, t);
        const int32_t pt = h.pool->config().page_tokens;
        for (int64_t i = 0; i < (t.cells[0] + pt - 1) / pt; ++i)
          CHECK(h.pool->refcount(t.page_table[size_t(i)]) == 1);
      }
    }
    c.undo(p);
    std::string after;
    c.save(0, after);
    CHECK(after == before);
    CHECK(h.pool->stats().pages_used == pages_before);
    h.check_rows(c, 0);
    std::map<int32_t, int32_t> refs;
    c.check_invariants(&refs);
    CHECK(int32_t(refs.size()) == h.pool->stats().pages_used);

    // The same step committed drops for good, and the snapshot's pages are freed.
    p = c.place(req);
    c.commit(p);
    std::string committed;
    c.save(0, committed);
    CHECK(committed != before);
    refs.clear();
    c.check_invariants(&refs);
    CHECK(int32_t(refs.size()) == h.pool->stats().pages_used);
  }
  CHECK(h.pool->stats().pages_used == 0);
}

TEST_CASE("a step that runs out of pool pages after evicting changes nothing", "[kv][transactions]") {
  Harness h;
  h.pool = make_pool(*h.be, 24);
  kv::KVCache c(h.pool, *h.be, config(kv::Eviction::streaming, 12, 2));
  for (int i = 0; i < 8; ++i) h.append(c, 0, 2);
  std::string before;
  c.save(0, before);
  // Another sequence takes every free page; the next step of seq 0 needs a new page.
  kv::KVCache other(h.pool, *h.be, config(kv::Eviction::none, 100));
  try {
    for (;;) h.append(other, 5, 4);
  } catch (const Error& e) {
    REQUIRE(e.code() == ErrorCode::cache_full);
  }
  REQUIRE(h.pool->stats().pages_free < kLayers);
  std::vector<kv::CellRequest> req;
  for (int32_t i = 0; i < 5; ++i) req.push_back({0, 16 + i});
  test::expect_error([&] { c.place(req); }, ErrorCode::cache_full, "pages");
  std::string after;
  c.save(0, after);
  CHECK(after == before);
}

TEST_CASE("sequences of one cache keep their own budget and eviction policy", "[kv]") {
  Harness h;
  h.pool = make_pool(*h.be, 200);
  kv::KVCache c(h.pool, *h.be, config(kv::Eviction::none, 40));
  c.set_policy(1, {20, {kv::Eviction::streaming, 2, 0, 0}});
  c.set_policy(2, {16, {kv::Eviction::h2o, 0, 6, 10}});
  for (int32_t seq : {0, 1, 2})
    for (int i = 0; i < 15; ++i) h.append(c, seq, 2);
  CHECK(c.n_cells(0) == 30);
  CHECK(c.n_cells(1) == 20);
  CHECK(c.n_cells(2) == 16);
  // Sequence 0 keeps the cache's default policy: no eviction, budget 40.
  test::expect_error([&] { h.append(c, 0, 11); }, ErrorCode::cache_full, "budget of 40");
  CHECK(c.n_cells(0) == 30);
  // A policy outlives the sequence's cells (a rewind to 0) until it is erased.
  c.remove(1);
  for (int i = 0; i < 5; ++i) h.append(c, 1, 5);
  CHECK(c.n_cells(1) == 20);
  c.erase_policy(1);
  CHECK(c.policy(1).eviction.policy == kv::Eviction::none);
  test::expect_error([&] { c.set_policy(3, {10, {kv::Eviction::h2o, 0, 4, 4}}); }, ErrorCode::invalid_argument,
               "not heavy 4 + recent 4");
  c.check_invariants();
}

namespace {

// Per layer: the cell positions, and the key and value rows of the live cells.
std::vector<std::vector<float>> layout(const kv::KVCache& c, int32_t seq) {
  std::vector<std::vector<float>> out;
  for (int layer = 0; layer < kLayers; ++layer) {
    kv::KVCache::LayerTables t;
    const int32_t seqs[] = {seq};
    c.layer_tables(layer, seqs, t);
    std::vector<float> l;
    for (int32_t cell = 0; cell < t.cells[0]; ++cell) {
      l.push_back(float(t.cell_pos[size_t(cell)]));
      if (t.cell_pos[size_t(cell)] < 0) continue;
      const int32_t slot = t.page_table[size_t(cell / c.page_tokens())] * c.page_tokens() + cell % c.page_tokens();
      for (const backend::Tensor& x : {c.k(), c.v()}) {
        std::vector<float> row(kWidth);
        quant::dequantize_row(quant::DType::f16, x.row_ptr(slot), row.data(), kWidth);
        l.insert(l.end(), row.begin(), row.end());
      }
    }
    out.push_back(std::move(l));
  }
  return out;
}

// H2O scores a token at `pos` gives the cells of a layer: a fixed function of both.
std::vector<float> scores_for(const kv::KVCache& c, int32_t seq, int layer, int32_t pos) {
  kv::KVCache::LayerTables t;
  const int32_t seqs[] = {seq};
  c.layer_tables(layer, seqs, t);
  std::vector<float> s(size_t(t.max_cells), 0.0f);
  for (size_t i = 0; i < size_t(t.cells[0]); ++i)
    if (t.cell_pos[i] >= 0) s[i] = float((t.cell_pos[i] * 7 + pos * 3 + layer) % 11);
  return s;
}

}  // namespace

TEST_CASE("a stepwise step cut after its kept tokens equals one-token steps of them", "[kv][transactions]") {
  Harness h;
  h.pool = make_pool(*h.be, 400);
  struct Case {
    const char* name;
    kv::CacheConfig config;
  };
  const Case cases[] = {{"streaming", config(kv::Eviction::streaming, 14, 3)},
                        {"h2o", config(kv::Eviction::h2o, 12, 0, 5, 7)}};
  for (const Case& k : cases) {
    const bool h2o = k.config.eviction.policy == kv::Eviction::h2o;
    kv::KVCache c(h.pool, *h.be, k.config);
    // One token of `seq` as a plain step places it: rows, then (H2O) scores.
    const auto plain_step = [&](int32_t seq) {
      const int32_t pos = c.next_index(seq);
      h.append(c, seq, 1);
      if (h2o)
        for (int layer = 0; layer < kLayers; ++layer) {
          const int32_t seqs[] = {seq};
          c.add_scores(layer, seqs, int64_t(scores_for(c, seq, layer, pos).size()), 1,
                       scores_for(c, seq, layer, pos));
        }
      (void)c.take_sink_moves(seq);
    };
    for (int i = 0; i < 20; ++i) plain_step(0), plain_step(1);  // both past the budget
    for (int32_t keep : {1, 3, 6}) {
      INFO(k.name << ", keep " << keep);
      // Sequence 1: a stepwise step of 6 tokens, cut to `keep`; sequence 0: `keep` plain steps.
      const int32_t first = c.next_index(1), n = 6;
      const kv::Placement p = c.place_stepwise(1, first, n);
      for (int layer = 0; layer < kLayers; ++layer) {
        std::vector<float> keys, values;
        for (int32_t i = 0; i < n; ++i) {
          const auto kr = row_for(first + i, layer, false), vr = row_for(first + i, layer, true);
          keys.insert(keys.end(), kr.begin(), kr.end());
          values.insert(values.end(), vr.begin(), vr.end());
        }
        c.log_step_rows(1, layer, 0, n, keys, values);
        for (int32_t i = 0; i < n; ++i) {
          const int32_t slot = c.place_token(1, layer, i);
          (void)c.take_sink_moves(1);
          auto buf = h.be->allocate(2 * kWidth * 4 + 64);
          const auto src = backend::make_tensor(*buf, 0, quant::DType::f32, 1, kWidth);
          const auto slots = backend::make_tensor(*buf, kWidth * 4, quant::DType::i32, 1, 1);
          h.be->upload(slots, &slot);
          h.be->upload(src, keys.data() + i * kWidth);
          ops::kv_store(*h.be, src, c.k(), slots);
          h.be->upload(src, values.data() + i * kWidth);
          ops::kv_store(*h.be, src, c.v(), slots);
          if (h2o) c.add_token_scores(1, layer, i, 1, scores_for(c, 1, layer, first + i));
        }
      }
      c.commit(p);
      CHECK(c.truncate(1, first + keep));
      (void)c.take_sink_moves(1);
      for (int32_t i = 0; i < keep; ++i) plain_step(0);
      CHECK(layout(c, 1) == layout(c, 0));
      c.check_invariants();
      // The scores came back too: later evictions agree.
      for (int i = 0; i < 8; ++i) plain_step(0), plain_step(1);
      CHECK(layout(c, 1) == layout(c, 0));
    }
    c.remove(0);
    c.remove(1);
  }
  CHECK(h.pool->stats().pages_used == 0);
}

TEST_CASE("an exact window holds the newest tokens through steps, rollbacks, rewinds, forks and state blobs",
          "[kv][exact]") {
  Harness h;
  h.pool = make_pool(*h.be, 400, 4, quant::DType::f32);
  auto exact_pool = make_pool(*h.be, 400, 4, quant::DType::f16);
  // A window of 8 is wider than layer 1's sliding window of 6: its oldest rows there
  // are ones the cache has freed.
  for (const int32_t recent : {1, 3, 8}) {
    kv::CacheConfig cfg = config(kv::Eviction::none, 60);
    cfg.exact_recent = recent;
    std::vector<std::unique_ptr<kv::KVCache>> caches;
    for (int i = 0; i < 2; ++i) caches.push_back(std::make_unique<kv::KVCache>(h.pool, *h.be, cfg, exact_pool));
    REQUIRE(caches[0]->exact_recent() == recent);
    std::mt19937 rng(7 + uint32_t(recent));
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    int undone = 0, saved = 0;
    for (int op = 0; op < 1500; ++op) {
      kv::KVCache& c = *caches[size_t(pick(2))];
      const int32_t seq = pick(3);
      const int kind = pick(12);
      if (kind < 6) {
        try {
          h.append(c, seq, 1 + pick(recent + 3));
        } catch (const Error& e) {
          REQUIRE(e.code() == ErrorCode::cache_full);
        }
      } else if (kind < 7) {
        // A step that fails after placing (a cancelled forward pass) leaves no trace.
        std::string before, after;
        c.save(seq, before);
        const int32_t first = c.next_index(seq);
        std::vector<kv::CellRequest> req;
        for (int32_t i = 0; i < 1 + pick(5); ++i) req.push_back({seq, first + i});
        try {
          const kv::Placement p = c.place(req);
          c.undo(p);
          ++undone;
        } catch (const Error& e) {
          REQUIRE(e.code() == ErrorCode::cache_full);
        }
        c.save(seq, after);
        REQUIRE(before == after);
      } else if (kind < 9) {
        // As a session does: a cut the cache cannot make exactly starts over.
        if (!c.truncate(seq, pick(c.next_index(seq) + 1))) c.remove(seq);
      } else if (kind < 10) {
        kv::KVCache& dst = *caches[size_t(pick(2))];
        const int32_t dst_seq = pick(3);
        if (&dst != &c || dst_seq != seq) dst.fork_from(c, seq, dst_seq);
      } else if (kind < 11) {
        // Through a blob: with the window, and without it (a cache that had none).
        std::string blob;
        c.save(seq, blob);
        const bool strip = pick(2) == 0;
        kv::CacheConfig plain = cfg;
        plain.exact_recent = 0;
        kv::KVCache none(h.pool, *h.be, plain);
        if (strip) {
          none.load(0, blob);  // the window's part is skipped
          blob.clear();
          none.save(0, blob);
        }
        c.remove(seq);
        c.load(seq, blob);
        ++saved;
      } else {
        c.remove(seq);
      }
      for (const auto& cache : caches) {
        cache->check_invariants();
        for (int32_t s : cache->sequences()) {
          h.check_rows(*cache, s);
          h.check_window(*cache, s, recent);
        }
      }
    }
    CHECK(undone > 50);
    CHECK(saved > 50);
    caches.clear();
  }
  CHECK(h.pool->stats().pages_used == 0);
  CHECK(exact_pool->stats().pages_used == 0);
}

TEST_CASE("an exact window needs eviction none, a full-precision pool and whole steps", "[kv][exact][errors]") {
  Harness h;
  h.pool = make_pool(*h.be, 100, 4, quant::DType::f32);
  auto exact_pool = make_pool(*h.be, 100, 4, quant::DType::f16);
  kv::CacheConfig cfg = config(kv::Eviction::none, 60);
  cfg.exact_recent = 4;
  test::expect_error([&] { kv::KVCache c(h.pool, *h.be, cfg, nullptr); }, ErrorCode::invalid_argument,
                     "needs a full-precision page pool");
  kv::PoolConfig q8;
  q8.k_width = q8.v_width = 32;
  q8.storage = quant::DType::kv_q8_g32;
  q8.page_tokens = 4;
  q8.n_pages = 10;
  auto int8_pool = std::make_shared<kv::Pool>(*h.be, q8);
  test::expect_error([&] { kv::KVCache c(h.pool, *h.be, cfg, int8_pool); }, ErrorCode::invalid_argument,
                     "must hold F16 or F32 rows");
  auto other_pages = make_pool(*h.be, 100, 8, quant::DType::f16);
  test::expect_error([&] { kv::KVCache c(h.pool, *h.be, cfg, other_pages); }, ErrorCode::invalid_argument,
                     "in pages of 8");
  kv::CacheConfig streaming = config(kv::Eviction::streaming, 12, 2);
  streaming.exact_recent = 4;
  test::expect_error([&] { kv::KVCache c(h.pool, *h.be, streaming, exact_pool); }, ErrorCode::invalid_argument,
                     "eviction none only");
  kv::KVCache c(h.pool, *h.be, cfg, exact_pool);
  test::expect_error([&] { c.set_policy(0, {12, {kv::Eviction::h2o, 0, 4, 8}}); }, ErrorCode::invalid_argument,
                     "eviction none only");
  h.append(c, 0, 5);
  test::expect_error([&] { c.place_stepwise(0, 5, 2); }, ErrorCode::unsupported, "whole steps only");
  kv::CacheConfig plain = cfg;
  plain.exact_recent = 0;
  kv::KVCache none(h.pool, *h.be, plain);
  test::expect_error([&] { none.fork_from(c, 0, 0); }, ErrorCode::invalid_argument, "exact window and the other not");
  // A window blob that does not end where the cache does is refused; nothing stays.
  std::string blob;
  c.save(0, blob);
  const auto used = h.pool->stats().pages_used, used_exact = exact_pool->stats().pages_used;
  std::string bad = blob;
  // The window's blob follows the cache's; its next_idx (after a 32-byte header) is cut short.
  uint64_t window_bytes = 0;
  std::memcpy(&window_bytes, bad.data() + bad.size() - 12, 8);
  const size_t window_at = bad.size() - 12 - size_t(window_bytes);
  const int32_t wrong = 3;
  std::memcpy(bad.data() + window_at + 32, &wrong, 4);
  CHECK_THROWS_AS(c.load(1, bad), Error);
  CHECK(h.pool->stats().pages_used == used);
  CHECK(exact_pool->stats().pages_used == used_exact);
  CHECK(c.n_cells(1) == 0);
}
