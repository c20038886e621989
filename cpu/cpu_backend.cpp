#include "cpu/cpu_backend.hpp"

#include <algorithm>
#include <vector>

#include "backend/host_buffer.hpp"
#include "common/fail.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

using backend::Activation;
using backend::AttentionParams;
using backend::RopeParams;

class CpuBackend final : public backend::HostBackend {
 public:
  CpuBackend(int threads, Isa isa) : pool_(threads), isa_(isa) {
    const auto isas = available_isas();
    if (std::find(isas.begin(), isas.end(), isa) == isas.end())
      fail(ErrorCode::unsupported, "this CPU cannot run {} kernels", isa_name(isa));
  }

  std::string_view name() const override { return "cpu"; }
  void set_sum_order(backend::SumOrder order) override {
    context_.batch_invariant = order == backend::SumOrder::batch_invariant;
  }

  void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out) override {
    cpu::get_rows(ctx(), table, ids, out);
  }
  void matmul(const Tensor& w, const Tensor& x, const Tensor& out) override { cpu::matmul(ctx(), w, x, out); }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { cpu::add(ctx(), a, b, out); }
  void mul(const Tensor& a, const Tensor& b, const Tensor& out) override { cpu::mul(ctx(), a, b, out); }
  void scale(const Tensor& x, float factor, const Tensor& out) override { cpu::scale(ctx(), x, factor, out); }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    cpu::rms_norm(ctx(), x, weight, eps, out);
  }
  void rope(const Tensor& x, const Tensor& positions, const RopeParams& params, const Tensor& out) override {
    cpu::rope(ctx(), x, positions, params, out);
  }
  void glu(const Tensor& gate, const Tensor& up, Activation activation, const Tensor& out) override {
    cpu::glu(ctx(), gate, up, activation, out);
  }
  void kv_store(const Tensor& src, const Tensor& cache, const Tensor& slots) override {
    cpu::kv_store(ctx(), src, cache, slots);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 const Tensor& out) override {
    cpu::attention(ctx(), q, k, v, params, out);
  }

 private:
  OpContext& ctx() { return context_; }

  ThreadPool pool_;
  Isa isa_;
  std::vector<std::byte> scratch_;
  OpContext context_{pool_, isa_, scratch_, {}};
};

}  // namespace

std::unique_ptr<backend::Backend> make_cpu_backend(const CpuBackendOptions& options) {
  require(options.threads >= 1, "CPU backend: threads must be >= 1, got {}", options.threads);
  return std::make_unique<CpuBackend>(options.threads, options.isa.value_or(best_isa()));
}

}  // namespace ember::cpu
