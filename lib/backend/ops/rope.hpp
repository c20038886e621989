// rope: rotary position embedding (Su et al. 2021, "RoFormer").
//
//   x:         [n_tok, n_head * head_dim] f32
//   positions: [n_tok, 1] i32
//   out:       like x, may alias x
// For each head, the first n_rot dims rotate in pairs by angle
// theta_i = pos * freq_scale * freq_base^(-2i / n_rot) / freq_factors[i], i in [0, n_rot/2)
// (freq_factors: LongRoPE, Ding et al. 2024; all 1 when empty), with cos and sin
// multiplied by mscale:
//   normal mode pairs (2i, 2i+1) (llama); neox mode pairs (i, i + n_rot/2) (qwen2, qwen3, gemma3).
// Dims from n_rot to head_dim pass through. Angles are computed in double in the reference.
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void rope(backend::Backend& be, const backend::Tensor& x, const backend::Tensor& positions,
                 const backend::RopeParams& params, const backend::Tensor& out) {
  using namespace detail;
  expect_type("rope", "x", x, DType::f32);
  expect_type("rope", "out", out, DType::f32);
  expect_type("rope", "positions", positions, DType::i32);
  expect_shape("rope", "positions", positions, x.rows, 1);
  expect_shape("rope", "out", out, x.rows, x.cols);
  if (params.n_head <= 0 || params.head_dim <= 0 || int64_t(params.n_head) * params.head_dim != x.cols)
    fail(ErrorCode::invalid_argument, "rope: {} heads of {} do not make a row of {}", params.n_head,
         params.head_dim, x.cols);
  if (params.n_rot <= 0 || params.n_rot > params.head_dim || params.n_rot % 2 != 0)
    fail(ErrorCode::invalid_argument, "rope: n_rot {} must be even and within head_dim {}", params.n_rot,
         params.head_dim);
  if (!params.freq_factors.empty()) {
    expect_type("rope", "freq_factors", params.freq_factors, DType::f32);
    expect_shape("rope", "freq_factors", params.freq_factors, 1, params.n_rot / 2);
  }
  be.rope(x, positions, params, out);
}

}  // namespace ember::ops
