#include "backend/reference/reference_backend.hpp"


#include "backend/host_buffer.hpp"
#include "backend/reference/ops.hpp"
#include "common/fail.hpp"

namespace ember::reference {
namespace {

using backend::Activation;
using backend::AttentionParams;
using backend::RopeParams;

class ReferenceBackend final : public backend::HostBackend {
 public:
  std::string_view name() const override { return "reference"; }

  void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    reference::get_rows(table, ids, out);
  }
  void matmul(const Tensor& w, const Tensor& x, const Tensor& out) override { reference::matmul(w, x, out); }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { reference::add(a, b, out); }
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) override { reference::mul(a, b, out); }
  void scale(const Tensor& x, float factor, const Tensor& out) override { reference::scale(x, factor, out); }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    reference::rms_norm(x, weight, eps, out);
  }
  void rope(const Tensor& x, const Tensor& positions, const RopeParams& params, const Tensor& out) override {
    reference::rope(x, positions, params, out);
  }
  void glu(const Tensor& gate, const Tensor& up, Activation activation, const Tensor& out) override {
    reference::glu(gate, up, activation, out);
  }
  void kv_store(const Tensor& src, const Tensor& cache, const Tensor& slots) override {
    reference::kv_store(src, cache, slots);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 const Tensor& out) override {
    reference::attention(q, k, v, params, out);
  }
};

}  // namespace

std::unique_ptr<backend::Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace ember::reference
