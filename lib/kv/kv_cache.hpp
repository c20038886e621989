// The paged KV cache of one or more sequences, over a (possibly shared) page Pool.
//
// Every layer of every sequence has its own page table and its own list of cells;
// cell c of a layer lives in pool row  pages[c / page_tokens] * page_tokens + c % page_tokens.
// A cell records two numbers:
//   idx  the token's index in its sequence (its original position), and
//   pos  the position attention uses: equal to idx, except for StreamingLLM's sinks,
//        which are moved to sit just before the window (see docs/kv-cache.md).
// Empty cells (evicted, or freed by a sliding window) hold pos = -1.
//
// Layers drop cells on their own: a sliding-window layer frees the pages whose cells
// no future query can see, and each sequence's eviction policy keeps it within its
// budget (SeqPolicy::max_tokens) per layer:
//   none       a batch that does not fit throws cache_full and changes nothing
//   streaming  keep the first `sinks` tokens and the most recent ones (StreamingLLM)
//   h2o        keep the `heavy` tokens with the largest accumulated attention plus the
//              `recent` most recent ones (H2O); the scores come from the attention op
// The host holds the authoritative tables; the model uploads the part a forward pass
// needs (layer_tables).
//
// The exact window (CacheConfig::exact_recent = R > 0): quantized rows lose most where
// attention looks most, at the newest tokens, so those are also kept exact. A second
// KVCache of F16 rows (the companion, exact()) receives every token this cache does; its
// layers act as sliding windows of R plus a page, so before a step at position p it
// holds the positions [p - R + 1, p) and the page before them (which keeps a rewind of
// up to a page exact). Attention runs twice per
// layer: over this cache without the keys within R of the query
// (AttentionParams::exclude_recent), and over the companion within a window of R,
// merged into one softmax (lse / prior_out). So every query sees its R newest keys
// (itself included) exact, whatever the steps its sequence was cut into. Every
// operation here (place, undo, commit, rewind, fork, save, load) is applied to both. A
// rewind past what the companion holds, or a state saved without it, refills it from
// this cache's (decoded) rows: fewer exact rows until new tokens arrive, nothing wrong.
//
// Steps are transactions. place() starts one for each sequence it touches; before
// it drops or moves anything of a sequence (window, eviction, sink moves) it keeps
// a snapshot of the tables of the layers that will drop or move cells and holds their
// pages, so that undo() restores the sequence exactly (rows a step rewrites in place
// are copied first); a layer the step only appends to is restored by removing its new
// cells, so a decode step past a sliding window copies the windowed layers' tables,
// not the full-context ones (whose size grows with the context). commit() ends the
// step and lets the snapshot go; so does the next place() of the sequence.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "kv/page_pool.hpp"

namespace ember::kv {

enum class Eviction { none, streaming, h2o };

struct EvictionConfig {
  Eviction policy = Eviction::none;
  int32_t sinks = 4;       // streaming: first tokens always kept
  int32_t heavy = 0;       // h2o: tokens kept for their accumulated attention
  int32_t recent = 0;      // h2o: most recent tokens always kept
};

// What one sequence may hold and how it makes room.
struct SeqPolicy {
  int32_t max_tokens = 4096;  // budget: most cells the sequence holds in one layer
  EvictionConfig eviction;
};

struct CacheConfig {
  int n_layer = 0;
  // Per layer: 0 for full attention, else the sliding window (cells outside it are
  // freed). Empty means 0 for every layer.
  std::vector<int32_t> layer_window;
  // The policy of sequences that were given none with set_policy().
  int32_t max_seq_tokens = 4096;  // budget: most cells one sequence holds in one layer
  EvictionConfig eviction;
  // Used only by the constructor that makes its own pool:
  int64_t k_width = 0, v_width = 0;
  quant::DType storage = quant::DType::f16;
  std::optional<quant::DType> v_storage;  // the value rows' type where it differs
  int32_t page_tokens = 16;
  int32_t max_tokens = 4096;  // pool size in cells per layer (rounded up to whole pages)
  // > 0: the newest `exact_recent` tokens of every sequence are also kept in a second,
  // full-precision cache (the exact window, drawn from the pool given to the
  // constructor), and attention reads them from there instead of from this cache's
  // (quantized) rows. Needs eviction none. See "The exact window" below.
  int32_t exact_recent = 0;
};

// One new token for the cache: the sequence it extends and its position.
struct CellRequest {
  int32_t seq = 0;
  int32_t pos = 0;
};

// Where a batch's tokens went, per layer; enough to roll it back.
struct Placement {
  std::vector<std::vector<int32_t>> slots;            // [layer][token] (-1: placed by place_token)
  std::vector<std::pair<int32_t, int32_t>> first_idx;  // (seq, index of its first new token)
  std::vector<int32_t> stepwise;                       // sequences placed by place_stepwise()
  // The same tokens in the exact window's cache (CacheConfig::exact_recent), else empty.
  std::vector<std::vector<int32_t>> exact_slots;
  std::vector<std::pair<int32_t, int32_t>> exact_first_idx;

