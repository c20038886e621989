// Kernel benchmarks of the CUDA backend (issue 16, point 4; docs/cuda.md), as a plain
// program so that it runs from scripts/cuda-check.sh's prebuilt copy:
//
//   matmul <type> <in>x<out> tokens:N   the decode matmul of a Llama-3-8B FFN matrix
//                                       (4096 -> 14336) and the attention matrix
//                                       (4096 -> 4096), N = 1 and 8 tokens; prefill: N = 512
//   launch / upload                     a small op's launch, a small pageable upload
//   attention f16 ctx:C                 one query token of 32 heads over C cached
//                                       tokens of 8 KV heads of 128 (Llama-3-8B), F16
//
// Each matmul call reads the next of several copies of its matrix (256 MB or more in
// all), so that weights come from device memory rather than the L2 cache.
// Each line gives the time per call (mean over the repetitions after warm-ups, the
// stream synchronised at both ends, launches included), the bytes a call must read
// (weights, or K and V) over that time, and that rate as a share of the roofline
// (EMBER_ROOFLINE_GBS, default 4800: the H200's HBM3e). Exits 4 without a device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/ops/attention.hpp"
#include "backend/ops/elementwise.hpp"
#include "backend/ops/matmul.hpp"
#include "cuda/cuda_backend.hpp"
#include "ember/error.hpp"
#include "quant/quant.hpp"

namespace {

using ember::quant::DType;
namespace backend = ember::backend;

double roofline_gbs() {
  const char* env = std::getenv("EMBER_ROOFLINE_GBS");
  return env != nullptr ? std::atof(env) : 4800.0;
}

// Mean seconds per call of fn over `reps` calls after `warm` calls.
template <class F>
double time_calls(backend::Backend& be, F fn, int reps, int warm = 3) {
  for (int i = 0; i < warm; ++i) fn();
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void report(const std::string& name, double seconds, double bytes) {
  const double gbs = bytes / seconds / 1e9;
  std::printf("%-44s %10.1f us %9.1f GB/s %6.1f %% of roofline\n", name.c_str(), seconds * 1e6, gbs,
              100.0 * gbs / roofline_gbs());
}

// An [n_out, n_in] matrix of `type`: 64 distinct quantized rows repeated.
std::vector<std::byte> weight_bytes(DType type, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  const size_t row = ember::quant::row_bytes(type, n_in);
  std::vector<std::byte> w(row * size_t(n_out));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    if (r < 64) {
      for (float& e : v) e = normal(rng);
      ember::quant::quantize_row(type, v.data(), w.data() + size_t(r) * row, n_in);
    } else {
      std::copy_n(w.data() + size_t(r % 64) * row, row, w.data() + size_t(r) * row);
    }
  }
  return w;
}

void bench_matmul(backend::Backend& be, DType type, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  const auto w = weight_bytes(type, n_in, n_out, rng);
  // Copies of the matrix, together at least 256 MB (four times the H200's 60 MB L2),
  // taken in turn, so that every call reads its weights from device memory.
  const size_t copies = std::min<size_t>(16, std::max<size_t>(1, (size_t(256) << 20) / w.size() + 1));
  std::vector<std::unique_ptr<backend::Buffer>> w_bufs;
  std::vector<backend::Tensor> wts;
  for (size_t c = 0; c < copies; ++c) {
    w_bufs.push_back(be.allocate(w.size()));
    wts.push_back(backend::make_tensor(*w_bufs.back(), 0, type, n_out, n_in));
    be.upload(wts.back(), w.data());
  }
  size_t next = 0;
  for (int64_t n_tok : {1, 8, 512}) {
    std::vector<float> x(size_t(n_tok * n_in));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& e : x) e = normal(rng);
    auto x_buf = be.allocate(x.size() * sizeof(float));
    auto y_buf = be.allocate(size_t(n_tok * n_out) * sizeof(float));
    const auto xt = backend::make_tensor(*x_buf, 0, DType::f32, n_tok, n_in);
    const auto yt = backend::make_tensor(*y_buf, 0, DType::f32, n_tok, n_out);
    be.upload(xt, x.data());
    const double s = time_calls(be, [&] { ember::ops::matmul(be, wts[next++ % copies], xt, yt); }, n_tok >= 512 ? 3 : 50);
    char name[128];
    std::snprintf(name, sizeof name, "matmul %-5s %lldx%lld tokens:%lld", std::string(ember::quant::type_name(type)).c_str(),
                  (long long)n_in, (long long)n_out, (long long)n_tok);
    report(name, s, double(w.size()));
    if (n_tok >= 512) std::printf("%-44s %10.1f TFLOP/s\n", "", 2.0 * double(n_in) * double(n_out) * double(n_tok) / s / 1e12);
  }
}

