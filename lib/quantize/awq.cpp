// AWQ scale search and the per-layer plan (awq.hpp).
#include "quantize/awq.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/fail.hpp"
#include "quant/quant.hpp"
#include "quantize/weight_quantizers.hpp"

namespace ember::quantize {
namespace {

using quant::DType;

// s_c = a_c^alpha / sqrt(max * min) with a_c the rms of channel c (dead channels lifted
// to a millionth of the largest, so that no scale is 0 or infinite).
std::vector<float> scales_for(const std::vector<double>& rms, double alpha) {
  const double top = *std::max_element(rms.begin(), rms.end());
  const double floor = top > 0 ? top * 1e-6 : 1.0;
  std::vector<double> s(rms.size());
  for (size_t c = 0; c < rms.size(); ++c) s[c] = std::pow(std::max(rms[c], floor), alpha);
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  const double norm = std::sqrt(*lo * *hi);
  std::vector<float> out(rms.size());
  for (size_t c = 0; c < rms.size(); ++c) out[c] = float(s[c] / norm);
  return out;
}

// SmoothQuant's s_c = a_c^alpha / w_c^(1 - alpha), divided by sqrt(max s * min s); dead
// channels (a_c or w_c below a millionth of the largest) lifted to that floor.
std::vector<float> smooth_scales(const std::vector<double>& a, const std::vector<double>& wmax, double alpha) {
  const size_t cols = a.size();
  const double wtop = *std::max_element(wmax.begin(), wmax.end());
  const double atop = *std::max_element(a.begin(), a.end());
  const double wfloor = wtop > 0 ? wtop * 1e-6 : 1.0, afloor = atop > 0 ? atop * 1e-6 : 1.0;
  std::vector<double> log_s(cols);
  for (size_t c = 0; c < cols; ++c)
    log_s[c] = alpha * std::log(std::max(a[c], afloor)) - (1.0 - alpha) * std::log(std::max(wmax[c], wfloor));
  const auto [lo, hi] = std::minmax_element(log_s.begin(), log_s.end());
  const double mid = 0.5 * (*lo + *hi);
  std::vector<float> scales(cols);
  for (size_t c = 0; c < cols; ++c) scales[c] = float(std::exp(log_s[c] - mid));
  return scales;
}

// Pools the statistic of the columns that share an id of `tie` (awq_choose_scales): the
// root mean square of their values (`rms`, each column's rms over the same inputs) or the
// largest. Empty `tie`: unchanged.
void tie_columns(std::span<const int64_t> tie, std::vector<double>& v, bool rms) {
  if (tie.empty()) return;
  std::vector<double> pooled(v.size(), 0.0);
  std::vector<int64_t> count(v.size(), 0);
  for (size_t c = 0; c < v.size(); ++c) {
    const size_t id = size_t(tie[c]);
    pooled[id] = rms ? pooled[id] + v[c] * v[c] : std::max(pooled[id], v[c]);
    ++count[id];
  }
  for (size_t c = 0; c < v.size(); ++c) {
    const size_t id = size_t(tie[c]);
    v[c] = rms ? std::sqrt(pooled[id] / double(count[id])) : pooled[id];
  }
}

// The W8A8 output error of a group for column scales s (AwqOptions::smooth_search): the
// kept input rows X and the searched weight rows W, the exact products X W^T computed
// once; per candidate, X / s and W * s go through the quantizers a reader uses.
class W8A8Error {
 public:
  using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  W8A8Error(std::span<const AwqMatrix> group, const std::vector<std::vector<int64_t>>& rows, const Hessian& h)
      : group_(group), rows_(rows), cols_(h.cols),
        x_(Eigen::Map<const RowMajorF>(h.kept.data(), h.n_kept, h.cols)) {
    for (size_t g = 0; g < group.size(); ++g) {
      const RowMajorF w = weights(g, {});
      exact_.push_back(x_.cast<double>() * w.cast<double>().transpose());
    }
  }

