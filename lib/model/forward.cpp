#include "model/forward.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "backend/ops/attention.hpp"
#include "backend/ops/elementwise.hpp"
#include "backend/ops/get_rows.hpp"
#include "backend/ops/glu.hpp"
#include "backend/ops/kv_store.hpp"
#include "backend/ops/matmul.hpp"
#include "backend/ops/rms_norm.hpp"
#include "backend/ops/rope.hpp"
#include "common/fail.hpp"
#include "model/moe.hpp"
#include "quant/kv_formats.hpp"

namespace ember::model {

using backend::DType;

namespace {
constexpr std::string_view kQkvNames[] = {"attn_q", "attn_k", "attn_v", "attn_qkv"};
constexpr std::string_view kOutputNames[] = {"attn_output"};
constexpr std::string_view kGateUpNames[] = {"ffn_gate", "ffn_up"};
constexpr std::string_view kDownNames[] = {"ffn_down"};
}  // namespace

// Activation and index tensors for up to `capacity` tokens; reallocated when a
// larger chunk or cache arrives.
struct Forward::Workspace {
  int64_t capacity = 0, out_capacity = 0, row_capacity = 0, page_capacity = 0, cell_capacity = 0;
  bool scores = false;
  std::unique_ptr<backend::Buffer> buffer;
  Tensor ids, pos, slots, token_seq, out_rows;  // i32 [n, 1]
  Tensor page_table, seq_cells, cell_pos;       // i32 [rows, pages], [rows, 1], [rows, cells]
  Tensor score_acc;                             // f32 [rows, cells * n_head_kv] (H2O only)
  // The exact window's pass (KVCacheOptions::exact_recent), 1 row otherwise: its slots and
  // tables, and the first pass's output and softmax normalisers.
  bool exact = false;
  Tensor e_slots, e_page_table, e_seq_cells, e_cell_pos;  // i32 [n, 1], [rows, pages], [rows, 1], [rows, cells]
  Tensor attn_part, lse;                                   // f32 [n, n_head * hd], [n, n_head]
  Tensor x, h;                                  // [n, n_embd]
  Tensor q, attn;                               // [n, n_head * hd]
  Tensor k, v;                                  // [n, n_head_kv * hd]
  Tensor gate, up;                              // [n, n_ff]
  Tensor x_out, logits;                         // [n_out, n_embd], [n_out, n_vocab]
  MoeScratch moe;                               // [n, ...] for MoE families, 1 row otherwise
};

Forward::Forward(const HParams& hp, const Weights& weights, backend::Backend& backend, int max_batch)
    : hp_(hp),
      w_(weights),
      n_logits_(weights.output.empty() ? hp.n_vocab : weights.output.rows),
      be_(backend),
      max_batch_(max_batch),
      ws_(std::make_unique<Workspace>()) {
  require(max_batch >= 1, "max_batch must be >= 1, got {}", max_batch);
}

Forward::~Forward() = default;

void Forward::ensure_workspace(int64_t n, int64_t n_out, int64_t n_rows, int64_t max_pages, int64_t max_cells,
                               bool scores, bool exact) {
  Workspace& ws = *ws_;
  if (n <= ws.capacity && n_out <= ws.out_capacity && n_rows <= ws.row_capacity && max_pages <= ws.page_capacity &&
      max_cells <= ws.cell_capacity && (!scores || ws.scores) && (!exact || ws.exact))
    return;
  const int64_t cap = std::max(n, ws.capacity);
  const int64_t out_cap = std::max(n_out, ws.out_capacity);
  const int64_t row_cap = std::max(n_rows, ws.row_capacity);
  // Tables grow in steps so that a growing context does not reallocate every token.
  const int64_t page_cap = std::max(max_pages + max_pages / 4, ws.page_capacity);
  const int64_t cell_cap = std::max(max_cells + max_cells / 4, ws.cell_capacity);
  const bool with_scores = scores || ws.scores;
  const bool with_exact = exact || ws.exact;
  const int64_t e_cap = with_exact ? cap : 1, e_rows = with_exact ? row_cap : 1;
  const int64_t q_width = int64_t(hp_.n_head) * hp_.head_dim_k;
  const int64_t kv_width = int64_t(hp_.n_head_kv) * hp_.head_dim_k;
  const int64_t moe_cap = hp_.arch->moe ? cap : 1;

  struct Item {
    Tensor* tensor;
    DType type;
    int64_t rows, cols;
  };
  const Item items[] = {
      {&ws.ids, DType::i32, cap, 1},           {&ws.pos, DType::i32, cap, 1},
      {&ws.slots, DType::i32, cap, 1},         {&ws.token_seq, DType::i32, cap, 1},
      {&ws.out_rows, DType::i32, out_cap, 1},  {&ws.page_table, DType::i32, row_cap, page_cap},
      {&ws.seq_cells, DType::i32, row_cap, 1}, {&ws.cell_pos, DType::i32, row_cap * cell_cap, 1},
      {&ws.score_acc, DType::f32, with_scores ? row_cap * cell_cap * hp_.n_head_kv : 1, 1},
      {&ws.e_slots, DType::i32, e_cap, 1},     {&ws.e_page_table, DType::i32, e_rows, with_exact ? page_cap : 1},
      {&ws.e_seq_cells, DType::i32, e_rows, 1}, {&ws.e_cell_pos, DType::i32, e_rows * (with_exact ? cell_cap : 1), 1},
      {&ws.attn_part, DType::f32, e_cap, q_width}, {&ws.lse, DType::f32, e_cap, hp_.n_head},
      {&ws.x, DType::f32, cap, hp_.n_embd},    {&ws.h, DType::f32, cap, hp_.n_embd},
      {&ws.q, DType::f32, cap, q_width},       {&ws.attn, DType::f32, cap, q_width},
      {&ws.k, DType::f32, cap, kv_width},      {&ws.v, DType::f32, cap, kv_width},
      {&ws.gate, DType::f32, cap, hp_.n_ff},   {&ws.up, DType::f32, cap, hp_.n_ff},
      {&ws.x_out, DType::f32, out_cap, hp_.n_embd}, {&ws.logits, DType::f32, out_cap, n_logits_},
      {&ws.moe.router, DType::f32, moe_cap, std::max(hp_.n_expert, 1)},
      {&ws.moe.rows, DType::i32, moe_cap, 1},
      {&ws.moe.in, DType::f32, moe_cap, hp_.n_embd},
      {&ws.moe.gate, DType::f32, moe_cap, std::max<int64_t>(hp_.n_ff_exp, 1)},
      {&ws.moe.up, DType::f32, moe_cap, std::max<int64_t>(hp_.n_ff_exp, 1)},
      {&ws.moe.down, DType::f32, moe_cap, hp_.n_embd},
  };
  constexpr size_t kAlign = 64;
  size_t total = 0;
  for (const Item& it : items) total += (quant::row_bytes(it.type, it.cols) * size_t(it.rows) + kAlign - 1) / kAlign * kAlign;
  ws.buffer.reset();
  ws.buffer = be_.allocate(total);
  size_t offset = 0;
  for (const Item& it : items) {
    *it.tensor = backend::make_tensor(*ws.buffer, offset, it.type, it.rows, it.cols);
    offset += (it.tensor->bytes() + kAlign - 1) / kAlign * kAlign;
  }
  ws.capacity = cap;
  ws.out_capacity = out_cap;
  ws.row_capacity = row_cap;
  ws.page_capacity = page_cap;
  ws.cell_capacity = cell_cap;
  ws.scores = with_scores;
  ws.exact = with_exact;
}

void Forward::validate(std::span<const BatchToken> batch) const {
  for (size_t i = 0; i < batch.size(); ++i) {
    const BatchToken& t = batch[i];
    if (t.token < 0 || t.token >= hp_.n_vocab)
      fail(ErrorCode::invalid_argument, "batch entry {}: token id {} is outside the vocabulary [0, {})", i, t.token,
           hp_.n_vocab);
    if (t.pos < 0) fail(ErrorCode::invalid_argument, "batch entry {}: position {} is negative", i, t.pos);
    if (t.seq < 0) fail(ErrorCode::invalid_argument, "batch entry {}: sequence id {} is negative", i, t.seq);
  }
}

size_t Forward::run(kv::KVCache& cache, std::span<const BatchToken> batch, std::vector<float>& logits,
                    const std::atomic<bool>* cancel) {
  // Output row of each entry that wants logits.
  std::vector<size_t> out_row(batch.size(), 0);
  size_t n_out = 0;
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].logits) out_row[i] = n_out++;
  logits.assign(n_out * size_t(n_logits_), 0.0f);
  size_t produced = 0;
  const size_t done = run(
      cache, batch,
      [&](size_t index, std::span<const float> row) {
        std::copy(row.begin(), row.end(), logits.begin() + long(out_row[index] * size_t(n_logits_)));
        ++produced;
      },
      cancel);
  logits.resize(produced * size_t(n_logits_));
  return done;
}