void bench_attention(backend::Backend& be, int64_t ctx) {
  const int n_head = 32, n_kv = 8, hd = 128, page = 256;
  const int64_t pages = (ctx + page - 1) / page, slots = pages * page;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> bits(0x3000, 0x3bff);  // F16 values in [0.125, 1)
  std::vector<uint16_t> kv(size_t(slots * n_kv * hd));
  for (auto& e : kv) e = uint16_t(bits(rng));
  auto k_buf = be.allocate(kv.size() * 2), v_buf = be.allocate(kv.size() * 2);
  const auto kc = backend::make_tensor(*k_buf, 0, DType::f16, slots, n_kv * hd);
  const auto vc = backend::make_tensor(*v_buf, 0, DType::f16, slots, n_kv * hd);
  be.upload(kc, kv.data());
  be.upload(vc, kv.data());
  std::vector<float> q(size_t(n_head * hd), 0.01f);
  std::vector<int32_t> page_table(static_cast<size_t>(pages)), cell_pos(static_cast<size_t>(slots), -1);
  for (int64_t p = 0; p < pages; ++p) page_table[size_t(p)] = int32_t(p);
  for (int64_t c = 0; c < ctx; ++c) cell_pos[size_t(c)] = int32_t(c);
  const int32_t pos = int32_t(ctx - 1), seq = 0, cells = int32_t(ctx);
  auto small = be.allocate(4096 + size_t(pages + slots) * 4 + q.size() * 8);
  size_t off = 0;
  auto put = [&](DType type, int64_t rows, int64_t cols, const void* data) {
    const auto t = backend::make_tensor(*small, off, type, rows, cols);
    be.upload(t, data);
    off += (t.bytes() + 255) / 256 * 256;
    return t;
  };
  backend::AttentionParams ap;
  ap.n_head = n_head, ap.n_head_kv = n_kv, ap.head_dim = hd, ap.scale = 1.0f / std::sqrt(float(hd));
  ap.page_tokens = page;
  ap.token_pos = put(DType::i32, 1, 1, &pos);
  ap.token_seq = put(DType::i32, 1, 1, &seq);
  ap.seq_cells = put(DType::i32, 1, 1, &cells);
  ap.page_table = put(DType::i32, 1, pages, page_table.data());
  ap.cell_pos = put(DType::i32, 1, slots, cell_pos.data());
  const auto qt = put(DType::f32, 1, n_head * hd, q.data());
  const auto out = put(DType::f32, 1, n_head * hd, q.data());
  const double s = time_calls(be, [&] { ember::ops::attention(be, qt, kc, vc, ap, out); }, 20);
  report("attention f16 ctx:" + std::to_string(ctx) + " tokens:1", s, double(ctx) * n_kv * hd * 2 * 2);
}

// The fixed costs a decode step pays per op and per table upload: a small op's launch
// through the backend, and a small upload from pageable memory, each timed over many
// back-to-back calls (the rate at which the host can issue them).
void bench_overheads(backend::Backend& be) {
  std::vector<float> host(256, 1.0f);
  auto buf = be.allocate(host.size() * sizeof(float));
  const auto t = backend::make_tensor(*buf, 0, DType::f32, 1, int64_t(host.size()));
  be.upload(t, host.data());
  const double launch = time_calls(be, [&] { ember::ops::scale(be, t, 1.0f, t); }, 2000, 10);
  std::printf("%-44s %10.2f us per call\n", "launch: scale of 256 floats", launch * 1e6);
  const double upload = time_calls(be, [&] { be.upload(t, host.data()); }, 2000, 10);
  std::printf("%-44s %10.2f us per call\n", "upload: 1 KiB from pageable memory", upload * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  if (ember::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device on this machine\n");
    return 4;
  }
  const std::string only = argc > 1 ? argv[1] : "";
  try {
    auto be = ember::cuda::make_cuda_backend();
    std::mt19937 rng(1);
    std::printf("roofline %.0f GB/s (EMBER_ROOFLINE_GBS)\n", roofline_gbs());
    if (only.empty() || only == "overheads") bench_overheads(*be);
    if (only.empty() || only == "matmul") {
      for (DType type : {DType::q4_0, DType::q8_0, DType::q4_k, DType::q6_k, DType::f16, DType::bf16, DType::q4_1,
                         DType::q5_0, DType::q5_1, DType::q5_k, DType::f32}) {
        bench_matmul(*be, type, 4096, 14336, rng);
        if (type == DType::q4_0) bench_matmul(*be, type, 4096, 4096, rng);
      }
    }
    if (only.empty() || only == "attention")
      for (int64_t ctx : {1024, 16384}) bench_attention(*be, ctx);
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "ember-cuda-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