  // Adds the tokens of `other` (placed after these) to this placement.
  void append(const Placement& other);
};

// A sink row that moved: rewrite `slot` as the original key rotated by `delta` positions.
struct SinkMove {
  int layer = 0;
  int32_t slot = 0;
  int32_t delta = 0;
  const float* original = nullptr;  // [k_width] f32, as first stored
};

// Memory held by one sequence (pages counted once per layer that references them).
struct SeqStats {
  int32_t tokens = 0;        // cells in use in the fullest layer
  int32_t pages = 0;         // pages referenced over all layers
  int32_t shared_pages = 0;  // of which shared with another sequence or session
};

class KVCache {
 public:
  // A cache over a shared pool; `backend` runs the row copies (copy on write,
  // compaction). Throws invalid_argument for a bad configuration.
  KVCache(std::shared_ptr<Pool> pool, backend::Backend& backend, const CacheConfig& config);
  // A cache with its own pool of config.max_tokens cells per layer.
  KVCache(backend::Backend& backend, const CacheConfig& config);
  // With config.exact_recent > 0: `exact_pool` (F16 or F32 rows of the same widths and
  // page size) holds the exact window.
  KVCache(std::shared_ptr<Pool> pool, backend::Backend& backend, const CacheConfig& config,
          std::shared_ptr<Pool> exact_pool);
  ~KVCache();

  const CacheConfig& config() const { return config_; }
  int32_t page_tokens() const { return pool_->config().page_tokens; }
  const Pool& pool() const { return *pool_; }
  // Returns the memory of the pool's free pages to the system (Pool::trim).
  int32_t trim_pool() { return pool_->trim(); }
  const std::shared_ptr<Pool>& shared_pool() const { return pool_; }
  backend::Tensor k() const { return pool_->k(); }
  backend::Tensor v() const { return pool_->v(); }
  // The exact window's cache (CacheConfig::exact_recent > 0), else nullptr.
  KVCache* exact() const { return exact_.get(); }
  // Tokens the exact window keeps (CacheConfig::exact_recent; 0: none).
  int32_t exact_recent() const { return exact_ ? config_.exact_recent : 0; }
  // Whether the exact window of `seq` holds, in every layer, the tokens a query at
  // position n reads from it ([n - exact_recent + 1, n)): a cut to n keeps every logit
  // as it was. True without a window.
  bool exact_holds(int32_t seq, int32_t n) const;

  // Tokens held by a sequence: live cells of its fullest layer (0 for an unknown id).
  int32_t n_cells(int32_t seq) const;
  // Index of the next token of the sequence (one past the largest idx placed), 0 if none.
  int32_t next_index(int32_t seq) const;
  std::vector<int32_t> sequences() const;
  SeqStats stats(int32_t seq) const;

  // Budget and eviction of one sequence (kept until erase_policy, also while the
  // sequence is empty). Throws invalid_argument for a bad policy.
  void set_policy(int32_t seq, const SeqPolicy& policy);
  void erase_policy(int32_t seq);
  SeqPolicy policy(int32_t seq) const;
  // Pages a sequence would need to take `n_new` more tokens now (before any
  // eviction frees some): the admission check of a scheduler.
  int64_t pages_needed(int32_t seq, int32_t n_new) const;

  // Makes room (sliding windows, eviction) and appends one cell per request, in order,
  // in every layer. Throws cache_full (budget or pool) or invalid_argument; then the
  // cache holds exactly what it held before.
  Placement place(std::span<const CellRequest> requests);
  // Rolls the sequences of a placement back to where they were before place(): the
  // cells it added go, and what it dropped or moved comes back.
  void undo(const Placement& placement);
  // Ends the step of a placement: what it dropped is freed for good.
  void commit(const Placement& placement);