size_t Forward::run(kv::KVCache& cache, std::span<const BatchToken> batch, const LogitsSink& sink,
                    const std::atomic<bool>* cancel) {
  validate(batch);
  // Where each sequence stood before the call: a failure in a later chunk rolls back
  // the earlier ones too (evictions they caused stay: the cache is still consistent).
  std::map<int32_t, int32_t> next_before;
  for (const BatchToken& t : batch) next_before.emplace(t.seq, cache.next_index(t.seq));
  size_t done = 0;
  try {
    while (done < batch.size()) {
      const size_t n = std::min(batch.size() - done, size_t(max_batch_));
      if (!run_chunk(cache, batch.subspan(done, n), done, sink, cancel)) return done;
      done += n;
    }
  } catch (...) {
    for (const auto& [seq, next] : next_before) cache.truncate(seq, next);
    throw;
  }
  return done;
}

bool Forward::run_chunk(kv::KVCache& cache, std::span<const BatchToken> chunk, size_t first_index,
                        const LogitsSink& sink, const std::atomic<bool>* cancel) {
  std::vector<kv::CellRequest> requests(chunk.size());
  for (size_t i = 0; i < chunk.size(); ++i) requests[i] = {chunk[i].seq, chunk[i].pos};
  const kv::Placement placement = cache.place(requests);
  bool finished = false;
  try {
    finished = compute(cache, chunk, placement, first_index, sink, cancel);
  } catch (...) {
    cache.undo(placement);
    throw;
  }
  if (!finished) {
    cache.undo(placement);
    return false;
  }
  cache.commit(placement);
  for (const auto& [seq, first] : placement.first_idx) cache.trim_windows(seq);
  return true;
}

