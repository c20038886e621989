#include "cpu/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/host_buffer.hpp"
#include "common/fail.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

using backend::Activation;
using backend::AttentionParams;
using backend::RopeParams;

class CpuBackend final : public backend::HostBackend {
 public:
  CpuBackend(int threads, Isa isa, bool repack) : pool_(threads), isa_(isa), repack_(repack) {
    const auto isas = available_isas();
    if (std::find(isas.begin(), isas.end(), isa) == isas.end())
      fail(ErrorCode::unsupported, "this CPU cannot run {} kernels", isa_name(isa));
  }

  std::string_view name() const override { return "cpu"; }
  void set_sum_order(backend::SumOrder order) override {
    context_.batch_invariant = order == backend::SumOrder::batch_invariant;
  }

  std::shared_ptr<backend::Buffer> prepare_weight(Tensor& w) override {
    if (!repack_ || w.layout != 0 || w.empty() || w.buffer->host_data() == nullptr || !w.contiguous() ||
        !rows8_layout_defined(w.type) || w.rows % kLayoutRows8Group != 0 || w.rows == 0)
      return nullptr;
    if (weight_kernels(isa_, w.type).repacked.dot_tile == nullptr) return nullptr;
    std::shared_ptr<backend::Buffer> buffer = allocate(w.bytes());
    Tensor out = backend::make_tensor(*buffer, 0, w.type, w.rows, w.cols);
    out.layout = kLayoutRows8;
    // Groups of 8 rows in parallel, a few hundred at a time.
    const int64_t groups = w.rows / kLayoutRows8Group;
    pool_.parallel_for(groups, [&](int64_t begin, int64_t end) {
      repack_rows8(w.type, w.row_ptr(begin * kLayoutRows8Group), w.row_stride,
                   out.row_ptr(begin * kLayoutRows8Group), (end - begin) * kLayoutRows8Group, w.cols);
    });
    w = out;
    return buffer;
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
  bool repack_;
  std::vector<std::byte> scratch_;
  OpContext context_{pool_, isa_, scratch_, {}};
};

}  // namespace

std::unique_ptr<backend::Backend> make_cpu_backend(const CpuBackendOptions& options) {
  require(options.threads >= 1, "CPU backend: threads must be >= 1, got {}", options.threads);
  const char* env = std::getenv("EMBER_CPU_REPACK");
  const bool repack = options.repack_weights && !(env != nullptr && std::strcmp(env, "0") == 0);
  return std::make_unique<CpuBackend>(options.threads, options.isa.value_or(best_isa()), repack);
}

}  // namespace ember::cpu
