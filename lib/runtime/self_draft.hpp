// A model's own, cheaper draft (DraftKind::self): derived weights, kept by the model.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "ember/model.hpp"
#include "ember/speculative.hpp"
#include "model/hparams.hpp"
#include "model/weights.hpp"
#include "runtime/speculative.hpp"

namespace ember::runtime {

struct SelfDraftWeights {
  model::HParams hparams;   // the kept layers
  model::Weights weights;   // views of the model's tensors, or derived copies
  std::vector<int32_t> vocab;  // draft logit index -> token id (empty: the whole vocabulary)
  backend::Tensor full_output;  // the model's own output matrix, where context tokens' rows come from
  std::vector<std::shared_ptr<backend::Buffer>> buffers;  // the derived copies
};

// The derived weights for `o` (made once per model and option set). Throws
// invalid_argument for bad self_* options.
std::shared_ptr<const SelfDraftWeights> derive_self_draft(const Model::Impl& m, const SpeculativeOptions& o);

// A draft source over them with a KV cache of `context` tokens.
std::unique_ptr<DraftSource> make_self_source(const Model::Impl& m, const SpeculativeOptions& o, int32_t context);

}  // namespace ember::runtime