const std::vector<float>& Forward::key_offsets() {
  ensure_key_offsets();
  return key_offsets_;
}

void Forward::ensure_key_offsets() {
  if (!offset_neg_.empty()) return;
  const int64_t kv_width = int64_t(hp_.n_head_kv) * hp_.head_dim_k;
  std::vector<float> offsets(size_t(hp_.n_layer) * size_t(kv_width), 0.0f);
  // Soft-capped scores (gemma2) are not shift-invariant: no offsets there.
  if (hp_.bos_token >= 0 && hp_.attn_softcap == 0.0f) {
    // One BOS token at position 0 through an F32 cache of its own; compute() copies
    // each layer's key (after rope) into `offsets`.
    kv::CacheConfig config;
    config.n_layer = hp_.n_layer;
    config.k_width = config.v_width = kv_width;
    config.storage = DType::f32;
    config.max_seq_tokens = config.max_tokens = config.page_tokens = 16;
    kv::KVCache scratch(be_, config);
    const BatchToken bos{.token = hp_.bos_token, .pos = 0, .seq = 0, .logits = false};
    capture_keys_ = &offsets;
    try {
      run(scratch, std::span(&bos, 1), [](size_t, std::span<const float>) {});
    } catch (...) {
      capture_keys_ = nullptr;
      throw;
    }
    capture_keys_ = nullptr;
  }
  std::vector<float> both(offsets.size() * 2);
  for (size_t i = 0; i < offsets.size(); ++i) both[i] = -offsets[i], both[offsets.size() + i] = offsets[i];
  offset_buffer_ = be_.allocate(both.size() * sizeof(float));
  const Tensor all = backend::make_tensor(*offset_buffer_, 0, DType::f32, 2 * int64_t(hp_.n_layer), kv_width);
  be_.upload(all, both.data());
  for (int il = 0; il < hp_.n_layer; ++il) {
    offset_neg_.push_back(all.slice_rows(il, 1));
    offset_pos_.push_back(all.slice_rows(hp_.n_layer + il, 1));
  }
  key_offsets_ = std::move(offsets);
}

backend::RopeParams Forward::rope_params(const kv::KVCache& cache, int layer, int n_head) const {
  const LayerParams& lp = hp_.layers[size_t(layer)];
  // LongRoPE: the long factors once a sequence may outgrow the original context (as
  // llama.cpp decides by its per-sequence context size).
  const Tensor& rope_factors = cache.config().max_seq_tokens > hp_.n_ctx_orig ? w_.rope_long : w_.rope_short;
  return backend::RopeParams{.n_head = n_head,
                             .head_dim = hp_.head_dim_k,
                             .n_rot = hp_.n_rot,
                             .mode = hp_.arch->rope_mode,
                             .freq_base = lp.rope_base,
                             .freq_scale = lp.rope_scale,
                             .mscale = hp_.rope_mscale,
                             .freq_factors = rope_factors};
}