  double error(const std::vector<float>& s) const {
    double total = 0;
    for (size_t g = 0; g < group_.size(); ++g) {
      const RowMajorF w = quantized(weights(g, s), group_[g].type, true);
      RowMajorF x = x_;
      for (int64_t i = 0; i < x.rows(); ++i)
        for (int64_t c = 0; c < cols_; ++c) x(i, c) /= s[size_t(c)];
      const quant::DType act = quant::activation_type(group_[g].type);
      if (quant::type_info(act).block_elems > 1) x = quantized(std::move(x), act, false);
      const Eigen::MatrixXd y = x.cast<double>() * w.cast<double>().transpose();
      total += (y - exact_[g]).squaredNorm();
    }
    return total;
  }

 private:
  // The searched rows of matrix g, row scales applied, times s (empty: 1).
  RowMajorF weights(size_t g, std::span<const float> s) const {
    const AwqMatrix& m = group_[g];
    const std::vector<int64_t>& rows = rows_[g];
    RowMajorF w(int64_t(rows.size()), cols_);
    for (size_t i = 0; i < rows.size(); ++i) {
      const float rs = m.row_scale ? m.row_scale[rows[i]] : 1.0f;
      for (int64_t c = 0; c < cols_; ++c)
        w(int64_t(i), c) = rs * m.weights[rows[i] * cols_ + c] * (s.empty() ? 1.0f : s[size_t(c)]);
    }
    return w;
  }

  // Each row quantized to `type` (as a file's weights, or as the matmul's activations)
  // and dequantized.
  static RowMajorF quantized(RowMajorF v, quant::DType type, bool weight) {
    std::vector<std::byte> q(quant::row_bytes(type, v.cols()));
    for (int64_t i = 0; i < v.rows(); ++i) {
      float* row = v.data() + i * v.cols();
      if (weight)
        quantize_values(type, row, q.data(), v.cols());
      else
        quant::quantize_row(type, row, q.data(), v.cols());
      quant::dequantize_row(type, q.data(), row, v.cols());
    }
    return v;
  }

