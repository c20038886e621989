// Flash-style attention over the paged KV cache on the CPU, for every cache type:
// quantized caches (INT8 / INT4, quant/kv_formats.hpp) always, F16 and F32 caches for
// long sequences (attention.cpp decides). Keys and values are read in place, a tile of
// kTile cells at a time; no score matrix over the whole sequence and no full-size f32
// copy of the cache is ever made, so memory stays bounded by the tile and block sizes.
//
// Work is cut into items (block of query tokens, kv head, range of cells):
//  - Many query tokens of a sequence (prefill): blocks of kQueryBlock tokens. A block
//    walks the cells it can see tile by tile: the tile's key and value rows are decoded
//    into per-thread f32 buffers (kTile x head_dim, reused by all tokens x heads of the
//    block), scores = Q K^T and P V are small GEMMs, and the softmax is streamed over
//    the tiles (online softmax: running max and sum per query row, the partial output
//    rescaled when the max grows; Milakov & Gimelshein 2018, as in FlashAttention, Dao
//    et al. 2022).
//  - A lone query token (decode): its visible cells are cut into chunks of kChunk cells
//    at fixed cell indices, one item per (token, kv head, chunk), so that a long
//    context keeps every thread busy even with one kv head (split-K, as in
//    Flash-Decoding, Dao et al. 2023). Each item leaves its unnormalised output, max and
//    sum; they are merged afterwards, chunk by chunk in cell order:
//    M = max m_c, S = sum s_c e^(m_c - M), O = sum o_c e^(m_c - M) / S.
//    The chunks depend only on the sequence's cells, never on the thread count, so
//    results do not either.
// Quantized formats are scored in their stored domain (kv_rows.hpp): INT4 rows hold the
// group-wise rotated values y = R_G x, so queries are rotated once per item and the
// rotation is undone once on the accumulated output (it is linear).
//
// score_acc (H2O): an item then covers all the cells its block sees (no split) and makes
// two passes: the first finds each row's max and sum, the second computes the
// normalised probabilities, adds them to a per-thread partial and accumulates P V. The
// partials are added into score_acc in thread order after the parallel part.
//
// lse (AttentionParams::lse): each row's final max m and sum S give log S + m, written
// where the output row is (finish(), or merge() for a split token).
#include "cpu/ops/attention_flash.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/kv_rows.hpp"
#include "cpu/ops/vec_math.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu {
namespace {

// A sequence with at least this many query tokens in the batch is cut into blocks.
constexpr int64_t kTiledMinTokens = 8;
// Query tokens per block.
constexpr int64_t kQueryBlock = 32;
// Cells per decoded tile: kTile whole cache rows (every kv head) of f32 keys plus as many
// values (64 KiB each for 256 values per row) stay in L2 while every query row of the
// block uses them.
constexpr int64_t kTile = 64;
// Cells per split-K chunk of a lone query token (a multiple of kTile; a quarter of it
// for sliding windows of at most kChunk cells).
constexpr int64_t kChunk = 512;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A lone query token reads its cells in blocks of kLoneBlock key rows (one kv head's part
// decoded into L1 at a time, scored by every query head of the group while there) and
// of lone_value_rows(head_dim) value rows (about 16 KiB of f32).
constexpr int64_t kLoneBlock = 16;
// Key rows per call of the fused F16 scores kernel (its blocks are 16 or 32 keys).
constexpr int64_t kLoneF16Keys = 32;
// Cells ahead whose rows the fused kernels' passes (F16, INT8) ask for (software
// prefetch: the rows of a chunk lie on a few pages, their order is not predictable from
// the addresses), into L2: before each kernel call the rows of a quarter of a block
// (split over the kv heads), so that the requests are spread over the compute instead of
// issued in one burst that stalls it; the key pass runs on into the first rows of the
// value pass. Measured (bench_kernels, 4k/32k cells, 2 threads): F16 3-5 % and INT8
// 5-10 % faster than the rows of a whole block 16 cells ahead into L1; none at all is
// 20-30 % slower.
constexpr int64_t kFusedAhead = 64;
constexpr int64_t lone_value_rows(int hd) { return std::max<int64_t>(kLoneBlock, 4096 / std::max(hd, 1)); }

// ---- how a cache type's rows become f32 tiles ----

void f32_copy(const void* row, float* out, int n) { std::memcpy(out, row, size_t(n) * sizeof(float)); }
void rotate_none(float*, int64_t) {}

struct TileFormat {
  void (*decode_stored)(const void* row, float* out, int n);  // one kv head's part of a row
  void (*rotate)(float* v, int64_t n);                        // into the stored domain
  void (*unrotate)(float* v, int64_t n);                      // back
};

TileFormat tile_format(Isa isa, backend::DType type) {
  if (type == backend::DType::f32) return {f32_copy, rotate_none, rotate_none};
  if (type == backend::DType::f16) return {op_kernels(isa).f16_to_f32, rotate_none, rotate_none};
  const KvRowKernels kern = kv_row_kernels(isa, type);
  return {kern.decode_stored, kern.rotate, kern.unrotate};
}

// ---- the work ----

// The cells of one sequence that hold a position, in cell order: cell index, slot, position.
struct SeqCells {
  std::vector<int32_t> index, pos;
  std::vector<int64_t> slot;
  int64_t score_offset = 0;  // of this sequence in a per-thread score partial
};

// Query tokens of one sequence that share items; [lo, hi) the compacted cells some of
// them see.
struct Block {
  int32_t seq;
  std::vector<int64_t> tokens;
  int64_t lo, hi;
  int64_t n_chunks;  // > 1: split-K, partials merged afterwards
  int64_t first_partial;  // index of its first partial (kv head 0, chunk 0)
};

// One block over a range of cells, for every kv head (so that whole cache rows are read).
struct Item {
  int64_t block;
  int64_t lo, hi;   // compacted cells
  int64_t partial;  // -1: writes the output itself
};

// The largest of s[0..n) (-inf for none), in four 4-lane vectors (GCC/Clang vector
// extensions: the scalar comparisons do not vectorize without fast-math, whichever way
// they are written). The result is exact, so the same in any order.
float max_of(const float* s, int64_t n) {
  using F4 = float __attribute__((vector_size(16)));
  F4 m[4];
  for (F4& x : m) x = F4{} + kNegInf;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 4; ++l) {
      F4 t;
      std::memcpy(&t, s + j + 4 * l, sizeof t);
      m[l] = t > m[l] ? t : m[l];
    }
  float r = kNegInf;
  for (const F4& x : m)
    for (int k = 0; k < 4; ++k) r = x[k] > r ? x[k] : r;
  for (; j < n; ++j) r = s[j] > r ? s[j] : r;
  return r;
}

// Per-thread scratch of one item; `rows` = query tokens x group of one kv head. Kept per
// thread across calls (decode calls the op once per layer and token; fresh buffers of
// this size would be new pages from the kernel each time) and grown as needed.
struct Scratch {
  std::vector<float> queries;           // [n_head_kv][rows][head_dim], in the stored domain
  std::vector<float> keys, values;      // [kTile][n_head_kv * head_dim]: a tile of whole cache rows
  std::vector<float> scores;            // [rows][kTile]
  std::vector<float> product;           // [rows][head_dim]
  std::vector<float> acc_out;           // [n_head_kv][rows][head_dim], unnormalised (online) or final
  std::vector<float> row_max, row_sum;  // [n_head_kv][rows]
  std::vector<int32_t> row_pos;         // [rows]
  // A lone query token (run_lone): one kv head's part of kLoneBlock key rows and of up to
  // lone_value_rows() value rows, decoded into L1; the scores of every query head over
  // the item's cells [n_head][kChunk]; and the visibility of those cells.
  std::vector<float> head_keys, head_values, lone_scores;
  std::vector<uint8_t> lone_visible;