void Forward::ensure_step_scratch(int64_t max_pages, int64_t max_cells) {
  StepScratch& st = step_;
  if (step_buffer_ && max_pages <= st.pages && max_cells <= st.cells) return;
  const int64_t pages = std::max(st.pages, max_pages + max_pages / 4 + 4);
  const int64_t cells = std::max(st.cells, max_cells + max_cells / 4 + 64);
  const int64_t kv_width = int64_t(hp_.n_head_kv) * hp_.head_dim_k;
  struct Item {
    Tensor* tensor;
    DType type;
    int64_t rows, cols;
  };
  const Item items[] = {{&st.slot, DType::i32, 1, 1},          {&st.pos, DType::i32, 1, 1},
                        {&st.seq0, DType::i32, 1, 1},          {&st.cells_of, DType::i32, 1, 1},
                        {&st.page_table, DType::i32, 1, pages}, {&st.cell_pos, DType::i32, 1, cells},
                        {&st.scores, DType::f32, 1, cells * hp_.n_head_kv}, {&st.key, DType::f32, 1, kv_width}};
  constexpr size_t kAlign = 64;
  size_t total = 0;
  for (const Item& it : items) total += (quant::row_bytes(it.type, it.cols) * size_t(it.rows) + kAlign - 1) / kAlign * kAlign;
  step_buffer_.reset();
  step_buffer_ = be_.allocate(total);
  size_t offset = 0;
  for (const Item& it : items) {
    *it.tensor = backend::make_tensor(*step_buffer_, offset, it.type, it.rows, it.cols);
    offset += (it.tensor->bytes() + kAlign - 1) / kAlign * kAlign;
  }
  st.pages = pages;
  st.cells = cells;
  const int32_t zero = 0;
  be_.upload(st.seq0, &zero);
}

void Forward::apply_sink_moves(kv::KVCache& cache, std::span<const kv::SinkMove> moves) {
  if (moves.empty()) return;
  const bool centered = quant::kv::is_quantized(cache.k().type);
  if (centered) ensure_key_offsets();
  ensure_step_scratch(1, 1);
  const StepScratch& st = step_;
  for (const kv::SinkMove& m : moves) {
    be_.upload(st.key, m.original);
    be_.upload(st.pos, &m.delta);
    be_.upload(st.slot, &m.slot);
    // The stored row is centered; rope rotates the key itself.
    if (centered) ops::add(be_, st.key, offset_pos_[size_t(m.layer)], st.key);
    ops::rope(be_, st.key, st.pos, rope_params(cache, m.layer, hp_.n_head_kv), st.key);
    if (centered) ops::add(be_, st.key, offset_neg_[size_t(m.layer)], st.key);
    ops::kv_store(be_, st.key, cache.k(), st.slot);
  }
}

void Forward::attend_stepwise(kv::KVCache& cache, int layer, int32_t seq, int64_t begin, int64_t end,
                              const backend::AttentionParams& base, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& attn) {
  const int64_t len = end - begin;
  const int n_kv = hp_.n_head_kv;
  // The rows as stored, for a replay of the kept tokens (KVCache::truncate).
  step_rows_.resize(size_t(len * (k.cols + v.cols)));
  be_.download(k.slice_rows(begin, len), step_rows_.data());
  be_.download(v.slice_rows(begin, len), step_rows_.data() + len * k.cols);
  cache.log_step_rows(seq, layer, 0, int32_t(len), std::span<const float>(step_rows_).first(size_t(len * k.cols)),
                      std::span<const float>(step_rows_).subspan(size_t(len * k.cols)));
  const bool h2o = cache.policy(seq).eviction.policy == kv::Eviction::h2o;
  const int32_t one_seq[1] = {seq};
  kv::KVCache::LayerTables tab;
  for (int64_t i = 0; i < len; ++i) {
    // What plain step i does in this layer: make room (evict, move sinks), store, attend.
    const int32_t slot = cache.place_token(seq, layer, int32_t(i));
    apply_sink_moves(cache, cache.take_sink_moves(seq));
    cache.layer_tables(layer, one_seq, tab);
    ensure_step_scratch(tab.max_pages, tab.max_cells);
    const StepScratch& st = step_;
    be_.upload(st.slot, &slot);
    ops::kv_store(be_, k.slice_rows(begin + i, 1), cache.k(), st.slot);
    ops::kv_store(be_, v.slice_rows(begin + i, 1), cache.v(), st.slot);
    backend::AttentionParams ap = base;
    ap.token_pos = base.token_pos.slice_rows(begin + i, 1);
    ap.token_seq = st.seq0;
    ap.page_table = st.page_table.slice_cols(0, tab.max_pages);
    ap.cell_pos = st.cell_pos.slice_cols(0, tab.max_cells);
    ap.seq_cells = st.cells_of;
    be_.upload(ap.page_table, tab.page_table.data());
    be_.upload(ap.cell_pos, tab.cell_pos.data());
    be_.upload(st.cells_of, tab.cells.data());
    ap.score_acc = Tensor{};
    if (h2o) {
      ap.score_acc = st.scores.slice_cols(0, tab.max_cells * n_kv);
      step_scores_.assign(size_t(tab.max_cells * n_kv), 0.0f);
      be_.upload(ap.score_acc, step_scores_.data());
    }
    ops::attention(be_, q.slice_rows(begin + i, 1), cache.k(), cache.v(), ap, attn.slice_rows(begin + i, 1));
    if (h2o) {
      be_.download(ap.score_acc, step_scores_.data());
      cache.add_token_scores(seq, layer, int32_t(i), n_kv, step_scores_);
    }
  }
}

