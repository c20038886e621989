// Kernel benchmarks: GB/s of weights streamed and GFLOP/s, per weight type and ISA level.
//
//   mem_read/threads:N       plain read bandwidth of this machine (the roofline for decode)
//   dot/<type>/<isa>         one thread, WeightKernels::dot over every row of a 4096 x 4096 matrix
//   decode/<type>/<isa>/threads:T   cpu::matmul, 1 token (weights read from memory), T = 1, 2
//   prefill/<type>/<isa>/threads:2  cpu::matmul, 64 tokens (compute-bound)
//
// Decode and dot rotate over several matrices totalling more than the last-level
// cache, so they measure memory streaming, not cache bandwidth, as a real model does.
// Bytes are the weight bytes read per op (state.SetBytesProcessed); FLOPs are
// 2 * n_out * n_in * n_tok per op (counter "FLOPS", shown as a rate).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/host_buffer.hpp"
#include "cpu/ops/ops.hpp"
#include "quant/quant.hpp"

namespace {

using ember::backend::HostBuffer;
using ember::backend::Tensor;
using ember::cpu::Isa;
using ember::quant::DType;

constexpr int64_t kRows = 4096, kCols = 4096;
constexpr size_t kStreamBytes = size_t(160) << 20;  // > L3 (32 MB) several times over

// Several [kRows, kCols] matrices of one type with realistic contents: 64 distinct
// rows quantized from normal values, repeated.
struct Matrices {
  std::vector<std::unique_ptr<HostBuffer>> buffers;
  std::vector<Tensor> tensors;
  size_t bytes_each = 0;
};

Matrices& matrices(DType type) {
  static std::map<DType, Matrices> cache;
  auto [it, fresh] = cache.try_emplace(type);
  Matrices& m = it->second;
  if (!fresh) return m;
  const size_t row_bytes = ember::quant::row_bytes(type, kCols);
  m.bytes_each = row_bytes * kRows;
  std::vector<std::byte> rows(64 * row_bytes);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(kCols);
  for (int r = 0; r < 64; ++r) {
    for (float& v : values) v = normal(rng);
    ember::quant::quantize_row(type, values.data(), rows.data() + r * row_bytes, kCols);
  }
  const size_t count = std::max<size_t>(2, (kStreamBytes + m.bytes_each - 1) / m.bytes_each);
  for (size_t i = 0; i < count; ++i) {
    auto buffer = std::make_unique<HostBuffer>(m.bytes_each);
    for (int64_t r = 0; r < kRows; ++r)
      std::memcpy(buffer->host_data() + r * row_bytes, rows.data() + (r % 64) * row_bytes, row_bytes);
    m.tensors.push_back(ember::backend::make_tensor(*buffer, 0, type, kRows, kCols));
    m.buffers.push_back(std::move(buffer));
  }
  return m;
}

struct Activations {
  std::unique_ptr<HostBuffer> buffer;
  Tensor tensor;
};
Activations activations(int64_t n_tok, int64_t n_cols) {
  Activations a;
  a.buffer = std::make_unique<HostBuffer>(size_t(n_tok * n_cols) * 4);
  a.tensor = ember::backend::make_tensor(*a.buffer, 0, DType::f32, n_tok, n_cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n_tok * n_cols; ++i) a.tensor.row_ptr<float>(0)[i] = normal(rng);
  return a;
}

void report(benchmark::State& state, size_t bytes_per_op, double flops_per_op) {
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes_per_op));
  state.counters["FLOPS"] = benchmark::Counter(flops_per_op * double(state.iterations()), benchmark::Counter::kIsRate);
}

void bench_mem_read(benchmark::State& state) {
  const int threads = int(state.range(0));
  const size_t bytes = kStreamBytes;
  auto buffer = std::make_unique<HostBuffer>(bytes);
  std::memset(buffer->host_data(), 1, bytes);
  ember::cpu::ThreadPool pool(threads);
  std::atomic<uint64_t> sink{0};
  for (auto _ : state) {
    pool.run([&](int index, int n) {
      const auto* p = reinterpret_cast<const uint64_t*>(buffer->host_data());
      const size_t words = bytes / 8, begin = words * index / n, end = words * (index + 1) / n;
      // A plain sum: the compiler vectorizes it with the baseline ISA's widest loads.
      uint64_t sum = 0;
      for (size_t i = begin; i < end; ++i) sum += p[i];
      sink += sum;
    });
  }
  benchmark::DoNotOptimize(sink.load());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

void bench_dot(benchmark::State& state, DType type, Isa isa) {
  const auto& kernels = ember::cpu::weight_kernels(isa, type);
  Matrices& m = matrices(type);
  const Activations x = activations(1, kCols);
  std::vector<std::byte> act(ember::quant::row_bytes(kernels.activation_type, kCols));
  kernels.quantize_activations(x.tensor.row_ptr<float>(0), act.data(), kCols);
  const size_t row_bytes = ember::quant::row_bytes(type, kCols);
  size_t which = 0;
  float sum = 0.0f;
  for (auto _ : state) {
    const std::byte* w = m.tensors[which].row_ptr(0);
    which = (which + 1) % m.tensors.size();
    for (int64_t r = 0; r < kRows; ++r) sum += kernels.dot(w + r * row_bytes, act.data(), kCols);
  }
  benchmark::DoNotOptimize(sum);
  report(state, m.bytes_each, 2.0 * kRows * kCols);
}

void bench_matmul(benchmark::State& state, DType type, Isa isa, int64_t n_tok) {
  const int threads = int(state.range(0));
  Matrices& m = matrices(type);
  const Activations x = activations(n_tok, kCols);
  auto out_buffer = std::make_unique<HostBuffer>(size_t(n_tok * kRows) * 4);
  const Tensor out = ember::backend::make_tensor(*out_buffer, 0, DType::f32, n_tok, kRows);
  ember::cpu::ThreadPool pool(threads);
  std::vector<std::byte> scratch;
  ember::cpu::OpContext ctx{pool, isa, scratch, {}};
  // Prefill is compute-bound: one matrix (cache-resident or not makes no difference).
  const size_t rotate = n_tok == 1 ? m.tensors.size() : 1;
  size_t which = 0;
  for (auto _ : state) {
    ember::cpu::matmul(ctx, m.tensors[which], x.tensor, out);
    which = (which + 1) % rotate;
  }
  report(state, m.bytes_each, 2.0 * kRows * kCols * double(n_tok));
}

void register_all() {
  benchmark::RegisterBenchmark("mem_read", bench_mem_read)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
  for (Isa isa : ember::cpu::available_isas()) {
    for (DType type : ember::quant::weight_types()) {
      const std::string name = std::string(ember::quant::type_name(type)) + "/" + std::string(ember::cpu::isa_name(isa));
      benchmark::RegisterBenchmark(("dot/" + name).c_str(), bench_dot, type, isa)->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("decode/" + name).c_str(), bench_matmul, type, isa, int64_t(1))
          ->Arg(1)
          ->Arg(2)
          ->ArgName("threads")
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("prefill/" + name).c_str(), bench_matmul, type, isa, int64_t(64))
          ->Arg(2)
          ->ArgName("threads")
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