  static Scratch& of_this_thread(int64_t max_rows, int n_kv, int hd) {
    thread_local Scratch scratch;
    auto grow = [](auto& v, int64_t n) {
      if (int64_t(v.size()) < n) v.resize(size_t(n));
    };
    grow(scratch.queries, n_kv * max_rows * hd);
    grow(scratch.keys, kTile * n_kv * hd);
    grow(scratch.values, kTile * n_kv * hd);
    grow(scratch.scores, max_rows * kTile);
    grow(scratch.product, max_rows * hd);
    grow(scratch.acc_out, n_kv * max_rows * hd);
    grow(scratch.row_max, n_kv * max_rows);
    grow(scratch.row_sum, n_kv * max_rows);
    grow(scratch.row_pos, max_rows);
    grow(scratch.head_keys, kLoneBlock * hd);
    grow(scratch.head_values, lone_value_rows(hd) * hd);
    grow(scratch.lone_scores, n_kv * max_rows * kChunk);
    grow(scratch.lone_visible, kChunk);
    return scratch;
  }
};

class Flash {
 public:
  Flash(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
        const backend::AttentionParams& p, const AttentionTables& tab, const Tensor& out, float* lse)
      : ctx_(ctx), q_(q), k_(k_cache), v_(v_cache), out_(out), lse_(lse), p_(p), tab_(tab), ops_(op_kernels(ctx.isa)),
        kfmt_(tile_format(ctx.isa, k_cache.type)), vfmt_(tile_format(ctx.isa, v_cache.type)),
        group_(p.n_head / p.n_head_kv), hd_(p.head_dim), k_head_bytes_(quant::row_bytes(k_cache.type, p.head_dim)),
        v_head_bytes_(quant::row_bytes(v_cache.type, p.head_dim)),
        want_scores_(p.score_acc.rows > 0), k_base_(k_cache.row_ptr(0)), v_base_(v_cache.row_ptr(0)),
        direct_f16_(k_cache.type == backend::DType::f16 && v_cache.type == backend::DType::f16 &&
                    ops_.scores_f16 != nullptr && ops_.pv_f16 != nullptr &&
                    p.head_dim % 16 == 0 && p.head_dim <= 512),
        scores_q_(p.head_dim > 512                              ? nullptr
                  : k_cache.type == backend::DType::kv_q8_g32 || k_cache.type == backend::DType::kv_q8_g64
                      ? ops_.scores_q8
                  : quant::kv::is_int4(k_cache.type) ? ops_.scores_q4
                                                     : nullptr),
        pv_q_(p.head_dim > 512                                                               ? nullptr
              : v_cache.type == backend::DType::kv_q8_g32 || v_cache.type == backend::DType::kv_q8_g64 ? ops_.pv_q8
              : quant::kv::is_int4(v_cache.type)                                                    ? ops_.pv_q4
                                                                                                    : nullptr) {}

