#include "model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/ops/get_rows.hpp"
#include "backend/ops/glu.hpp"
#include "backend/ops/matmul.hpp"

namespace ember::model {

void moe_ffn(backend::Backend& be, const HParams& hp, const LayerWeights& L, const backend::Tensor& x,
             MoeScratch& s, const backend::Tensor& out) {
  const int64_t n = x.rows, n_embd = hp.n_embd, n_ff = hp.n_ff_exp;
  const int n_expert = hp.n_expert, k = hp.n_expert_used;

  // ---- routing, on the host ----
  const backend::Tensor router = s.router.slice_rows(0, n);
  ops::matmul(be, L.ffn_gate_inp, x, router);
  s.host_router.resize(size_t(n * n_expert));
  be.download(router, s.host_router.data());
  s.chosen.assign(size_t(n * k), 0);
  s.weights.assign(size_t(n * k), 0.0f);
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n; ++t) {
    float* p = s.host_router.data() + t * n_expert;
    // Softmax as ggml's: max-subtracted expf, sum in double, then times (float)(1/sum).
    const float max = *std::max_element(p, p + n_expert);
    double sum = 0.0;
    for (int e = 0; e < n_expert; ++e) sum += double(p[e] = std::exp(p[e] - max));
    const auto inv = float(1.0 / sum);
    for (int e = 0; e < n_expert; ++e) p[e] *= inv;
    // The k most probable experts, most probable first (ties: lower index first).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen_sum = 0.0;
    for (int i = 0; i < k; ++i) chosen_sum += double(p[order[size_t(i)]]);
    const auto total = float(chosen_sum);
    for (int i = 0; i < k; ++i) {
      s.chosen[size_t(t * k + i)] = order[size_t(i)];
      s.weights[size_t(t * k + i)] = hp.expert_weights_norm ? p[order[size_t(i)]] / total : p[order[size_t(i)]];
    }
  }

  // ---- each expert on the tokens that chose it ----
  // The routed slots (t * k + i) grouped by expert in one counting pass, tokens in
  // order within an expert: slot_order[expert_start[e] .. expert_start[e + 1]).
  s.expert_start.assign(size_t(n_expert) + 1, 0);
  for (const int32_t e : s.chosen) ++s.expert_start[size_t(e) + 1];
  for (int e = 0; e < n_expert; ++e) s.expert_start[size_t(e) + 1] += s.expert_start[size_t(e)];
  s.slot_order.resize(size_t(n * k));
  s.cursor.assign(s.expert_start.begin(), s.expert_start.end() - 1);
  for (int64_t slot = 0; slot < n * k; ++slot) s.slot_order[size_t(s.cursor[size_t(s.chosen[size_t(slot)])]++)] = slot;

  // host_down[(t * k + i) * n_embd ...]: token t's output of its i-th expert, weighted;
  // every slot is written by its expert below.
  s.host_down.resize(size_t(n * k * n_embd));
  for (int e = 0; e < n_expert; ++e) {
    const int64_t first = s.expert_start[size_t(e)], m = s.expert_start[size_t(e) + 1] - first;
    if (m == 0) continue;   // no token chose it: its weights are not read
    const int64_t* slots = s.slot_order.data() + first;
    s.host_rows.resize(size_t(m));
    for (int64_t r = 0; r < m; ++r) s.host_rows[size_t(r)] = int32_t(slots[r] / k);
    const backend::Tensor rows = s.rows.slice_rows(0, m), in = s.in.slice_rows(0, m);
    const backend::Tensor gate = s.gate.slice_rows(0, m), up = s.up.slice_rows(0, m);
    const backend::Tensor down = s.down.slice_rows(0, m);
    be.upload(rows, s.host_rows.data());
    ops::get_rows(be, x, rows, in);
    ops::matmul(be, L.exp_gate.slice_rows(e * n_ff, n_ff), in, gate);
    ops::matmul(be, L.exp_up.slice_rows(e * n_ff, n_ff), in, up);
    ops::glu(be, gate, up, backend::Activation::silu, gate);
    ops::matmul(be, L.exp_down.slice_rows(e * n_embd, n_embd), gate, down);
    s.host_out.resize(size_t(m * n_embd));
    be.download(down, s.host_out.data());
    for (int64_t r = 0; r < m; ++r) {
      const float w = s.weights[size_t(slots[r])];
      const float* src = s.host_out.data() + r * n_embd;
      float* dst = s.host_down.data() + slots[r] * n_embd;
      for (int64_t c = 0; c < n_embd; ++c) dst[c] = src[c] * w;
    }
  }

  // ---- sum over the chosen experts, in ranking order ----
  s.host_out.assign(size_t(n * n_embd), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float* dst = s.host_out.data() + t * n_embd;
    const float* first = s.host_down.data() + t * k * n_embd;
    std::copy(first, first + n_embd, dst);
    for (int i = 1; i < k; ++i) {
      const float* src = first + i * n_embd;
      for (int64_t c = 0; c < n_embd; ++c) dst[c] += src[c];
    }
  }
  be.upload(out, s.host_out.data());
}

}  // namespace ember::model