  // A step of `n` tokens of `seq` from position `first_pos` whose cells are placed one
  // token at a time by place_token() (speculative verification under eviction). Checks
  // the pool for the whole step (cache_full, nothing changed) and opens the step: its
  // Placement has slots -1. undo() rolls it back; commit() keeps what truncate() needs
  // to cut it exactly (see the header comment).
  Placement place_stepwise(int32_t seq, int32_t first_pos, int32_t n);
  // Token `token` (0-based in the step) of an open stepwise step in one layer: makes
  // room as a one-token place() would (window, eviction, sink moves) and appends its
  // cell. Returns its pool row. Tokens of a layer come in order.
  int32_t place_token(int32_t seq, int layer, int32_t token);
  // Logs the stored key and value rows of `count` tokens from `token` on in one layer,
  // [count][k_width] and [count][v_width] f32, for a replay.
  void log_step_rows(int32_t seq, int layer, int32_t token, int32_t count, std::span<const float> k,
                     std::span<const float> v);
  // H2O: adds (and logs) the attention that token `token` gave the cells of one layer,
  // [cells * n_head_kv] as layer_tables laid them out after its place_token().
  void add_token_scores(int32_t seq, int layer, int32_t token, int n_head_kv, std::span<const float> scores);

  // Frees what the sliding-window layers of `seq` can no longer see from its next index
  // on (called after a forward pass, so that a long prompt does not keep its start).
  void trim_windows(int32_t seq);

  // The tables attention needs for `seqs` in one layer, one row per sequence.
  struct LayerTables {
    int64_t max_pages = 1, max_cells = 1;
    std::vector<int32_t> page_table;  // [rows, max_pages]
    std::vector<int32_t> cell_pos;    // [rows, max_cells]
    std::vector<int32_t> cells;       // [rows]
  };
  void layer_tables(int layer, std::span<const int32_t> seqs, LayerTables& out) const;

  // H2O: adds attention received, [max_cells * n_head_kv] per row as layer_tables laid them out.
  // Call it once the step's forward pass has succeeded, so that a rolled-back step adds nothing.
  void add_scores(int layer, std::span<const int32_t> seqs, int64_t max_cells, int n_head_kv,
                  std::span<const float> scores);

  // StreamingLLM sinks whose position changed since the last call, with their original
  // key rows (which the cache captures from the pool before the first move).
  std::vector<SinkMove> take_sink_moves(int32_t seq);

  // Rewind: keeps the tokens with idx < n_tokens. Returns false when the cells left
  // do not hold everything a query at n_tokens would see (a window or an eviction
  // dropped some): the caller must then recompute. Inside the last step, when it was
  // stepwise, the cut is exact (a replay); sink moves it made are then pending
  // (take_sink_moves), for the caller to rewrite those rows.
  bool truncate(int32_t seq, int32_t n_tokens);
  void remove(int32_t seq);
  void clear();

  // Copies sequence `src` of `from` into sequence `dst` of this cache (which must use
  // the same pool), sharing every page; writes copy a shared page first.
  void fork_from(const KVCache& from, int32_t src, int32_t dst);

  // Serialises one sequence (tables and the rows of its cells) / restores it into `seq`
  // (which must be empty). Throws invalid_argument for a blob that does not fit.
  void save(int32_t seq, std::string& out) const;
  void load(int32_t seq, std::string_view blob);

  // Checks each sequence's tables (tests); throws internal. Adds one count per page
  // reference to `refs`, so that a test can compare the sum over caches with the pool.
  void check_invariants(std::map<int32_t, int32_t>* refs = nullptr) const;

 private:
  struct Layer {
    std::vector<int32_t> pages;
    std::vector<int32_t> idx;    // per cell
    std::vector<int32_t> pos;    // per cell, -1 = empty
    std::vector<float> score;    // per cell (h2o)
    int32_t live = 0;
    int32_t dropped_max = -1;    // largest idx dropped by a window or an eviction
  };
  struct Sequence {
    std::vector<Layer> layers;
    int32_t next_idx = 0;
    // StreamingLLM: original key rows of the sinks per layer, and pending moves.
    std::vector<std::vector<float>> sink_keys;
    std::vector<std::vector<int32_t>> sink_orig_pos;
    std::vector<std::pair<int, int32_t>> moved;  // (layer, cell)
  };

