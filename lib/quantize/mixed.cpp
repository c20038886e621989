// Mixed precision by sensitivity (mixed.hpp).
#include "quantize/mixed.hpp"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <mutex>
#include <optional>
#include <queue>

#include "common/fail.hpp"
#include "quant/quant.hpp"
#include "quantize/output_error.hpp"

namespace ember::quantize {

using quant::DType;

std::vector<DType> mix_ladder(DType base) {
  switch (base) {
    case DType::q4_k: case DType::q5_k: case DType::q6_k:
      return {DType::q4_k, DType::q5_k, DType::q6_k, DType::q8_0};
    case DType::q4_g128: case DType::q4_g64:
      return {base, DType::q5_0, DType::q8_0};
    default:
      return {DType::q4_0, DType::q5_0, DType::q8_0};
  }
}

std::vector<size_t> mixable(const gguf::File& file, std::span<const TensorPlan> plans, DType base) {
  int64_t block = 1;
  for (DType t : mix_ladder(base)) block = std::max<int64_t>(block, quant::type_info(t).block_elems);
  std::vector<size_t> out;
  for (size_t i = 0; i < plans.size(); ++i) {
    const gguf::TensorInfo& t = file.tensors()[plans[i].index];
    if (plans[i].quantize && t.shape.size() == 2 && t.name.rfind("blk.", 0) == 0 && t.cols() % block == 0)
      out.push_back(i);
  }
  return out;
}

std::vector<MixChoice> mix_types(const gguf::File& file, std::span<TensorPlan> plans, const Calibration* calibration,
                                 DType base, const MixOptions& options,
                                 const std::function<void(int64_t done, int64_t total)>& on_tensor) {
  require(options.threads >= 1, "quantize: threads is {}, must be at least 1", options.threads);
  const std::vector<DType> ladder = mix_ladder(base);
  const std::vector<size_t> mixed = mixable(file, plans, base);
  uint64_t fixed = 0;
  for (size_t i = 0, k = 0; i < plans.size(); ++i) {
    if (k < mixed.size() && mixed[k] == i) {
      ++k;
      continue;
    }
    const gguf::TensorInfo& t = file.tensors()[plans[i].index];
    fixed += plans[i].quantize ? quant::row_bytes(plans[i].type, t.cols()) * uint64_t(t.rows()) : t.n_bytes;
  }
  require(!mixed.empty(), "quantize: no tensor of this model can take a mixture of {} and wider types",
          quant::type_name(ladder[0]));

  // D and bytes of every (tensor, ladder type).
  const size_t n_types = ladder.size();
  std::vector<double> d(mixed.size() * n_types);
  std::vector<uint64_t> bytes(mixed.size() * n_types);
  std::atomic<int64_t> done{0};
  const int n_threads = int(std::min<size_t>(size_t(options.threads), mixed.size()));
  std::mutex progress;
  run_parallel(n_threads, [&](int th) {
    std::vector<float> w;
    for (size_t k = size_t(th); k < mixed.size(); k += size_t(n_threads)) {
      const gguf::TensorInfo& t = file.tensors()[plans[mixed[k]].index];
      const int64_t rows = t.rows(), cols = t.cols();
      w.resize(size_t(rows * cols));
      const size_t row = quant::row_bytes(t.type, cols);
      for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + size_t(r) * row, w.data() + r * cols, cols);
      const Hessian* h = nullptr;
      if (calibration)
        if (const auto it = calibration->hessians.find(std::string(t.name));
            it != calibration->hessians.end() && it->second->cols == cols)
          h = it->second.get();
      const OutputError measure(h, cols);
      const std::vector<int64_t> sample = sample_rows(rows, options.search_rows);
      AwqMatrix m{.weights = w.data(), .rows = rows, .cols = cols, .type = ladder[0], .row_scale = nullptr};
      const double energy = std::max(measure.energy(m, sample), 1e-30);
      for (size_t j = 0; j < n_types; ++j) {
        m.type = ladder[j];
        d[k * n_types + j] = measure.error(m, {}, sample) / energy;
        bytes[k * n_types + j] = quant::row_bytes(ladder[j], cols) * uint64_t(rows);
      }
      if (options.measured) {
        const auto it = options.measured->find(plans[mixed[k]].index);
        if (it == options.measured->end())
          fail(ErrorCode::invalid_argument, "quantize: no measured sensitivity for tensor '{}'", t.name);
        const double proxy_first = d[k * n_types];
        for (size_t j = 0; j < n_types; ++j)
          d[k * n_types + j] = proxy_first > 0 ? it->second * d[k * n_types + j] / proxy_first : 0.0;
      }
      const int64_t n = ++done;
      if (on_tensor) {
        const std::lock_guard lock(progress);
        on_tensor(n, int64_t(mixed.size()));
      }
    }
  });

  uint64_t used = fixed;
  for (size_t k = 0; k < mixed.size(); ++k) used += bytes[k * n_types];
  if (used > options.budget_bytes)
    fail(ErrorCode::invalid_argument,
         "quantize: a budget of {} bytes is below the smallest mixture ({} bytes: every projection in {}, the rest as "
         "the recipe has it)",
         options.budget_bytes, used, quant::type_name(ladder[0]));

  // Greedy by the drop of D per extra byte; each tensor offers its best next step.
  std::vector<size_t> level(mixed.size(), 0);
  struct Step {
    double ratio;
    size_t k, to;
    bool operator<(const Step& o) const { return ratio < o.ratio || (ratio == o.ratio && k > o.k); }
  };
  const auto best_step = [&](size_t k, uint64_t room) -> std::optional<Step> {
    std::optional<Step> best;
    for (size_t j = level[k] + 1; j < n_types; ++j) {
      const double gain = d[k * n_types + level[k]] - d[k * n_types + j];
      const uint64_t extra = bytes[k * n_types + j] - bytes[k * n_types + level[k]];
      if (gain <= 0 || extra == 0 || extra > room) continue;
      if (!best || gain / double(extra) > best->ratio) best = Step{gain / double(extra), k, j};
    }
    return best;
  };
  std::priority_queue<Step> heap;
  for (size_t k = 0; k < mixed.size(); ++k)
    if (const auto s = best_step(k, options.budget_bytes - used)) heap.push(*s);
  while (!heap.empty()) {
    const Step s = heap.top();
    heap.pop();
    const uint64_t extra = bytes[s.k * n_types + s.to] - bytes[s.k * n_types + level[s.k]];
    if (used + extra <= options.budget_bytes) {
      used += extra;
      level[s.k] = s.to;
    }
    // The tensor's next step (or, when this one no longer fits, a smaller one that does).
    if (const auto next = best_step(s.k, options.budget_bytes - used)) heap.push(*next);
  }

  std::vector<MixChoice> out;
  for (size_t k = 0; k < mixed.size(); ++k) {
    plans[mixed[k]].type = ladder[level[k]];
    plans[mixed[k]].fallback = false;
    out.push_back({.plan = mixed[k], .sensitivity = d[k * n_types + level[k]], .first = d[k * n_types]});
  }
  return out;
}

}  // namespace ember::quantize
