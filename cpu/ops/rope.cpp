#include <algorithm>
#include <cmath>
#include <vector>
#include <utility>

#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

bool same_params(const backend::RopeParams& a, const backend::RopeParams& b) {
  return a.n_rot == b.n_rot && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale && a.mscale == b.mscale &&
         a.freq_factors.buffer == b.freq_factors.buffer && a.freq_factors.offset == b.freq_factors.offset;
}

// Finds or computes the cos/sin table for these positions. The angles are formed as
// llama.cpp's CPU backend forms them, so that the results agree bit for bit: in
// float, theta_0 = pos and theta_{i+1} = theta_i * powf(base, -2/n_rot) (one
// rounding per step, so the angle of a high pair carries up to ~n_rot/2 roundings,
// ~1e-6 relative), then cosf/sinf of freq_scale * (theta_i / factor_i), times mscale.
const RopeTable& table_for(OpContext& ctx, const Tensor& positions, const backend::RopeParams& p) {
  const int32_t* pos = positions.row_ptr<int32_t>(0);
  const auto n_tok = size_t(positions.rows);
  for (int i = 0; i < 2; ++i) {
    RopeTable& t = ctx.rope_tables[i];
    if (same_params(t.params, p) && t.positions.size() == n_tok &&
        std::equal(t.positions.begin(), t.positions.end(), pos)) {
      if (i == 1) std::swap(ctx.rope_tables[0], ctx.rope_tables[1]);
      return ctx.rope_tables[0];
    }
  }
  std::swap(ctx.rope_tables[0], ctx.rope_tables[1]);
  RopeTable& t = ctx.rope_tables[0];
  t.params = p;
  t.positions.assign(pos, pos + n_tok);
  const int half = p.n_rot / 2;
  t.cos_sin.resize(n_tok * size_t(half) * 2);
  const float theta_scale = std::pow(p.freq_base, -2.0f / float(p.n_rot));
  const float* factors = p.freq_factors.empty() ? nullptr : p.freq_factors.row_ptr<float>(0);
  for (size_t k = 0; k < n_tok; ++k) {
    float* row = t.cos_sin.data() + k * size_t(half) * 2;
    float theta = float(pos[k]);
    for (int i = 0; i < half; ++i) {
      const float angle = p.freq_scale * (factors ? theta / factors[i] : theta);
      row[2 * i] = std::cos(angle) * p.mscale;
      row[2 * i + 1] = std::sin(angle) * p.mscale;
      theta *= theta_scale;
    }
  }
  return t;
}

}  // namespace

void rope(OpContext& ctx, const Tensor& x, const Tensor& positions, const backend::RopeParams& p,
          const Tensor& out) {
  const RopeTable& table = table_for(ctx, positions, p);
  // One FMA per output with the other product rounded first, as llama.cpp's compiled code.
  const OpKernels& kernels = op_kernels(ctx.isa);
  const auto rotate = p.mode == backend::RopeMode::neox ? kernels.rotate_neox : kernels.rotate_normal;
  const int half = p.n_rot / 2;
  auto rows = [&](int64_t begin, int64_t end) {
    // Each head is copied first so the rotation reads and writes distinct memory
    // (x and out usually alias), which lets the compiler vectorize it.
    std::vector<float> head(size_t(p.n_rot));
    for (int64_t t = begin; t < end; ++t) {
      const float* cs = table.cos_sin.data() + size_t(t) * size_t(half) * 2;
      for (int h = 0; h < p.n_head; ++h) {
        const float* src = x.row_ptr<float>(t) + int64_t(h) * p.head_dim;
        float* dst = out.row_ptr<float>(t) + int64_t(h) * p.head_dim;
        std::copy(src, src + p.n_rot, head.begin());
        rotate(head.data(), dst, cs, half);
        if (dst != src)
          for (int d = p.n_rot; d < p.head_dim; ++d) dst[d] = src[d];
      }
    }
  };
  if (x.rows * x.cols < (1 << 14)) {
    rows(0, x.rows);
  } else {
    ctx.pool.parallel_for(x.rows, rows);
  }
}

}  // namespace ember::cpu
