// The model as its own, cheaper draft (DraftKind::self): a subset of its layers, an
// output matrix cut to the most likely tokens, and/or a Q4_0 copy of its matrices.
// The derived weights are made once per model and option set and kept by the
// model; each generate() gets a small KV cache and a forward pass of its own, run
// on the model's backend (its one thread pool) under the executor's lock.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>

#include "common/fail.hpp"
#include "model/forward.hpp"
#include "quant/quant.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/self_draft.hpp"

namespace ember::runtime {
namespace {

using backend::Tensor;

// Bits a value takes in `type` (blocks included).
double bits_per_value(quant::DType type) {
  const auto& info = quant::type_info(type);
  return 8.0 * info.block_bytes / info.block_elems;
}

// A copy of `t`'s rows `ids` (all rows when empty), requantized to Q4_0 when
// `lowbit` and the type takes more than 4.5 bits, in a buffer of `be`'s.
Tensor derive_matrix(const Tensor& t, std::span<const int32_t> ids, bool lowbit, backend::Backend& be,
                     std::vector<std::shared_ptr<backend::Buffer>>& keep) {
  const bool requant = lowbit && bits_per_value(t.type) > 4.5 && t.cols % 32 == 0;
  if (ids.empty() && !requant) return t;
  const auto rows = ids.empty() ? t.rows : int64_t(ids.size());
  const quant::DType type = requant ? quant::DType::q4_0 : t.type;
  const size_t row_bytes = quant::row_bytes(type, t.cols);
  std::shared_ptr<backend::Buffer> buffer = be.allocate(row_bytes * size_t(rows));
  Tensor out = backend::make_tensor(*buffer, 0, type, rows, t.cols);
  std::vector<float> values(size_t(t.cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = ids.empty() ? r : ids[size_t(r)];
    if (requant) {
      quant::dequantize_row(t.type, t.row_ptr(from), values.data(), t.cols);
      quant::quantize_row(type, values.data(), out.row_ptr(r), t.cols);
    } else {
      std::copy_n(t.row_ptr(from), row_bytes, out.row_ptr(r));
    }
  }
  keep.push_back(std::move(buffer));
  return out;
}

// The N tokens a draft keeps when the vocabulary has no frequency table. Only
// tokens that text can produce are candidates: normal, byte and user-defined
// pieces and the end-of-generation tokens (not control or unused slots, of which
// Gemma 3 has 6,249, scored above most words). First every piece of at most two
// bytes (characters, punctuation: frequent everywhere, but a SentencePiece
// vocabulary scores its single characters last) and every user-defined piece
// (Gemma's runs of spaces, tabs and newlines, which code and lists use), then the
// rest by the vocabulary's piece scores when it has them (merge order), else by
// lowest id (BPE vocabularies number tokens roughly by merge order, frequent
// first). Ascending ids. The context's own tokens join per generation (SelfSource).
std::vector<int32_t> frequent_tokens(const tok::Tokenizer& tokenizer, int32_t n) {
  const int32_t n_vocab = tokenizer.n_vocab();
  std::vector<int32_t> kept, rest;
  for (int32_t id = 0; id < n_vocab; ++id) {
    const tok::TokenType type = tokenizer.token_type(id);
    const bool text = type == tok::TokenType::normal || type == tok::TokenType::byte ||
                      type == tok::TokenType::user_defined || type == tok::TokenType::undefined;
    if (!text && !tokenizer.is_end_of_generation(id)) continue;
    const bool first = tokenizer.token_piece(id, true).size() <= 2 || type == tok::TokenType::user_defined ||
                       tokenizer.is_end_of_generation(id);
    (first ? kept : rest).push_back(id);
  }
  if (int32_t(kept.size()) > n) kept.resize(size_t(n));
  bool scored = false;
  for (int32_t id = 0; id < n_vocab && !scored; ++id) scored = tokenizer.token_score(id) != 0.0f;
  if (scored)
    std::stable_sort(rest.begin(), rest.end(),
                     [&](int32_t a, int32_t b) { return tokenizer.token_score(a) > tokenizer.token_score(b); });
  rest.resize(std::min(rest.size(), size_t(n) - kept.size()));
  kept.insert(kept.end(), rest.begin(), rest.end());
  std::sort(kept.begin(), kept.end());
  return kept;
}

// Rows a generation may add to a reduced draft vocabulary: the tokens of its own
// prompt and output that the static set lacks (names, rare words the text repeats).
// A few hundred suffice for a prompt of thousands of tokens; the unused rows
// repeat row 0, which costs their share of the output product and never wins an
// argmax (a tie goes to the lower index).
constexpr int64_t kContextRows = 1024;

class SelfSource final : public DraftSource {
 public:
  SelfSource(std::shared_ptr<const SelfDraftWeights> w, Executor& ex, int32_t context)
      : w_(std::move(w)),
        ex_(ex),
        weights_(with_context_rows(*w_, ex.backend())),
        forward_(w_->hparams, weights_, ex.backend(), 512) {
    kv::CacheConfig cfg;
    cfg.n_layer = w_->hparams.n_layer;
    for (const model::LayerParams& lp : w_->hparams.layers) cfg.layer_window.push_back(lp.window);
    cfg.k_width = cfg.v_width = int64_t(w_->hparams.n_head_kv) * w_->hparams.head_dim_k;
    cfg.max_tokens = cfg.max_seq_tokens = context;
    cache_ = std::make_unique<kv::KVCache>(ex.backend(), cfg);
  }

  std::vector<int32_t> draft(std::span<const int32_t> context, int32_t k) override {
    std::lock_guard lock(ex_.mutex());
    // The draft needs no batch invariance (verification decides what is kept): its
    // steps take the backend's fastest order. Every executor step sets its own.
    ex_.backend().set_sum_order(backend::SumOrder::llama_cpp);
    size_t common = 0;
    while (common < have_.size() && common < context.size() && have_[common] == context[common]) ++common;
    if (common < have_.size()) {
      if (!cache_->truncate(0, int32_t(common))) {
        cache_->remove(0);
        common = 0;
      }
      have_.resize(common);
    }
    add_context_rows(context);
    std::vector<int32_t> out;
    std::span<const int32_t> feed = context.subspan(common);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (feed.size() > 1) {  // catch up with the context (no logits), then draft from its last token
        batch_.clear();
        for (size_t i = 0; i + 1 < feed.size(); ++i) batch_.push_back({feed[i], int32_t(have_.size() + i), 0, false});
        forward_.run(*cache_, batch_, logits_);
        have_.insert(have_.end(), feed.begin(), feed.end() - 1);
        feed = feed.last(1);
      }
      catch_up_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      while (int32_t(out.size()) < k && !feed.empty()) {
        batch_.clear();
        for (size_t i = 0; i < feed.size(); ++i)
          batch_.push_back({feed[i], int32_t(have_.size() + i), 0, i + 1 == feed.size()});
        forward_.run(*cache_, batch_, logits_);
        have_.insert(have_.end(), feed.begin(), feed.end());
        const auto best = size_t(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
        out.push_back(vocab_.empty() ? int32_t(best) : vocab_[best]);
        feed = std::span<const int32_t>(out).subspan(out.size() - 1);
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::cache_full) throw;
      // The draft's cache is full: propose what there is; the next call starts over.
      cache_->remove(0);
      have_.clear();
    }
    return out;
  }

 private:
  // The derived weights with an output matrix of its own: the static rows, then
  // kContextRows rows for the context's tokens (row 0 until filled).
  model::Weights with_context_rows(const SelfDraftWeights& w, backend::Backend& be) {
    model::Weights out = w.weights;
    if (w.vocab.empty()) return out;
    const Tensor& src = w.weights.output;
    const size_t row_bytes = quant::row_bytes(src.type, src.cols);
    const int64_t rows = src.rows + kContextRows;
    output_buffer_ = be.allocate(row_bytes * size_t(rows));
    output_ = backend::make_tensor(*output_buffer_, 0, src.type, rows, src.cols);
    std::copy_n(src.row_ptr(0), row_bytes * size_t(src.rows), output_.row_ptr(0));
    for (int64_t r = src.rows; r < rows; ++r) std::copy_n(src.row_ptr(0), row_bytes, output_.row_ptr(r));
    vocab_ = w.vocab;
    vocab_.resize(size_t(rows), w.vocab[0]);
    n_rows_ = src.rows;
    in_vocab_.assign(size_t(w.full_output.rows), 0);
    for (const int32_t id : w.vocab) in_vocab_[size_t(id)] = 1;
    out.output = output_;
    return out;
  }

  // Gives the context's tokens that the draft vocabulary lacks rows of their own,
  // while there is room; tokens seen before are skipped (scanned_ counts them).
  void add_context_rows(std::span<const int32_t> context) {
    if (vocab_.empty()) return;
    if (scanned_ > context.size()) scanned_ = 0;  // another context: rescan (adding only missing rows)
    const Tensor& full = w_->full_output;
    const size_t row_bytes = quant::row_bytes(full.type, full.cols);
    for (; scanned_ < context.size() && n_rows_ < output_.rows; ++scanned_) {
      const int32_t id = context[scanned_];
      if (id < 0 || id >= full.rows || in_vocab_[size_t(id)]) continue;
      in_vocab_[size_t(id)] = 1;
      std::copy_n(full.row_ptr(id), row_bytes, output_.row_ptr(n_rows_));
      vocab_[size_t(n_rows_++)] = id;
    }
  }

  std::shared_ptr<const SelfDraftWeights> w_;
  Executor& ex_;
  std::shared_ptr<backend::Buffer> output_buffer_;  // the output matrix below (reduced vocabulary only)
  Tensor output_;                                    // [static rows + kContextRows, n_embd]
  std::vector<int32_t> vocab_;                       // draft logit index -> token id (empty: whole vocabulary)
  std::vector<uint8_t> in_vocab_;                    // [n_vocab]: 1 when the token has a row
  int64_t n_rows_ = 0;                               // rows filled (static + context)
  size_t scanned_ = 0;                               // context tokens already considered
  model::Weights weights_;                           // the draft's weights, output replaced
  model::Forward forward_;
  std::unique_ptr<kv::KVCache> cache_;
  std::vector<int32_t> have_;  // tokens in the draft's cache
  std::vector<model::BatchToken> batch_;
  std::vector<float> logits_;
};

}  // namespace

std::shared_ptr<const SelfDraftWeights> derive_self_draft(const Model::Impl& m, const SpeculativeOptions& o) {
  const model::LoadedModel& base = *m.loaded;
  const int n_layer = base.hparams.n_layer;
  for (size_t i = 0; i < o.self_layers.size(); ++i) {
    require(o.self_layers[i] >= 0 && o.self_layers[i] < n_layer,
            "SpeculativeOptions::self_layers[{}] = {} is not a layer of this model (0 to {})", i, o.self_layers[i],
            n_layer - 1);
    require(i == 0 || o.self_layers[i] > o.self_layers[i - 1],
            "SpeculativeOptions::self_layers must ascend without repeats (at index {})", i);
  }
  require(o.self_vocab == 0 || (o.self_vocab >= 256 && o.self_vocab <= base.hparams.n_vocab),
          "SpeculativeOptions::self_vocab must be 0 or in [256, {}], got {}", base.hparams.n_vocab, o.self_vocab);
  require(!o.self_layers.empty() || o.self_vocab > 0 || o.self_lowbit,
          "SpeculativeOptions: a self draft needs self_layers, self_vocab or self_lowbit (else it is the model itself)");

  std::string key = std::to_string(o.self_vocab) + (o.self_lowbit ? "/q4" : "/") + ":";
  for (const int32_t l : o.self_layers) key += std::to_string(l) + ",";
  std::lock_guard lock(m.self_draft_mutex);
  if (auto it = m.self_drafts.find(key); it != m.self_drafts.end()) return it->second;

  auto d = std::make_shared<SelfDraftWeights>();
  backend::Backend& be = m.executor().backend();
  d->hparams = base.hparams;
  d->weights = base.weights;
  if (!o.self_layers.empty()) {
    d->hparams.layers.clear();
    d->weights.layers.clear();
    for (const int32_t l : o.self_layers) {
      d->hparams.layers.push_back(base.hparams.layers[size_t(l)]);
      d->weights.layers.push_back(base.weights.layers[size_t(l)]);
    }
    d->hparams.n_layer = int(o.self_layers.size());
  }
  if (o.self_vocab > 0) d->vocab = frequent_tokens(m.require_tokenizer(), o.self_vocab);
  // Rows are read and copied here: the file's layout, not a backend's repacked one.
  d->full_output = base.weights.plain(base.weights.output);
  // The output matrix keeps its type (as llama-quantize keeps it wider): its error
  // moves every logit, and self_vocab is what makes it cheap.
  if (!d->vocab.empty()) d->weights.output = derive_matrix(d->full_output, d->vocab, false, be, d->buffers);
  if (o.self_lowbit) {
    for (model::LayerWeights& L : d->weights.layers)
      for (Tensor* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
        if (!t->empty()) {  // MoE layers have no dense FFN
          Tensor derived = derive_matrix(base.weights.plain(*t), {}, true, be, d->buffers);
          if (derived.buffer == base.weights.plain(*t).buffer) continue;  // kept: the model's (maybe repacked) view
          // The new Q4_0 matrix in the backend's own layout, as Model::load does.
          if (auto packed = be.prepare_weight(derived)) d->buffers.push_back(std::move(packed));
          *t = derived;
        }
  }
  m.logger.info("speculative: self draft of {} layers, {} output rows{}", d->hparams.n_layer, d->weights.output.rows,
                o.self_lowbit ? ", Q4_0 matrices" : "");
  m.self_drafts.emplace(key, d);
  return d;
}

std::unique_ptr<DraftSource> make_self_source(const Model::Impl& m, const SpeculativeOptions& o, int32_t context) {
  return std::make_unique<SelfSource>(derive_self_draft(m, o), m.executor(), context);
}

}  // namespace ember::runtime
