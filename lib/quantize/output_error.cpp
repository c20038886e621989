// OutputError (output_error.hpp).
#include "quantize/output_error.hpp"

#include <Eigen/Core>

#include "common/fail.hpp"
#include "quant/quant.hpp"
#include "quantize/weight_quantizers.hpp"

namespace ember::quantize {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct OutputError::Impl {
  RowMajorF h;                    // empty: identity
};

std::vector<int64_t> sample_rows(int64_t rows, int64_t limit) {
  std::vector<int64_t> out;
  const int64_t n = std::min(rows, limit);
  for (int64_t i = 0; i < n; ++i) out.push_back(i * rows / n);
  return out;
}

OutputError::OutputError(const Hessian* h, int64_t cols) : cols_(cols), impl_(new Impl) {
  if (!h) return;
  require(h->cols == cols && h->rows_seen > 0 && int64_t(h->h.size()) == cols * cols,
          "quantize: a {}-wide Hessian does not fit a matrix of {} columns", h->cols, cols);
  impl_->h.resize(cols, cols);
  const double inv = 1.0 / double(h->rows_seen);
  for (int64_t i = 0; i < cols * cols; ++i) impl_->h.data()[i] = float(h->h[size_t(i)] * inv);
}

OutputError::~OutputError() { delete impl_; }

namespace {

double quadratic(const RowMajorF& e, const RowMajorF& h) {
  if (h.size() == 0) return double(e.squaredNorm());
  const RowMajorF eh = e * h;
  return double(eh.cwiseProduct(e).sum());
}

}  // namespace

double OutputError::error(const AwqMatrix& m, std::span<const float> s, std::span<const int64_t> rows) const {
  require(m.cols == cols_, "quantize: a matrix of {} columns against a {}-wide Hessian", m.cols, cols_);
  const int64_t cols = m.cols;
  std::vector<float> scaled(static_cast<size_t>(cols)), back(static_cast<size_t>(cols));
  std::vector<std::byte> q(quant::row_bytes(m.type, cols));
  RowMajorF e(int64_t(rows.size()), cols);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    const float* w = m.weights + r * cols;
    const float rs = m.row_scale ? m.row_scale[r] : 1.0f;
    for (int64_t c = 0; c < cols; ++c) scaled[size_t(c)] = w[c] * rs * (s.empty() ? 1.0f : s[size_t(c)]);
    quantize_values(m.type, scaled.data(), q.data(), cols);
    quant::dequantize_row(m.type, q.data(), back.data(), cols);
    for (int64_t c = 0; c < cols; ++c)
      e(int64_t(i), c) = back[size_t(c)] / (rs * (s.empty() ? 1.0f : s[size_t(c)])) - w[c];
  }
  return quadratic(e, impl_->h);
}

double OutputError::energy(const AwqMatrix& m, std::span<const int64_t> rows) const {
  RowMajorF w(int64_t(rows.size()), m.cols);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < m.cols; ++c) w(int64_t(i), c) = m.weights[rows[i] * m.cols + c];
  return quadratic(w, impl_->h);
}

}  // namespace ember::quantize
