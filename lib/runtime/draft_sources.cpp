// Draft sources: a separate draft model (greedy drafts on a sequence of its own)
// and prompt lookup; the checks of SpeculativeOptions.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/fail.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/self_draft.hpp"
#include "runtime/speculative.hpp"

namespace ember::runtime {
namespace {

class LookupSource final : public DraftSource {
 public:
  explicit LookupSource(const SpeculativeOptions& o) : max_(o.lookup_max_ngram), min_(o.lookup_min_ngram) {}
  std::vector<int32_t> draft(std::span<const int32_t> context, int32_t k) override {
    return lookup_draft(context, k, max_, min_);
  }
  bool free() const override { return true; }

 private:
  int32_t max_, min_;
};

// Greedy drafts from a second model. Its sequence follows the target's context:
// each draft() keeps the common prefix, evaluates what is new, then extends it
// one argmax token at a time (the last draft is never evaluated: nothing reads it).
class ModelSource final : public DraftSource {
 public:
  ModelSource(std::shared_ptr<const Model> draft, const SpeculativeOptions& o, int32_t context)
      : seq_(std::move(draft), KVCacheOptions{.max_tokens = context}, 512), p_min_(o.draft_p_min) {}

  std::vector<int32_t> draft(std::span<const int32_t> context, int32_t k) override {
    const auto& have = seq_.tokens();
    size_t common = 0;
    const size_t limit = std::min(seq_.n_evaluated(), context.size());
    while (common < limit && have[common] == context[common]) ++common;
    seq_.rewind(common);
    std::vector<int32_t> out;
    const auto start = std::chrono::steady_clock::now();
    if (context.size() > common + 1) {  // catch up with the context, then draft from its last token
      seq_.append(context.subspan(common, context.size() - common - 1));
      if (seq_.evaluate_pending(nullptr, 0, nullptr) != StepStatus::ok) return out;  // the draft's context is full
    }
    catch_up_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seq_.append(context.last(context.size() > common ? 1 : 0));
    while (int32_t(out.size()) < k) {
      if (seq_.evaluate_pending(nullptr, 0, nullptr) != StepStatus::ok) break;  // the draft's context is full
      const std::span<const float> logits = seq_.logits();
      const auto best = size_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (p_min_ > 0.0f && probability(logits, best) < p_min_) break;
      out.push_back(int32_t(best));
      if (int32_t(out.size()) < k) {
        const int32_t one[1] = {int32_t(best)};
        seq_.append(one);
      }
    }
    return out;
  }

 private:
  static double probability(std::span<const float> logits, size_t token) {
    const float top = logits[token];
    double sum = 0.0;
    for (const float l : logits) sum += std::exp(double(l - top));
    return 1.0 / sum;
  }

  Sequence seq_;
  float p_min_;
};

void check_vocabulary(const Model& target, const Model& draft) {
  const ModelInfo& t = target.info();
  const ModelInfo& d = draft.info();
  if (t.n_vocab != d.n_vocab)
    fail(ErrorCode::invalid_argument,
         "SpeculativeOptions::draft_model: its vocabulary has {} tokens, the target's {}; they must be identical",
         d.n_vocab, t.n_vocab);
  for (int32_t id = 0; id < int32_t(t.n_vocab); ++id) {
    if (target.token_text(id) != draft.token_text(id))
      fail(ErrorCode::invalid_argument,
           "SpeculativeOptions::draft_model: token {} differs between the vocabularies ('{}' in the target, '{}' in "
           "the draft); they must be identical",
           id, target.token_text(id), draft.token_text(id));
  }
}

}  // namespace

std::unique_ptr<DraftSource> make_draft_source(const SpeculativeOptions& o, const Model& target, int64_t context) {
  require(o.draft_max >= 1 && o.draft_max <= 16, "SpeculativeOptions::draft_max must be in [1, 16], got {}",
          o.draft_max);
  require(o.draft_min >= 1 && o.draft_min <= o.draft_max,
          "SpeculativeOptions::draft_min must be in [1, draft_max = {}], got {}", o.draft_max, o.draft_min);
  require(o.draft_p_min >= 0.0f && o.draft_p_min <= 1.0f, "SpeculativeOptions::draft_p_min must be in [0, 1], got {}",
          o.draft_p_min);
  require(o.min_acceptance >= 0.0f && o.min_acceptance <= 1.0f,
          "SpeculativeOptions::min_acceptance must be in [0, 1], got {}", o.min_acceptance);
  require(o.probe_interval >= 1, "SpeculativeOptions::probe_interval must be >= 1, got {}", o.probe_interval);
  switch (o.kind) {
    case DraftKind::none: return nullptr;
    case DraftKind::self: {
      if (!target.impl().loaded)
        fail(ErrorCode::invalid_argument, "speculative: a vocab_only model cannot draft for itself");
      const int64_t n = std::min<int64_t>({context, target.info().n_ctx_train, int64_t(1) << 16});
      return make_self_source(target.impl(), o, int32_t(std::max<int64_t>(n, 1)));
    }
    case DraftKind::lookup:
      require(o.lookup_min_ngram >= 1 && o.lookup_max_ngram <= 16 && o.lookup_min_ngram <= o.lookup_max_ngram,
              "SpeculativeOptions: lookup n-grams must satisfy 1 <= lookup_min_ngram <= lookup_max_ngram <= 16, got "
              "{} and {}",
              o.lookup_min_ngram, o.lookup_max_ngram);
      return std::make_unique<LookupSource>(o);
    case DraftKind::model: {
      if (!o.draft_model) fail(ErrorCode::invalid_argument, "SpeculativeOptions::draft_model is empty (kind model)");
      if (o.draft_model->info().n_layer == 0)
        fail(ErrorCode::invalid_argument, "SpeculativeOptions::draft_model was loaded vocab_only: it cannot draft");
      check_vocabulary(target, *o.draft_model);
      if (o.draft_model->info().weight_bytes > target.info().weight_bytes)
        target.impl().logger.warning(
            "speculative: the draft model holds more weight bytes ({}) than the target ({}); drafting will cost "
            "more than it saves",
            o.draft_model->info().weight_bytes, target.info().weight_bytes);
      // The draft follows the target's whole context (up to 64k tokens).
      const int64_t context =
          std::min<int64_t>({target.info().n_ctx_train, o.draft_model->info().n_ctx_train, int64_t(1) << 16});
      return std::make_unique<ModelSource>(o.draft_model, o, int32_t(std::max<int64_t>(context, 1)));
    }
  }
  fail(ErrorCode::invalid_argument, "SpeculativeOptions::kind has an unknown value {}", int(o.kind));
}

}  // namespace ember::runtime