  std::span<const AwqMatrix> group_;
  const std::vector<std::vector<int64_t>>& rows_;
  int64_t cols_;
  RowMajorF x_;
  std::vector<Eigen::MatrixXd> exact_;
};

}  // namespace

bool awq_can_clip(DType type) {
  switch (type) {
    case DType::q4_0: case DType::q4_1: case DType::q5_0: case DType::q5_1: case DType::q8_0:
    case DType::q4_g128: case DType::q4_g64: return true;
    default: return false;
  }
}

ClipCount awq_quantize_row_clipped(DType type, const float* values, const float* scale, int64_t cols, const Hessian& h,
                                   void* dst) {
  require(awq_can_clip(type), "quantize: the AWQ clipping search does not apply to {}", quant::type_name(type));
  const quant::TypeInfo& info = quant::type_info(type);
  const int64_t width = info.block_elems;
  require(cols % width == 0 && h.cols == cols && int64_t(h.h.size()) == cols * cols,
          "quantize: a row of {} values does not fit {} blocks or the {}-wide Hessian", cols, quant::type_name(type), h.cols);
  constexpr int kSteps = 10;   // r = 1 - 0.05 k, k = 0 .. 10
  std::vector<float> scaled(static_cast<size_t>(width)), clipped(static_cast<size_t>(width)), back(static_cast<size_t>(width));
  std::vector<double> e(static_cast<size_t>(width));
  std::vector<std::byte> trial(info.block_bytes);
  auto* out = static_cast<std::byte*>(dst);
  ClipCount count;
  for (int64_t b0 = 0; b0 < cols; b0 += width) {
    std::byte* block = out + size_t(b0 / width) * info.block_bytes;
    float amax = 0.0f;
    for (int64_t i = 0; i < width; ++i) {
      scaled[size_t(i)] = values[b0 + i] * scale[b0 + i];
      amax = std::max(amax, std::fabs(scaled[size_t(i)]));
    }
    ++count.blocks;
    double best = std::numeric_limits<double>::infinity();
    int best_k = 0;
    for (int k = 0; k <= kSteps && (k == 0 || amax > 0.0f); ++k) {
      const float limit = amax * (1.0f - 0.05f * float(k));
      for (int64_t i = 0; i < width; ++i) clipped[size_t(i)] = std::clamp(scaled[size_t(i)], -limit, limit);
      quantize_values(type, clipped.data(), trial.data(), width);
      quant::dequantize_row(type, trial.data(), back.data(), width);
      for (int64_t i = 0; i < width; ++i)
        e[size_t(i)] = double(back[size_t(i)]) / double(scale[b0 + i]) - double(values[b0 + i]);
      double loss = 0;
      for (int64_t i = 0; i < width; ++i) {
        const double* row = h.h.data() + size_t((b0 + i) * cols + b0);
        double dot = 0;
        for (int64_t j = 0; j < width; ++j) dot += row[j] * e[size_t(j)];
        loss += e[size_t(i)] * dot;
      }
      if (loss < best) {
        best = loss;
        best_k = k;
        std::memcpy(block, trial.data(), trial.size());
      }
    }
    count.clipped += best_k > 0;
  }
  return count;
}

AwqChoice awq_choose_scales(std::span<const AwqMatrix> group, const Hessian& h, const AwqOptions& options,
                            std::span<const int64_t> tie) {
  require(options.grid >= 1 && options.grid <= 1000, "quantize: AWQ grid is {}, must be 1..1000", options.grid);
  require(options.search_rows >= 1, "quantize: AWQ search_rows is {}, must be at least 1", options.search_rows);
  require(options.threads >= 1, "quantize: threads is {}, must be at least 1", options.threads);
  require(!group.empty(), "quantize: an AWQ group needs at least one matrix");
  require(h.rows_seen > 0 && int64_t(h.h.size()) == h.cols * h.cols, "quantize: AWQ needs a calibrated Hessian");
  for (const AwqMatrix& m : group)
    require(m.weights && m.rows > 0 && m.cols == h.cols, "quantize: an AWQ matrix of {} x {} does not fit the {}-wide Hessian",
            m.rows, m.cols, h.cols);

  const int64_t cols = h.cols;
  std::vector<double> rms(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) rms[size_t(c)] = std::sqrt(std::max(0.0, h.h[size_t(c * cols + c)]) / double(h.rows_seen));
  require(tie.empty() || int64_t(tie.size()) == cols, "quantize: {} tied columns for a {}-wide group", tie.size(), cols);
  for (const int64_t id : tie) require(id >= 0 && id < cols, "quantize: tied column id {} outside [0, {})", id, cols);
  tie_columns(tie, rms, true);
  const OutputError loss_of(&h, cols);
  std::vector<std::vector<int64_t>> rows;
  for (const AwqMatrix& m : group) rows.push_back(sample_rows(m.rows, options.search_rows));

  if (options.smooth_alpha >= 0 || options.smooth_search) {
    require(options.smooth_search || options.smooth_alpha <= 1, "quantize: the SmoothQuant alpha is {}, must be in [0, 1]",
            options.smooth_alpha);
    std::vector<double> wmax(static_cast<size_t>(cols), 0.0);
    for (const AwqMatrix& m : group)
      for (int64_t r = 0; r < m.rows; ++r) {
        const double rs = m.row_scale ? std::fabs(double(m.row_scale[r])) : 1.0;
        for (int64_t c = 0; c < cols; ++c)
          wmax[size_t(c)] = std::max(wmax[size_t(c)], rs * std::fabs(double(m.weights[r * cols + c])));
      }
    tie_columns(tie, wmax, false);
    const std::vector<float> ones(size_t(cols), 1.0f);
    AwqChoice choice;
    if (!options.smooth_search) {
      choice.alpha = options.smooth_alpha;
      choice.scales = smooth_scales(rms, wmax, options.smooth_alpha);
      for (size_t g = 0; g < group.size(); ++g) {
        choice.loss += loss_of.error(group[g], choice.scales, rows[g]);
        choice.loss_rtn += loss_of.error(group[g], ones, rows[g]);
      }
      return choice;
    }
    require(h.n_kept > 0 && int64_t(h.kept.size()) == h.n_kept * cols && int64_t(h.abs_max.size()) == cols,
            "quantize: the SmoothQuant search needs the calibration's kept input rows");
    std::vector<double> amax(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) amax[size_t(c)] = h.abs_max[size_t(c)];
    tie_columns(tie, amax, false);
    // Candidates: none, then (rms, alpha), (max, alpha) for alpha = k / 20, k = 1 .. 20.
    constexpr int kSteps = 20;
    const int n_candidates = 1 + 2 * kSteps;
    const auto candidate = [&](int i, const char** stat, double* alpha) -> std::vector<float> {
      if (i == 0) {
        *stat = "none";
        *alpha = 0;
        return ones;
      }
      const bool use_max = i > kSteps;
      *stat = use_max ? "max" : "rms";
      *alpha = double(use_max ? i - kSteps : i) / kSteps;
      return smooth_scales(use_max ? amax : rms, wmax, *alpha);
    };
    const W8A8Error w8a8(group, rows, h);
    std::vector<double> losses(static_cast<size_t>(n_candidates));
    const int n_threads = std::min(options.threads, n_candidates);
    run_parallel(n_threads, [&](int t) {
      for (int i = t; i < n_candidates; i += n_threads) {
        const char* stat = nullptr;
        double alpha = 0;
        losses[size_t(i)] = w8a8.error(candidate(i, &stat, &alpha));
      }
    });
    int best = 0;
    for (int i = 1; i < n_candidates; ++i)
      if (losses[size_t(i)] < losses[size_t(best)]) best = i;
    choice.scales = candidate(best, &choice.statistic, &choice.alpha);
    choice.loss = losses[size_t(best)];
    choice.loss_rtn = losses[0];
    return choice;
  }

  std::vector<double> losses(size_t(options.grid));
  const int n_threads = std::min(options.threads, options.grid);
  run_parallel(n_threads, [&](int t) {
    for (int k = t; k < options.grid; k += n_threads) {
      const std::vector<float> s = scales_for(rms, double(k) / options.grid);
      double loss = 0;
      for (size_t g = 0; g < group.size(); ++g) loss += loss_of.error(group[g], s, rows[g]);
      losses[size_t(k)] = loss;
    }
  });
  AwqChoice choice;
  int best = 0;
  for (int k = 1; k < options.grid; ++k)
    if (losses[size_t(k)] < losses[size_t(best)]) best = k;
  choice.alpha = double(best) / options.grid;
  choice.scales = scales_for(rms, choice.alpha);
  choice.loss = losses[size_t(best)];
  choice.loss_rtn = losses[0];
  return choice;
}

namespace {

// A tensor's values as floats ([rows][cols]).
std::vector<float> read_matrix(const gguf::TensorInfo& t) {
  const int64_t rows = t.rows(), cols = t.cols();
  const size_t row = quant::row_bytes(t.type, cols);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + size_t(r) * row, out.data() + r * cols, cols);
  for (float v : out)
    if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "quantize: tensor '{}' holds a non-finite value ({})", t.name, v);
  return out;
}

}  // namespace

