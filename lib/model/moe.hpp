// The mixture-of-experts feed-forward block (Shazeer et al. 2017; as Qwen3-MoE uses
// it): per token, a router matrix scores the n_expert experts, a softmax turns the
// scores into probabilities, the n_expert_used most probable experts run their gated
// FFN (SiLU) on the token, and their outputs are added weighted by the probabilities
// renormalised over the chosen experts.
//
// The routing is decided on the host (the router logits are n_tokens x n_expert
// floats); each expert then runs once on the rows of the tokens that chose it, with
// the same ops as a dense FFN. Arithmetic as llama.cpp's build_moe_ffn: softmax in
// float with a double sum, weights divided by their float sum, each expert output
// multiplied by its weight, the products added in the order of the ranking.
#pragma once

#include <vector>

#include "backend/backend.hpp"
#include "model/hparams.hpp"
#include "model/weights.hpp"

namespace ember::model {

// Backend scratch of the block for up to `capacity` tokens (slices of the forward
// pass's workspace) and host buffers reused across calls.
struct MoeScratch {
  backend::Tensor router;      // f32 [capacity, n_expert]
  backend::Tensor rows;        // i32 [capacity, 1]: the tokens routed to one expert
  backend::Tensor in;          // f32 [capacity, n_embd]: their normalised inputs
  backend::Tensor gate, up;    // f32 [capacity, n_ff_exp]
  backend::Tensor down;        // f32 [capacity, n_embd]
  std::vector<float> host_router, host_down, host_out;
  std::vector<int32_t> host_rows, chosen;   // chosen[t * k + i]: token t's i-th expert
  std::vector<float> weights;               // weights[t * k + i]: its renormalised probability
  std::vector<int64_t> expert_start, cursor, slot_order;  // the slots grouped by expert
};

// out[t] = sum over the experts chosen by token t of weight * FFN_expert(x[t]), for the
// x.rows tokens of x ([n, n_embd]); out may alias x.
void moe_ffn(backend::Backend& be, const HParams& hp, const LayerWeights& layer, const backend::Tensor& x,
             MoeScratch& scratch, const backend::Tensor& out);

}  // namespace ember::model