bool Forward::compute(kv::KVCache& cache, std::span<const BatchToken> chunk, const kv::Placement& placement,
                      size_t first_index, const LogitsSink& sink, const std::atomic<bool>* cancel) {
  const auto n = int64_t(chunk.size());
  // Quantized caches hold keys minus the layer's offset (see key_offsets()).
  const bool centered = quant::kv::is_quantized(cache.k().type);
  if (centered) ensure_key_offsets();
  {
    // ---- host-side tables for this chunk ----
    std::map<int32_t, int32_t> seq_row;  // sequence id -> page-table row
    for (const BatchToken& t : chunk) seq_row.emplace(t.seq, 0);
    std::vector<int32_t> row_seqs;
    for (auto& [seq, r] : seq_row) {
      r = int32_t(row_seqs.size());
      row_seqs.push_back(seq);
    }
    std::vector<int32_t> ids(chunk.size()), pos(chunk.size()), token_seq(chunk.size()), out_rows;
    for (size_t i = 0; i < chunk.size(); ++i) {
      ids[i] = chunk[i].token;
      pos[i] = chunk[i].pos;
      token_seq[i] = seq_row[chunk[i].seq];
      if (chunk[i].logits) out_rows.push_back(int32_t(i));
    }
    const auto n_rows = int64_t(seq_row.size());
    // Every layer has its own page table (sliding windows and evictions differ).
    std::vector<kv::KVCache::LayerTables> tables(size_t(hp_.n_layer));
    int64_t max_pages = 1, max_cells = 1;
    for (int il = 0; il < hp_.n_layer; ++il) {
      cache.layer_tables(il, row_seqs, tables[size_t(il)]);
      max_pages = std::max(max_pages, tables[size_t(il)].max_pages);
      max_cells = std::max(max_cells, tables[size_t(il)].max_cells);
    }
    // The exact window (kv_cache.hpp) has tables of its own.
    kv::KVCache* const exact = cache.exact();
    std::vector<kv::KVCache::LayerTables> e_tables(exact ? size_t(hp_.n_layer) : 0);
    if (exact) {
      if (!placement.stepwise.empty())
        fail(ErrorCode::internal, "forward: a stepwise step on a cache with an exact window");
      for (int il = 0; il < hp_.n_layer; ++il) {
        exact->layer_tables(il, row_seqs, e_tables[size_t(il)]);
        max_pages = std::max(max_pages, e_tables[size_t(il)].max_pages);
        max_cells = std::max(max_cells, e_tables[size_t(il)].max_cells);
      }
    }
    bool h2o = false;
    for (int32_t seq : row_seqs) h2o = h2o || cache.policy(seq).eviction.policy == kv::Eviction::h2o;
    // H2O scores of every layer, added to the cache only once all layers ran.
    std::vector<std::vector<float>> layer_scores(h2o ? size_t(hp_.n_layer) : 0);
    const auto n_out = int64_t(out_rows.size());
    ensure_workspace(n, std::min<int64_t>(std::max<int64_t>(n_out, 1), kLogitsRowsPerPass), n_rows, max_pages,
                     max_cells, h2o, exact != nullptr);
    Workspace& ws = *ws_;
    const int hd = hp_.head_dim_k;

    // StreamingLLM sinks that moved: their keys are rotated again from the original.
    for (int32_t seq : row_seqs) apply_sink_moves(cache, cache.take_sink_moves(seq));

    // Runs of consecutive entries of one sequence, when some sequence's cells are placed
    // token by token (a speculative verification under eviction): then each run stores
    // and attends on its own, the stepwise ones token by token.
    struct Run {
      int64_t begin, end;
      int32_t seq;
      bool stepwise;
    };
    std::vector<Run> runs;
    if (!placement.stepwise.empty()) {
      for (int64_t i = 0; i < n; ++i) {
        const int32_t seq = chunk[size_t(i)].seq;
        if (runs.empty() || runs.back().seq != seq) {
          const bool sw =
              std::find(placement.stepwise.begin(), placement.stepwise.end(), seq) != placement.stepwise.end();
          runs.push_back({i, i, seq, sw});
        }
        runs.back().end = i + 1;
      }
    }

    const Tensor t_ids = ws.ids.slice_rows(0, n), t_pos = ws.pos.slice_rows(0, n);
    const Tensor t_slots = ws.slots.slice_rows(0, n), t_seq = ws.token_seq.slice_rows(0, n);
    const Tensor t_cells = ws.seq_cells.slice_rows(0, n_rows);
    be_.upload(t_ids, ids.data());
    be_.upload(t_pos, pos.data());
    be_.upload(t_seq, token_seq.data());

    const Tensor x = ws.x.slice_rows(0, n), h = ws.h.slice_rows(0, n);
    const Tensor q = ws.q.slice_rows(0, n), attn = ws.attn.slice_rows(0, n);
    const Tensor k = ws.k.slice_rows(0, n), v = ws.v.slice_rows(0, n);
    const Tensor gate = ws.gate.slice_rows(0, n), up = ws.up.slice_rows(0, n);

    ops::get_rows(be_, w_.token_embd, t_ids, x);
    if (hp_.embedding_scale != 1.0f) ops::scale(be_, x, hp_.embedding_scale, x);

    const std::vector<int32_t>* prev_slots = nullptr;  // what the workspace's tables hold
    const kv::KVCache::LayerTables* prev_tab = nullptr;
    for (int il = 0; il < hp_.n_layer; ++il) {
      if (cancel && cancel->load(std::memory_order_relaxed)) return false;
      const LayerWeights& L = w_.layers[size_t(il)];
      const LayerParams& lp = hp_.layers[size_t(il)];

      // ---- attention block ----
      // Without pre-norms (olmo2) the projections read the residual stream itself.
      if (!L.attn_norm.empty()) ops::rms_norm(be_, x, L.attn_norm, hp_.rms_eps, h);
      const Tensor& attn_in = L.attn_norm.empty() ? x : h;
      if (observer_) observer_(il, kQkvNames, attn_in);
      ops::matmul(be_, L.wq, attn_in, q);
      ops::matmul(be_, L.wk, attn_in, k);
      ops::matmul(be_, L.wv, attn_in, v);
      if (!L.bq.empty()) ops::add(be_, q, L.bq, q);
      if (!L.bk.empty()) ops::add(be_, k, L.bk, k);
      if (!L.bv.empty()) ops::add(be_, v, L.bv, v);
      if (hp_.arch->qk_norm == QkNorm::whole) {
        ops::rms_norm(be_, q, L.q_norm, hp_.rms_eps, q);
        ops::rms_norm(be_, k, L.k_norm, hp_.rms_eps, k);
      } else if (!L.q_norm.empty()) {
        const Tensor q_heads = q.reshape(n * hp_.n_head, hd);
        ops::rms_norm(be_, q_heads, L.q_norm, hp_.rms_eps, q_heads);
        const Tensor k_heads = k.reshape(n * hp_.n_head_kv, hd);
        ops::rms_norm(be_, k_heads, L.k_norm, hp_.rms_eps, k_heads);
      }
      ops::rope(be_, q, t_pos, rope_params(cache, il, hp_.n_head), q);
      if (hp_.arch->scale_queries) ops::scale(be_, q, hp_.attention_scale, q);
      ops::rope(be_, k, t_pos, rope_params(cache, il, hp_.n_head_kv), k);
      if (capture_keys_) be_.download(k.slice_rows(0, 1), capture_keys_->data() + size_t(il) * size_t(k.cols));
      if (centered) ops::add(be_, k, offset_neg_[size_t(il)], k);
      const kv::KVCache::LayerTables& tab = tables[size_t(il)];
      const Tensor t_pages = backend::make_tensor(*ws.buffer, ws.page_table.offset, DType::i32, n_rows, tab.max_pages);
      const Tensor t_cell_pos = backend::make_tensor(*ws.buffer, ws.cell_pos.offset, DType::i32, n_rows, tab.max_cells);
      // Layers whose slots and tables equal the previous layer's (all of them without
      // sliding windows) reuse what is on the backend: one upload per step, not per layer.
      const auto& slots_il = placement.slots[size_t(il)];
      if (prev_slots == nullptr || *prev_slots != slots_il) be_.upload(t_slots, slots_il.data());
      if (prev_tab == nullptr || prev_tab->max_pages != tab.max_pages || prev_tab->max_cells != tab.max_cells ||
          prev_tab->page_table != tab.page_table || prev_tab->cell_pos != tab.cell_pos || prev_tab->cells != tab.cells) {
        be_.upload(t_pages, tab.page_table.data());
        be_.upload(t_cell_pos, tab.cell_pos.data());
        be_.upload(t_cells, tab.cells.data());
      }
      prev_slots = &slots_il;
      prev_tab = &tab;
      if (runs.empty()) {
        ops::kv_store(be_, k, cache.k(), t_slots);
        ops::kv_store(be_, v, cache.v(), t_slots);
      }
      // The window keeps the same (centered) keys: a shift of every key by one vector
      // adds the same q.offset to every score of a query, which the merged softmax cancels.
      Tensor e_pages, e_cell_pos, e_cells;
      if (exact) {
        const kv::KVCache::LayerTables& et = e_tables[size_t(il)];
        const Tensor e_slots = ws.e_slots.slice_rows(0, n);
        e_pages = backend::make_tensor(*ws.buffer, ws.e_page_table.offset, DType::i32, n_rows, et.max_pages);
        e_cell_pos = backend::make_tensor(*ws.buffer, ws.e_cell_pos.offset, DType::i32, n_rows, et.max_cells);
        e_cells = ws.e_seq_cells.slice_rows(0, n_rows);
        be_.upload(e_slots, placement.exact_slots[size_t(il)].data());
        be_.upload(e_pages, et.page_table.data());
        be_.upload(e_cell_pos, et.cell_pos.data());
        be_.upload(e_cells, et.cells.data());
        ops::kv_store(be_, k, exact->k(), e_slots);
        ops::kv_store(be_, v, exact->v(), e_slots);
      }
      for (const Run& r : runs) {
        if (r.stepwise) continue;
        const Tensor slots = t_slots.slice_rows(r.begin, r.end - r.begin);
        ops::kv_store(be_, k.slice_rows(r.begin, r.end - r.begin), cache.k(), slots);
        ops::kv_store(be_, v.slice_rows(r.begin, r.end - r.begin), cache.v(), slots);
      }

      backend::AttentionParams ap;
      ap.n_head = hp_.n_head;
      ap.n_head_kv = hp_.n_head_kv;
      ap.head_dim = hd;
      ap.scale = hp_.arch->scale_queries ? 1.0f : hp_.attention_scale;
      ap.window = lp.window;
      ap.softcap = hp_.attn_softcap;
      ap.page_tokens = cache.page_tokens();
      ap.token_pos = t_pos;
      ap.token_seq = t_seq;
      ap.page_table = t_pages;
      ap.seq_cells = t_cells;
      ap.cell_pos = t_cell_pos;
      Tensor t_scores;
      if (h2o) {
        t_scores = backend::make_tensor(*ws.buffer, ws.score_acc.offset, DType::f32, n_rows,
                                        tab.max_cells * hp_.n_head_kv);
        layer_scores[size_t(il)].assign(size_t(t_scores.rows * t_scores.cols), 0.0f);
        be_.upload(t_scores, layer_scores[size_t(il)].data());
        ap.score_acc = t_scores;
      }
      if (exact) {
        // Each query reads its exact_recent newest keys (itself included) from the window
        // and the older ones from this cache, in one softmax: the two passes see disjoint
        // cells and the second merges the first in. The window holds every key the second
        // pass needs (kv_cache.hpp), so the result does not depend on how the tokens were
        // cut into steps.
        const int32_t recent = cache.exact_recent();
        backend::AttentionParams first = ap;
        const Tensor part = ws.attn_part.slice_rows(0, n), lse = ws.lse.slice_rows(0, n);
        first.lse = lse;
        first.exclude_recent = recent;
        ops::attention(be_, q, cache.k(), cache.v(), first, part);
        backend::AttentionParams second = ap;
        second.window = lp.window > 0 ? std::min(lp.window, recent) : recent;
        second.page_tokens = exact->page_tokens();
        second.page_table = e_pages;
        second.seq_cells = e_cells;
        second.cell_pos = e_cell_pos;
        second.prior_out = part;
        second.prior_lse = lse;
        ops::attention(be_, q, exact->k(), exact->v(), second, attn);
      } else if (runs.empty()) {
        ops::attention(be_, q, cache.k(), cache.v(), ap, attn);
      }
      for (const Run& r : runs) {
        if (r.stepwise) continue;
        backend::AttentionParams part = ap;
        part.token_pos = t_pos.slice_rows(r.begin, r.end - r.begin);
        part.token_seq = t_seq.slice_rows(r.begin, r.end - r.begin);
        ops::attention(be_, q.slice_rows(r.begin, r.end - r.begin), cache.k(), cache.v(), part,
                       attn.slice_rows(r.begin, r.end - r.begin));
      }
      if (h2o) be_.download(t_scores, layer_scores[size_t(il)].data());
      for (const Run& r : runs)
        if (r.stepwise) attend_stepwise(cache, il, r.seq, r.begin, r.end, ap, q, k, v, attn);

      if (observer_) observer_(il, kOutputNames, attn);
      ops::matmul(be_, L.wo, attn, h);
      if (!L.bo.empty()) ops::add(be_, h, L.bo, h);
      if (!L.attn_post_norm.empty()) ops::rms_norm(be_, h, L.attn_post_norm, hp_.rms_eps, h);
      if (hp_.residual_scale != 1.0f) ops::scale(be_, h, hp_.residual_scale, h);
      ops::add(be_, x, h, x);

      // ---- feed-forward block ----
      if (!L.ffn_norm.empty()) ops::rms_norm(be_, x, L.ffn_norm, hp_.rms_eps, h);
      const Tensor& ffn_in = L.ffn_norm.empty() ? x : h;
      if (hp_.arch->moe) {
        moe_ffn(be_, hp_, L, ffn_in, ws.moe, h);
      } else {
        if (observer_) observer_(il, kGateUpNames, ffn_in);
        ops::matmul(be_, L.w_gate, ffn_in, gate);
        ops::matmul(be_, L.w_up, ffn_in, up);
        ops::glu(be_, gate, up, hp_.arch->ffn_activation, gate);
        if (observer_) observer_(il, kDownNames, gate);
        ops::matmul(be_, L.w_down, gate, h);
      }
      if (!L.ffn_post_norm.empty()) ops::rms_norm(be_, h, L.ffn_post_norm, hp_.rms_eps, h);
      if (hp_.residual_scale != 1.0f) ops::scale(be_, h, hp_.residual_scale, h);
      ops::add(be_, x, h, x);
    }

    // Final norm and output projection for the rows that want logits, a few rows
    // at a time (a row of a 262k vocabulary is 1 MiB).
    for (int64_t first = 0; first < n_out; first += kLogitsRowsPerPass) {
      const int64_t rows = std::min<int64_t>(kLogitsRowsPerPass, n_out - first);
      const Tensor t_out = ws.out_rows.slice_rows(0, rows);
      const Tensor x_out = ws.x_out.slice_rows(0, rows);
      const Tensor logits = ws.logits.slice_rows(0, rows);
      be_.upload(t_out, out_rows.data() + first);
      ops::get_rows(be_, x, t_out, x_out);
      ops::rms_norm(be_, x_out, w_.output_norm, hp_.rms_eps, x_out);
      ops::matmul(be_, w_.output, x_out, logits);
      if (hp_.logit_scale != 1.0f) ops::scale(be_, logits, hp_.logit_scale, logits);
      host_logits_.resize(size_t(rows * n_logits_));
      be_.download(logits, host_logits_.data());
      // Gemma 2's final soft-cap, on the host (the logits are here anyway; no backend
      // needs a tanh op for it): c * tanh(logit * (1 / c)), in llama.cpp's float order.
      if (hp_.final_softcap > 0.0f) {
        const float inv = 1.0f / hp_.final_softcap;
        for (float& l : host_logits_) l = hp_.final_softcap * std::tanh(l * inv);
      }
      for (int64_t r = 0; r < rows; ++r)
        sink(first_index + size_t(out_rows[size_t(first + r)]),
             std::span<const float>(host_logits_.data() + r * n_logits_, size_t(n_logits_)));
    }
    be_.synchronize();
    // Stepwise sequences added their scores token by token (-1: a sequence no cache holds).
    for (int32_t& seq : row_seqs)
      if (std::find(placement.stepwise.begin(), placement.stepwise.end(), seq) != placement.stepwise.end()) seq = -1;
    for (size_t il = 0; il < layer_scores.size(); ++il)
      cache.add_scores(int(il), row_seqs, tables[il].max_cells, hp_.n_head_kv, layer_scores[il]);
  }
  return true;
}

}  // namespace ember::model