  void run(const std::vector<std::vector<int64_t>>& by_seq) {
    plan(by_seq);
    compute();
    merge();
    add_scores();
  }

 private:
  void plan(const std::vector<std::vector<int64_t>>& by_seq) {
    cells_.resize(by_seq.size());
    int64_t score_total = 0;
    for (int32_t s = 0; s < int32_t(by_seq.size()); ++s) {
      if (by_seq[size_t(s)].empty()) continue;
      SeqCells& sc = cells_[size_t(s)];
      // Page by page (no division per cell): this runs on one thread for every cell of
      // the sequence in every layer and step, so at long contexts it is not negligible.
      const int32_t n_cells = tab_.seq_cells[s];
      const int32_t pt = tab_.page_tokens;
      const int32_t* cell_pos = tab_.cell_pos + s * tab_.cells_per_row;
      const int32_t* pages = tab_.page_table + s * tab_.pages_per_row;
      sc.index.reserve(size_t(n_cells)), sc.slot.reserve(size_t(n_cells)), sc.pos.reserve(size_t(n_cells));
      for (int32_t c0 = 0; c0 < n_cells; c0 += pt) {
        const int64_t base = int64_t(pages[c0 / pt]) * pt - c0;
        const int32_t c1 = std::min(n_cells, c0 + pt);
        for (int32_t c = c0; c < c1; ++c) {
          const int32_t pos = cell_pos[c];
          if (pos < 0) continue;
          sc.index.push_back(c);
          sc.slot.push_back(base + c);
          sc.pos.push_back(pos);
        }
      }
      sc.score_offset = score_total;
      score_total += int64_t(sc.pos.size()) * p_.n_head_kv;
      const std::vector<int64_t>& tokens = by_seq[size_t(s)];
      // Batch-invariant sums (SumOrder::batch_invariant): every token alone, in the
      // lone schedule a decode step uses, so that a token's result does not depend on
      // how many tokens share its step (a speculative verification, an Engine batch).
      const int64_t block_tokens =
          !ctx_.batch_invariant && int64_t(tokens.size()) >= kTiledMinTokens ? kQueryBlock : 1;
      for (size_t t0 = 0; t0 < tokens.size(); t0 += size_t(block_tokens)) {
        Block b{s, {}, 0, 0, 1, 0};
        b.tokens.assign(tokens.begin() + int64_t(t0),
                        tokens.begin() + int64_t(std::min(tokens.size(), t0 + size_t(block_tokens))));
        add_block(std::move(b));
      }
    }
    score_total_ = score_total;
  }

  void add_block(Block b) {
    const SeqCells& sc = cells_[size_t(b.seq)];
    int32_t max_pos = INT32_MIN, min_pos = INT32_MAX;
    for (const int64_t t : b.tokens) {
      max_pos = std::max(max_pos, tab_.token_pos[t]);
      min_pos = std::min(min_pos, tab_.token_pos[t]);
    }
    // Only cells some query of the block can see take part (positions mostly increase
    // with the cell index; the mask handles the rest): none past max_pos, or past
    // max_pos - exclude_recent when the newest are excluded.
    const int64_t newest = int64_t(max_pos) - std::max(p_.exclude_recent, 0);
    int64_t lo = 0, hi = int64_t(sc.pos.size());
    while (hi > lo && sc.pos[size_t(hi - 1)] > newest) --hi;
    if (p_.window > 0)
      while (lo < hi && min_pos - sc.pos[size_t(lo)] >= p_.window) ++lo;
    b.lo = lo, b.hi = hi;
    // A sliding window of at most kChunk cells (Gemma's local layers: 512) would be one
    // item, i.e. one thread, for a model with one kv head: its chunks are a quarter as
    // long. The chunks still depend only on the layer and the cells.
    const int64_t chunk = p_.window > 0 && p_.window <= kChunk ? kChunk / 4 : kChunk;
    const bool split = b.tokens.size() == 1 && !want_scores_ && hi - lo > 0 && lo / chunk != (hi - 1) / chunk;
    const auto index = int64_t(blocks_.size());
    if (!split) {
      items_.push_back({index, lo, hi, -1});
    } else {
      const int64_t first = lo / chunk, last = (hi - 1) / chunk;
      b.n_chunks = last - first + 1;
      b.first_partial = n_partials_;
      n_partials_ += b.n_chunks;
      for (int64_t c = first; c <= last; ++c)
        items_.push_back({index, std::max(lo, c * chunk), std::min(hi, (c + 1) * chunk), b.first_partial + c - first});
    }
    max_rows_ = std::max(max_rows_, int64_t(b.tokens.size()) * group_);
    blocks_.push_back(std::move(b));
  }