AwqPlan awq_plan(const gguf::File& file, std::span<const TensorPlan> plans, const Calibration& calibration,
                 const AwqOptions& options, const std::function<void(int64_t done, int64_t total)>& on_group) {
  std::map<std::string, const TensorPlan*> planned;
  for (const TensorPlan& p : plans) planned[std::string(file.tensors()[p.index].name)] = &p;
  int64_t n_layer = 0;
  for (const TensorPlan& p : plans) {
    const std::string_view name = file.tensors()[p.index].name;
    if (name.rfind("blk.", 0) == 0) n_layer = std::max<int64_t>(n_layer, std::stoll(std::string(name.substr(4))) + 1);
  }

  AwqPlan plan;
  // A quantized 2-D tensor with a Hessian of its width, or null.
  const auto member = [&](const std::string& name) -> const gguf::TensorInfo* {
    const auto it = planned.find(name);
    const auto hs = calibration.hessians.find(name);
    if (it == planned.end() || !it->second->quantize || hs == calibration.hessians.end()) return nullptr;
    const gguf::TensorInfo& t = file.tensors()[it->second->index];
    return t.shape.size() == 2 && hs->second->cols == t.cols() ? &t : nullptr;
  };
  const auto type_of = [&](const gguf::TensorInfo& t) { return planned.at(std::string(t.name))->type; };
  const auto norm = [&](const std::string& name, int64_t cols) -> const gguf::TensorInfo* {
    const gguf::TensorInfo* t = file.find_tensor(name);
    const bool ok = t && t->shape.size() == 1 && t->shape[0] == cols &&
                    quant::is_float_type(t->type);
    return ok ? t : nullptr;
  };

  const bool smooth = options.smooth_alpha >= 0 || options.smooth_search;
  const auto statistic = [&](const AwqChoice& c) { return smooth ? c.statistic : ""; };
  const int64_t total = (smooth ? 4 : 3) * n_layer;
  // Query heads per kv head, for attn_output's tied columns (0: unknown, not folded).
  const std::string arch = file.find("general.architecture") ? std::string(file.get_string("general.architecture")) : "";
  const int64_t n_head = int64_t(file.get_uint_or(arch + ".attention.head_count", 0));
  const int64_t n_head_kv = int64_t(file.get_uint_or(arch + ".attention.head_count_kv", uint64_t(n_head)));
  int64_t done = 0;
  const auto step = [&] {
    if (on_group) on_group(++done, total);
  };
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    // ffn_down, folded into ffn_up's rows.
    const gguf::TensorInfo* down = member(p + "ffn_down.weight");
    const gguf::TensorInfo* up = member(p + "ffn_up.weight");
    const gguf::TensorInfo* gate = member(p + "ffn_gate.weight");
    std::vector<float> up_rows;
    if (down && up && gate && up->rows() == down->cols()) {
      const std::vector<float> w = read_matrix(*down);
      const AwqMatrix m{.weights = w.data(), .rows = down->rows(), .cols = down->cols(), .type = type_of(*down)};
      AwqChoice c = awq_choose_scales(std::span(&m, 1), *calibration.hessians.at(std::string(down->name)), options);
      up_rows.resize(c.scales.size());
      for (size_t i = 0; i < up_rows.size(); ++i) up_rows[i] = 1.0f / c.scales[i];
      plan.transforms[std::string(down->name)] = {.col_scale = std::move(c.scales), .row_scale = {}, .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
    } else {
      plan.skipped.push_back(p + "ffn_down: no separate ffn_gate/ffn_up with calibration data to fold into");
    }
    step();
    // ffn_gate + ffn_up, folded into ffn_norm.
    const gguf::TensorInfo* ffn_norm = gate ? norm(p + "ffn_norm.weight", gate->cols()) : nullptr;
    if (gate && up && ffn_norm && up->cols() == gate->cols()) {
      const std::vector<float> wg = read_matrix(*gate), wu = read_matrix(*up);
      const AwqMatrix ms[] = {
          {.weights = wg.data(), .rows = gate->rows(), .cols = gate->cols(), .type = type_of(*gate)},
          {.weights = wu.data(), .rows = up->rows(), .cols = up->cols(), .type = type_of(*up),
           .row_scale = up_rows.empty() ? nullptr : up_rows.data()}};
      AwqChoice c = awq_choose_scales(ms, *calibration.hessians.at(std::string(gate->name)), options);
      std::vector<float> n = read_matrix(*ffn_norm);
      for (size_t i = 0; i < n.size(); ++i) n[i] /= c.scales[i];
      plan.folded[std::string(ffn_norm->name)] = std::move(n);
      plan.folded_alpha[std::string(ffn_norm->name)] = c.alpha;
      plan.folded_statistic[std::string(ffn_norm->name)] = statistic(c);
      plan.transforms[std::string(gate->name)] = {.col_scale = c.scales, .row_scale = {}, .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
      plan.transforms[std::string(up->name)] = {.col_scale = std::move(c.scales), .row_scale = std::move(up_rows),
                                                .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
    } else {
      if (!up_rows.empty()) {   // the down scales still need a home: ffn_up alone keeps them
        plan.transforms[std::string(up->name)] = {.col_scale = std::vector<float>(size_t(up->cols()), 1.0f),
                                                  .row_scale = std::move(up_rows), .alpha = 0, .clip = {}};
      }
      plan.skipped.push_back(p + "ffn_gate/ffn_up: no ffn_norm or calibration data");
    }
    step();
    const gguf::TensorInfo* q = member(p + "attn_q.weight");
    const gguf::TensorInfo* k = member(p + "attn_k.weight");
    const gguf::TensorInfo* v = member(p + "attn_v.weight");
    // SmoothQuant: attn_output, folded into attn_v's rows (and bias).
    std::vector<float> v_rows;
    if (smooth) {
      const gguf::TensorInfo* o = member(p + "attn_output.weight");
      const gguf::TensorInfo* v_bias = file.find_tensor(p + "attn_v.bias");
      const int64_t head_dim = v && n_head_kv > 0 ? v->rows() / n_head_kv : 0;
      const bool heads_fit = n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0 && head_dim > 0 &&
                             v->rows() == n_head_kv * head_dim;
      if (o && v && heads_fit && o->cols() == n_head * head_dim &&
          (!v_bias || (norm(p + "attn_v.bias", v->rows()) != nullptr))) {
        // Column j of attn_output reads value channel j % head_dim of kv head (j / head_dim) / group.
        std::vector<int64_t> tie(size_t(o->cols()));
        const int64_t group = n_head / n_head_kv;
        for (int64_t j = 0; j < o->cols(); ++j) tie[size_t(j)] = (j / head_dim) / group * head_dim + j % head_dim;
        const std::vector<float> w = read_matrix(*o);
        const AwqMatrix m{.weights = w.data(), .rows = o->rows(), .cols = o->cols(), .type = type_of(*o)};
        AwqChoice c = awq_choose_scales(std::span(&m, 1), *calibration.hessians.at(std::string(o->name)), options, tie);
        v_rows.resize(size_t(v->rows()));
        for (int64_t j = 0; j < o->cols(); ++j) v_rows[size_t(tie[size_t(j)])] = 1.0f / c.scales[size_t(j)];
        if (v_bias) {
          std::vector<float> b = read_matrix(*v_bias);
          for (size_t i = 0; i < b.size(); ++i) b[i] *= v_rows[i];
          plan.folded[std::string(v_bias->name)] = std::move(b);
          plan.folded_alpha[std::string(v_bias->name)] = c.alpha;
          plan.folded_statistic[std::string(v_bias->name)] = statistic(c);
        }
        plan.transforms[std::string(o->name)] = {.col_scale = std::move(c.scales), .row_scale = {}, .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
      } else {
        plan.skipped.push_back(p + "attn_output: no separate attn_v with calibration data and a head layout to fold into");
      }
      step();
    }
    // attn_q + attn_k + attn_v, folded into attn_norm.
    const gguf::TensorInfo* attn_norm = q ? norm(p + "attn_norm.weight", q->cols()) : nullptr;
    if (q && k && v && attn_norm && k->cols() == q->cols() && v->cols() == q->cols()) {
      const std::vector<float> wq = read_matrix(*q), wk = read_matrix(*k), wv = read_matrix(*v);
      const AwqMatrix ms[] = {{.weights = wq.data(), .rows = q->rows(), .cols = q->cols(), .type = type_of(*q)},
                              {.weights = wk.data(), .rows = k->rows(), .cols = k->cols(), .type = type_of(*k)},
                              {.weights = wv.data(), .rows = v->rows(), .cols = v->cols(), .type = type_of(*v),
                               .row_scale = v_rows.empty() ? nullptr : v_rows.data()}};
      AwqChoice c = awq_choose_scales(ms, *calibration.hessians.at(std::string(q->name)), options);
      std::vector<float> n = read_matrix(*attn_norm);
      for (size_t i = 0; i < n.size(); ++i) n[i] /= c.scales[i];
      plan.folded[std::string(attn_norm->name)] = std::move(n);
      plan.folded_alpha[std::string(attn_norm->name)] = c.alpha;
      plan.folded_statistic[std::string(attn_norm->name)] = statistic(c);
      for (const gguf::TensorInfo* t : {q, k}) plan.transforms[std::string(t->name)] = {.col_scale = c.scales, .row_scale = {}, .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
      plan.transforms[std::string(v->name)] = {.col_scale = std::move(c.scales), .row_scale = std::move(v_rows),
                                               .alpha = c.alpha, .statistic = statistic(c), .clip = {}};
    } else {
      if (!v_rows.empty()) {   // the attn_output scales still need a home: attn_v alone keeps them
        plan.transforms[std::string(v->name)] = {.col_scale = std::vector<float>(size_t(v->cols()), 1.0f),
                                                 .row_scale = std::move(v_rows), .alpha = 0, .clip = {}};
      }
      plan.skipped.push_back(p + "attn_q/k/v: no attn_norm or calibration data");
    }
    step();
  }
  // The clipping search runs when each tensor is written (quantize_model), with its input's H.
  if (options.clip && !smooth)
    for (auto& [name, t] : plan.transforms)
      if (const auto h = calibration.hessians.find(name); h != calibration.hessians.end()) t.clip = h->second;
  return plan;
}

}  // namespace ember::quantize