  // The part of a placement that belongs to the exact window's cache.
  static Placement exact_part(const Placement& p) {
    Placement e;
    e.slots = p.exact_slots;
    e.first_idx = p.exact_first_idx;
    return e;
  }
  // Makes the exact window hold the sequence's newest exact_recent - 1 positions again
  // (after a rewind past them, or a state loaded without them), from this cache's rows.
  void refill_exact(int32_t seq);
  // check_invariants() of the exact window: each sequence's newest positions, no gaps.
  void check_exact() const;
  // How many positions a layer holds when they are exactly the newest before next_idx
  // (no gaps), else -1.
  static int32_t newest_held(const Layer& l, int32_t next_idx);
  // save() / load() of this cache's own tables and rows (without the exact window).
  void save_own(int32_t seq, std::string& out) const;
  void load_own(int32_t seq, std::string_view blob);
  // load(): throws invalid_argument where a layer's tables do not fit next_idx.
  static void check_cells(const Layer& l, int32_t next_idx, int layer);
  int32_t slot(const Layer& l, int32_t cell) const {
    return l.pages[size_t(cell / page_tokens())] * page_tokens() + cell % page_tokens();
  }
  void validate_policy(const SeqPolicy& p) const;
  void validate_config() const;
  // Per layer: whether placing `n_new` tokens from `first_new_pos` on drops or moves cells.
  std::vector<char> layers_dropping(const Sequence& s, const SeqPolicy& p, int32_t n_new,
                                    int32_t first_new_pos) const;
  // Keeps the tables of the layers marked in `layers` (all when null) and holds their pages.
  void take_snapshot(int32_t seq, const Sequence& s, const std::vector<char>* layers = nullptr);
  void drop_snapshot(int32_t seq);
  void free_window(Layer& l, int32_t window, int32_t first_new_pos);
  void evict(Sequence& s, const SeqPolicy& p, int layer, int32_t n_new);
  void evict_streaming(Sequence& s, const SeqPolicy& p, int layer, int32_t n_drop);
  void evict_h2o(Layer& l, const SeqPolicy& p, int32_t n_new, int32_t n_drop);
  int32_t append_cell(Layer& l, int32_t pos);
  int32_t place_one(Sequence& s, const SeqPolicy& p, int layer, int32_t pos);
  // Back to the snapshot; the layers it did not keep lose their cells from token `first` on.
  void restore_snapshot(int32_t seq, int32_t first);
  // Removes the cells of tokens >= first appended to `l` and the pages they emptied.
  void pop_cells(Layer& l, int32_t first);
  void replay_step(int32_t seq, int32_t n_keep);
  void compact(Layer& l);
  void drop_empty_pages(Layer& l);
  // Copy on write. `appending`: the write goes to cells past every snapshot's end,
  // so a page shared only with snapshots needs no copy.
  void make_writable(Layer& l, size_t page_index, bool appending = false);
  void copy_pool_rows(std::span<const int32_t> from, std::span<const int32_t> to);
  void release_all(Sequence& s);

  std::shared_ptr<Pool> pool_;
  backend::Backend& be_;
  CacheConfig config_;
  std::map<int32_t, Sequence> sequences_;
  std::map<int32_t, SeqPolicy> policies_;
  // Open steps: the sequence as it was before place() dropped or moved anything, with
  // the tables of the layers that drop or move cells (`saved`; the others are left
  // empty), holding a reference to each of their pages; and how many snapshots hold
  // each page.
  struct Snapshot {
    Sequence seq;
    std::vector<char> saved;  // per layer
  };
  std::map<int32_t, Snapshot> snapshots_;
  std::map<int32_t, int32_t> snapshot_refs_;
  // Stepwise steps (place_stepwise) whose snapshot is kept: what a replay needs.
  struct StepLog {
    int32_t first = 0, n = 0;
    std::vector<std::vector<float>> k, v;                // [layer][token * width]
    std::vector<std::vector<std::vector<float>>> score;  // [layer][token] H2O rows (empty: none)
  };
  std::map<int32_t, StepLog> step_logs_;
  std::unique_ptr<backend::Buffer> scratch_;  // row indices for copy_rows
  std::unique_ptr<KVCache> exact_;            // the exact window (exact_recent > 0)
};

}  // namespace ember::kv