  // Floats per partial (a lone token over one chunk): its unnormalised output rows
  // [n_head][head_dim], then their max and sum [n_head] each.
  int64_t partial_floats() const { return int64_t(p_.n_head) * (hd_ + 2); }

  void compute() {
    partials_.assign(size_t(n_partials_ * partial_floats()), 0.0f);
    const auto n_items = int64_t(items_.size());
    // Items are dealt round-robin (thread i takes items i, i + n_threads, ...), so that
    // each thread gets early (short) and late (long) causal blocks alike.
    const int n_threads = int(std::min<int64_t>(ctx_.pool.size(), n_items));
    scores_.assign(want_scores_ ? size_t(n_threads) : 0, {});
    ctx_.pool.run([&](int index, int) {
      if (index >= n_threads) return;
      Scratch& scratch = Scratch::of_this_thread(max_rows_, p_.n_head_kv, hd_);
      std::vector<float>* scores = nullptr;
      if (want_scores_) {
        scores = &scores_[size_t(index)];
        scores->assign(size_t(score_total_), 0.0f);
      }
      for (int64_t i = index; i < n_items; i += n_threads) run_item(items_[size_t(i)], scratch, scores);
    });
  }

  void run_item(const Item& item, Scratch& x, std::vector<float>* thread_scores) {
    const Block& b = blocks_[size_t(item.block)];
    if (b.tokens.size() == 1 && !want_scores_) return run_lone(item, b, x);
    const SeqCells& sc = cells_[size_t(b.seq)];
    const int hd = hd_, group = group_, n_kv = p_.n_head_kv;
    const int64_t width = int64_t(n_kv) * hd;  // values per cache row
    const auto rows = int64_t(b.tokens.size()) * group;  // row (i, g): tokens[i], head h * group + g
    int32_t min_row_pos = INT32_MAX, max_row_pos = INT32_MIN;
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      const int64_t t = b.tokens[i];
      const float* src = q_.row_ptr<float>(t);
      for (int h = 0; h < n_kv; ++h)
        std::copy(src + int64_t(h) * group * hd, src + int64_t(h + 1) * group * hd,
                  x.queries.begin() + (h * rows + int64_t(i) * group) * hd);
      for (int g = 0; g < group; ++g) x.row_pos[i * size_t(group) + size_t(g)] = tab_.token_pos[t];
      min_row_pos = std::min(min_row_pos, tab_.token_pos[t]);
      max_row_pos = std::max(max_row_pos, tab_.token_pos[t]);
    }
    kfmt_.rotate(x.queries.data(), n_kv * rows * hd);
    std::fill(x.acc_out.begin(), x.acc_out.begin() + n_kv * rows * hd, 0.0f);
    std::fill(x.row_max.begin(), x.row_max.begin() + n_kv * rows, kNegInf);
    std::fill(x.row_sum.begin(), x.row_sum.begin() + n_kv * rows, 0.0f);
    const int passes = want_scores_ ? 2 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      const bool stats_only = pass + 1 < passes;
      for (int64_t c0 = item.lo; c0 < item.hi; c0 += kTile) {
        const int64_t tc = std::min(kTile, item.hi - c0);
        int32_t tile_min = INT32_MAX, tile_max_pos = INT32_MIN;
        for (int64_t j = 0; j < tc; ++j) {
          tile_min = std::min(tile_min, sc.pos[size_t(c0 + j)]);
          tile_max_pos = std::max(tile_max_pos, sc.pos[size_t(c0 + j)]);
          decode_row(k_, sc.slot[size_t(c0 + j)], x.keys.data() + j * width);
          if (c0 + kTile + j < item.hi) prefetch_row(k_, sc.slot[size_t(c0 + kTile + j)]);
        }
        // Every row sees every cell of the tile: no mask needed (with exclude_recent = R,
        // every row's position is at least R past every cell's).
        const bool all_visible = int64_t(tile_max_pos) <= int64_t(min_row_pos) - std::max(p_.exclude_recent, 0) &&
                                 (p_.window <= 0 || max_row_pos - tile_min < p_.window);
        bool values_decoded = false;
        for (int h = 0; h < n_kv; ++h) {
          ops_.gemm_nt(int(rows), int(tc), hd, x.queries.data() + h * rows * hd, hd, x.keys.data() + h * hd,
                  int(width), x.scores.data(), int(tc), p_.scale);
          float* acc_out = x.acc_out.data() + h * rows * hd;
          bool any_visible = false;
          for (int64_t r = 0; r < rows; ++r) {
            float* s = x.scores.data() + r * tc;
            const int32_t pos = x.row_pos[size_t(r)];
            if (p_.softcap > 0.0f)
              for (int64_t j = 0; j < tc; ++j) s[j] = p_.softcap * std::tanh(s[j] / p_.softcap);
            if (!all_visible)
              for (int64_t j = 0; j < tc; ++j)
                if (!visible(pos, sc.pos[size_t(c0 + j)], p_.window, p_.exclude_recent)) s[j] = kNegInf;
            const float tile_max = max_of(s, tc);
            if (tile_max == kNegInf) {
              std::fill(s, s + tc, 0.0f);
              continue;
            }
            any_visible = true;
            float& running_max = x.row_max[size_t(h * rows + r)];
            float& running_sum = x.row_sum[size_t(h * rows + r)];
            if (stats_only || !want_scores_) {
              // Online softmax: fold the tile into the running max and sum (and output).
              const float new_max = std::max(running_max, tile_max);
              if (running_max != kNegInf && new_max > running_max) {
                const float alpha = exp_approx(running_max - new_max);
                running_sum *= alpha;
                if (!stats_only) ops_.scale_by(acc_out + r * hd, alpha, hd);
              }
              running_max = new_max;
              running_sum += ops_.exp_masked(s, tc, running_max);
            } else {
              // Second pass: the row's max and sum are final, the probabilities exact.
              ops_.exp_masked(s, tc, running_max);
              ops_.scale_by(s, 1.0f / running_sum, tc);
            }
          }
          if (stats_only || !any_visible) continue;
          if (thread_scores != nullptr) {
            float* dst = thread_scores->data() + sc.score_offset + int64_t(h) * int64_t(sc.pos.size()) + c0;
            for (int64_t r = 0; r < rows; ++r) ops_.add_into(dst, x.scores.data() + r * tc, tc);
          }
          if (!values_decoded) {
            for (int64_t j = 0; j < tc; ++j) {
              decode_row(v_, sc.slot[size_t(c0 + j)], x.values.data() + j * width);
              if (c0 + kTile + j < item.hi) prefetch_row(v_, sc.slot[size_t(c0 + kTile + j)]);
            }
            values_decoded = true;
          }
          ops_.gemm_nn(int(rows), hd, int(tc), x.scores.data(), int(tc), x.values.data() + h * hd, int(width),
                  x.product.data(), hd);
          ops_.add_into(acc_out, x.product.data(), rows * hd);
        }
      }
    }
    finish(item, b, x, rows);
  }

  // A lone query token without score_acc (decode): its cells [item.lo, item.hi), at most
  // kChunk of them, in two passes. Keys: kLoneBlock rows at a time, each kv head's part
  // decoded into L1 and scored there by the group's query heads (gemm_nt, m = group;
  // F16 rows: kLoneF16Keys at a time, read in place by OpKernels::scores_f16; INT8 and
  // INT4 rows in place by scores_q8 / scores_q4, where the level has them);
  // then every head's softmax over the item's cells at once (no online rescaling); then
  // values: lone_value_rows rows at a time, decoded per kv head and accumulated (gemm_nn;
  // F16, INT8 and INT4 rows: 32 at a time in place, pv_f16 / pv_q8 / pv_q4).
  // Each cache row is read once per pass, whole, in cell order.
  void run_lone(const Item& item, const Block& b, Scratch& x) {
    const SeqCells& sc = cells_[size_t(b.seq)];
    const int hd = hd_, group = group_, n_kv = p_.n_head_kv, n_head = p_.n_head;
    const int64_t t = b.tokens[0], lo = item.lo, n = item.hi - item.lo;
    const int32_t pos = tab_.token_pos[t];
    float* queries = x.queries.data();  // [n_head][hd], in the stored domain
    const float* src = q_.row_ptr<float>(t);
    std::copy(src, src + int64_t(n_head) * hd, queries);
    kfmt_.rotate(queries, int64_t(n_head) * hd);

    bool all_visible = true;
    for (int64_t j = 0; j < n; ++j) {
      const bool v = visible(pos, sc.pos[size_t(lo + j)], p_.window, p_.exclude_recent);
      x.lone_visible[size_t(j)] = v;
      all_visible = all_visible && v;
    }

    float* scores = x.lone_scores.data();  // [n_head][kChunk]
    // Before kv head h's part of the block [j0, j0 + jn): its share of the key rows
    // kFusedAhead cells ahead, running on into the first value rows.
    const auto prefetch_ahead = [&](int64_t j0, int64_t jn, int h) {
      for (int64_t j = j0 + kFusedAhead + h * jn / n_kv; j < j0 + kFusedAhead + (h + 1) * jn / n_kv; ++j)
        if (j < n) prefetch_row_l2(k_, sc.slot[size_t(lo + j)]);
        else if (j < 2 * n) prefetch_row_l2(v_, sc.slot[size_t(lo + j - n)]);
    };
    if (direct_f16_) {
      // F16 rows read in place by the level's fused kernels.
      for (int64_t j0 = 0; j0 < n; j0 += kLoneF16Keys) {
        const int64_t jn = std::min(kLoneF16Keys, n - j0);
        for (int h = 0; h < n_kv; ++h) {
          prefetch_ahead(j0, jn, h);
          const uint16_t* rows[kLoneF16Keys];
          for (int64_t j = 0; j < jn; ++j) rows[j] = head_f16(k_, sc.slot[size_t(lo + j0 + j)], h);
          ops_.scores_f16(queries + int64_t(h) * group * hd, group, hd, rows, int(jn), p_.scale,
                          scores + int64_t(h) * group * kChunk + j0, int(kChunk));
        }
      }
    } else if (scores_q_ != nullptr) {
      // INT8 / INT4 key rows read in place (scaled codes, no f32 tile).
      const int gsize = quant::kv::group_size(k_.type);
      for (int64_t j0 = 0; j0 < n; j0 += kLoneBlock) {
        const int64_t jn = std::min(kLoneBlock, n - j0);
        for (int h = 0; h < n_kv; ++h) {
          prefetch_ahead(j0, jn, h);
          const uint8_t* rows[kLoneBlock];
          for (int64_t j = 0; j < jn; ++j)
            rows[j] = reinterpret_cast<const uint8_t*>(row_of(k_, sc.slot[size_t(lo + j0 + j)]) + size_t(h) * k_head_bytes_);
          scores_q_(queries + int64_t(h) * group * hd, group, hd, gsize, rows, int(jn), p_.scale,
                    scores + int64_t(h) * group * kChunk + j0, int(kChunk));
        }
      }
    } else {
      for (int64_t j0 = 0; j0 < n; j0 += kLoneBlock) {
        const int64_t jn = std::min(kLoneBlock, n - j0);
        for (int64_t j = j0 + kLoneBlock; j < std::min(n, j0 + 2 * kLoneBlock); ++j) prefetch_row(k_, sc.slot[size_t(lo + j)]);
        for (int h = 0; h < n_kv; ++h) {
          for (int64_t j = 0; j < jn; ++j)
            kfmt_.decode_stored(row_of(k_, sc.slot[size_t(lo + j0 + j)]) + size_t(h) * k_head_bytes_,
                               x.head_keys.data() + j * hd, hd);
          ops_.gemm_nt(group, int(jn), hd, queries + int64_t(h) * group * hd, hd, x.head_keys.data(), hd,
                       scores + int64_t(h) * group * kChunk + j0, int(kChunk), p_.scale);
        }
      }
    }

    for (int r = 0; r < n_head; ++r) {
      float* s = scores + int64_t(r) * kChunk;
      if (p_.softcap > 0.0f)
        for (int64_t j = 0; j < n; ++j) s[j] = p_.softcap * std::tanh(s[j] / p_.softcap);
      if (!all_visible)
        for (int64_t j = 0; j < n; ++j)
          if (!x.lone_visible[size_t(j)]) s[j] = kNegInf;
      const float m = max_of(s, n);
      x.row_max[size_t(r)] = m;
      if (m == kNegInf) {
        std::fill(s, s + n, 0.0f);
        x.row_sum[size_t(r)] = 0.0f;
      } else {
        x.row_sum[size_t(r)] = ops_.exp_masked16(s, n, m);
      }
    }

    float* acc = x.acc_out.data();  // [n_head][hd]
    std::fill(acc, acc + int64_t(n_head) * hd, 0.0f);
    if (direct_f16_) {
      constexpr int64_t kBlock = 32;
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t jn = std::min(kBlock, n - j0);
        for (int h = 0; h < n_kv; ++h) {
          for (int64_t j = j0 + kFusedAhead + h * jn / n_kv; j < std::min(n, j0 + kFusedAhead + (h + 1) * jn / n_kv); ++j)
            prefetch_row_l2(v_, sc.slot[size_t(lo + j)]);
          const uint16_t* rows[kBlock];
          for (int64_t j = 0; j < jn; ++j) rows[j] = head_f16(v_, sc.slot[size_t(lo + j0 + j)], h);
          ops_.pv_f16(scores + int64_t(h) * group * kChunk + j0, int(kChunk), group, hd, rows, int(jn),
                      acc + int64_t(h) * group * hd);
        }
      }
    } else if (pv_q_ != nullptr) {
      const int gsize = quant::kv::group_size(v_.type);
      constexpr int64_t kBlock = 32;
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t jn = std::min(kBlock, n - j0);
        for (int h = 0; h < n_kv; ++h) {
          for (int64_t j = j0 + kFusedAhead + h * jn / n_kv; j < std::min(n, j0 + kFusedAhead + (h + 1) * jn / n_kv); ++j)
            prefetch_row_l2(v_, sc.slot[size_t(lo + j)]);
          const uint8_t* rows[kBlock];
          for (int64_t j = 0; j < jn; ++j)
            rows[j] = reinterpret_cast<const uint8_t*>(row_of(v_, sc.slot[size_t(lo + j0 + j)]) + size_t(h) * v_head_bytes_);
          pv_q_(scores + int64_t(h) * group * kChunk + j0, int(kChunk), group, hd, gsize, rows, int(jn),
                acc + int64_t(h) * group * hd);
        }
      }
    } else {
      const int64_t block = lone_value_rows(hd);
      for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t jn = std::min(block, n - j0);
        for (int64_t j = j0 + block; j < std::min(n, j0 + 2 * block); ++j) prefetch_row(v_, sc.slot[size_t(lo + j)]);
        for (int h = 0; h < n_kv; ++h) {
          for (int64_t j = 0; j < jn; ++j)
            vfmt_.decode_stored(row_of(v_, sc.slot[size_t(lo + j0 + j)]) + size_t(h) * v_head_bytes_,
                               x.head_values.data() + j * hd, hd);
          ops_.gemm_nn(group, hd, int(jn), scores + int64_t(h) * group * kChunk + j0, int(kChunk),
                       x.head_values.data(), hd, x.product.data(), hd);
          ops_.add_into(acc + int64_t(h) * group * hd, x.product.data(), int64_t(group) * hd);
        }
      }
    }
    finish(item, b, x, group);
  }

  // Writes an item's result: a lone token's unnormalised output, max and sum for merge()
  // when its cells were split, else the normalised output rows.
  void finish(const Item& item, const Block& b, Scratch& x, int64_t rows) {
    const int hd = hd_, group = group_, n_kv = p_.n_head_kv;
    if (item.partial >= 0) {  // a lone token (rows == group): keep output, max and sum for merge()
      float* dst = partials_.data() + item.partial * partial_floats();
      const int n_head = p_.n_head;
      std::copy(x.acc_out.begin(), x.acc_out.begin() + n_head * hd, dst);
      std::copy(x.row_max.begin(), x.row_max.begin() + n_head, dst + n_head * hd);
      std::copy(x.row_sum.begin(), x.row_sum.begin() + n_head, dst + n_head * (hd + 1));
      return;
    }
    vfmt_.unrotate(x.acc_out.data(), n_kv * rows * hd);
    for (int h = 0; h < n_kv; ++h)
      for (int64_t r = 0; r < rows; ++r) {
        const float sum = x.row_sum[size_t(h * rows + r)];
        const float scale = want_scores_ ? 1.0f : (sum > 0.0f ? 1.0f / sum : 0.0f);
        const int64_t t = b.tokens[size_t(r / group)];
        const int head = h * group + int(r % group);
        float* dst = out_row(t, head);
        const float* src = x.acc_out.data() + (h * rows + r) * hd;
        for (int d = 0; d < hd; ++d) dst[d] = src[d] * scale;
        if (lse_ != nullptr) lse_[t * p_.n_head + head] = log_normaliser(x.row_max[size_t(h * rows + r)], sum);
      }
  }

  // log(sum e^(s_j)) from the scores' max and sum e^(s_j - max); -inf for no scores.
  static float log_normaliser(float max, float sum) { return sum > 0.0f ? max + std::log(sum) : kNegInf; }

  // Asks for a cache row of the next tile while this one is decoded: the rows of a tile
  // lie on a few pages, but where the next page lies is not predictable.
  // The same into L2 (prefetcht2 on x86).
  void prefetch_row_l2(const Tensor& cache, int64_t slot) const {
    const std::byte* row = row_of(cache, slot);
    for (size_t off = 0; off < head_bytes_of(cache) * size_t(p_.n_head_kv); off += 64)
      __builtin_prefetch(row + off, 0, 1);
  }
  void prefetch_row(const Tensor& cache, int64_t slot) const {
    const std::byte* row = row_of(cache, slot);
    for (size_t off = 0; off < head_bytes_of(cache) * size_t(p_.n_head_kv); off += 64) __builtin_prefetch(row + off);
  }

  // All kv heads of cache row `slot` as f32 (stored domain).
  void decode_row(const Tensor& cache, int64_t slot, float* out) const {
    const std::byte* row = row_of(cache, slot);
    const TileFormat& f = &cache == &k_ ? kfmt_ : vfmt_;
    for (int h = 0; h < p_.n_head_kv; ++h) f.decode_stored(row + size_t(h) * head_bytes_of(cache), out + h * hd_, hd_);
  }

  // Cache row `slot` of K or V (the buffer's address looked up once, not per row).
  const std::byte* row_of(const Tensor& cache, int64_t slot) const {
    return &cache == &k_ ? k_base_ + size_t(slot) * k_.row_stride : v_base_ + size_t(slot) * v_.row_stride;
  }
  // Kv head h's part of F16 cache row `slot`.
  const uint16_t* head_f16(const Tensor& cache, int64_t slot, int h) const {
    return reinterpret_cast<const uint16_t*>(row_of(cache, slot) + size_t(h) * head_bytes_of(cache));
  }
  // Bytes of one kv head of a K or V row (keys and values may be stored differently: k8v4).
  size_t head_bytes_of(const Tensor& cache) const { return &cache == &k_ ? k_head_bytes_ : v_head_bytes_; }

  float* out_row(int64_t token, int head) const { return out_.row_ptr<float>(token) + int64_t(head) * hd_; }

  // Combines the chunks of each split block (a lone token), in chunk order.
  void merge() {
    std::vector<int64_t> split;
    for (int64_t b = 0; b < int64_t(blocks_.size()); ++b)
      if (blocks_[size_t(b)].n_chunks > 1) split.push_back(b);
    const int n_head = p_.n_head, hd = hd_;
    ctx_.pool.parallel_for(int64_t(split.size()), [&](int64_t begin, int64_t end) {
      std::vector<float> acc(size_t(n_head) * hd);
      for (int64_t i = begin; i < end; ++i) {
        const Block& b = blocks_[size_t(split[size_t(i)])];
        const float* first = partials_.data() + b.first_partial * partial_floats();
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int head = 0; head < n_head; ++head) {
          float max_all = kNegInf;
          for (int64_t c = 0; c < b.n_chunks; ++c) max_all = std::max(max_all, first[c * partial_floats() + n_head * hd + head]);
          float sum = 0.0f;
          float* a = acc.data() + head * hd;
          for (int64_t c = 0; c < b.n_chunks && max_all != kNegInf; ++c) {
            const float* part = first + c * partial_floats();
            const float m = part[n_head * hd + head];
            if (m == kNegInf) continue;
            const float w = exp_approx(m - max_all);
            sum += w * part[n_head * (hd + 1) + head];
            for (int d = 0; d < hd; ++d) a[d] += w * part[head * hd + d];
          }
          ops_.scale_by(a, sum > 0.0f ? 1.0f / sum : 0.0f, hd);
          if (lse_ != nullptr) lse_[b.tokens[0] * n_head + head] = log_normaliser(max_all, sum);
        }
        vfmt_.unrotate(acc.data(), int64_t(n_head) * hd);
        std::copy(acc.begin(), acc.end(), out_row(b.tokens[0], 0));
      }
    });
  }

  // Adds the per-thread probability sums into score_acc, in thread order.
  void add_scores() const {
    if (!want_scores_) return;
    for (int32_t s = 0; s < int32_t(cells_.size()); ++s) {
      const SeqCells& sc = cells_[size_t(s)];
      if (sc.index.empty()) continue;
      float* acc_row = p_.score_acc.row_ptr<float>(s);
      const auto n_cells = int64_t(sc.index.size());
      for (int h = 0; h < p_.n_head_kv; ++h)
        for (int64_t c = 0; c < n_cells; ++c) {
          float sum = 0.0f;
          for (const std::vector<float>& part : scores_)
            if (!part.empty()) sum += part[size_t(sc.score_offset + h * n_cells + c)];
          acc_row[int64_t(sc.index[size_t(c)]) * p_.n_head_kv + h] += sum;
        }
    }
  }

  OpContext& ctx_;
  const Tensor& q_;
  const Tensor& k_;
  const Tensor& v_;
  const Tensor& out_;
  float* const lse_;  // [q rows][n_head] or nullptr (see attention_flash)
  const backend::AttentionParams& p_;
  const AttentionTables& tab_;
  const OpKernels& ops_;  // the level's kernels (GEMMs, softmax and accumulation rows)
  const TileFormat kfmt_, vfmt_;  // keys' and values' formats (queries are rotated into the
                                  // keys' domain, outputs back from the values')
  const int group_, hd_;
  const size_t k_head_bytes_, v_head_bytes_;
  const bool want_scores_;
  const std::byte* const k_base_;  // row 0 of the K and V caches
  const std::byte* const v_base_;
  const bool direct_f16_;  // a lone token's F16 rows go to OpKernels::scores_f16 / pv_f16
  // A lone token's INT8 / INT4 rows, read in place: OpKernels::scores_q8 / pv_q8 or
  // scores_q4 / pv_q4 where the level has them, else nullptr (decoded tiles).
  decltype(OpKernels::scores_q8) const scores_q_;
  decltype(OpKernels::pv_q8) const pv_q_;
  std::vector<SeqCells> cells_;
  std::vector<Block> blocks_;
  std::vector<Item> items_;
  int64_t n_partials_ = 0, score_total_ = 0, max_rows_ = 0;
  std::vector<float> partials_;
  std::vector<std::vector<float>> scores_;  // per thread: [sequence][kv head][compacted cell]
};

}  // namespace

void attention_flash(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const backend::AttentionParams& p, const AttentionTables& tab,
                     const std::vector<std::vector<int64_t>>& by_seq, const Tensor& out, float* lse) {
  Flash(ctx, q, k_cache, v_cache, p, tab, out, lse).run(by_seq);
}

}  // namespace ember::cpu
