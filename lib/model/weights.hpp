// The weights of a model, placed on a backend in their file format.
//
// GGUF names and shapes follow llama.cpp's conventions ("blk.N.attn_q.weight",
// GGUF shape [n_in, n_out], which is a row-major [n_out, n_in] matrix).
// Matrices stay in their file format (a Q4_K tensor is multiplied as Q4_K);
// small vectors (norms, biases) are converted to F32 at load when needed.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "gguf/gguf.hpp"
#include "model/hparams.hpp"

namespace ember::model {

using backend::Tensor;

struct LayerWeights {
  Tensor attn_norm;        // [1, n_embd]; empty when the family has no pre-norms (olmo2)
  Tensor wq, wk, wv;       // [n_head * hd, n_embd], [n_head_kv * hd, n_embd] x2 (row ranges of
                           // the fused attn_qkv for phi3)
  Tensor bq, bk, bv;       // optional biases [1, rows of the matrix] (qwen2)
  Tensor q_norm, k_norm;   // optional per-head norms [1, hd] (qwen3, gemma3), or whole-row norms
                           // [1, n_head * hd] and [1, n_head_kv * hd] (olmo2)
  Tensor wo;               // [n_embd, n_head * hd]
  Tensor bo;               // optional [1, n_embd]
  Tensor attn_post_norm;   // optional [1, n_embd] (gemma3)
  Tensor ffn_norm;         // [1, n_embd]; empty without pre-norms
  Tensor w_gate, w_up;     // [n_ff, n_embd] (phi3: the two row halves of ffn_up)
  Tensor w_down;           // [n_embd, n_ff]
  Tensor ffn_post_norm;    // optional [1, n_embd] (gemma3)
  // Mixture of experts (qwen3moe) instead of w_gate/w_up/w_down: the router and the
  // experts' matrices stacked, expert e owning rows [e * n, (e + 1) * n).
  Tensor ffn_gate_inp;     // [n_expert, n_embd]
  Tensor exp_gate, exp_up; // [n_expert * n_ff_exp, n_embd]
  Tensor exp_down;         // [n_expert * n_embd, n_ff_exp]
};

struct Weights {
  Tensor token_embd;       // [n_vocab, n_embd]
  Tensor output_norm;      // [1, n_embd]
  Tensor output;           // [n_vocab, n_embd]; token_embd when the file ties them
  Tensor rope_long, rope_short;  // optional LongRoPE factors [1, n_rot / 2] (phi3)
  std::vector<LayerWeights> layers;
  size_t bytes = 0;        // total size of the weights on the backend

  // Places every tensor of `file` the model needs on `backend`. The mapped file
  // is kept alive by `keep_alive` for as long as any backend buffer refers to it.
  // Throws malformed_file naming a missing or mis-shaped tensor, unsupported for
  // a tensor type ember cannot multiply.
  static Weights load(const gguf::File& file, const HParams& hp, backend::Backend& backend,
                      std::shared_ptr<const void> keep_alive);

  // Every tensor field above (empty ones included), for code that swaps a weight in
  // place (lib/quantize/sensitivity.cpp); a Forward built on these weights sees the swap.
  std::vector<Tensor*> slots();

  // Lets `backend` rewrite the matrices that only matmul reads (every layer's
  // projections and an untied output matrix; not the embeddings, which get_rows reads,
  // nor experts) into its own layout (Backend::prepare_weight). Fused matrices (qkv,
  // gate+up) are prepared whole when every slice keeps whole groups of rows. A matrix
  // the backend has no memory for stays as it is. Call once, before any Forward.
  void prepare_for_matmul(backend::Backend& backend);
  // `t` in the file's own layout: `t`, or for a matrix prepare_for_matmul rewrote (or
  // a row slice of one) the view of the file's bytes it was made from. For code that
  // reads weight rows itself (speculative drafts derived from the model).
  Tensor plain(const Tensor& t) const;

 private:
  std::vector<std::shared_ptr<backend::Buffer>> buffers_;
  struct Prepared {
    Tensor prepared, original;  // whole matrices
  };
  std::vector<Prepared> prepared_;
};

}  // namespace ember::model
