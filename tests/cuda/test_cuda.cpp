// The CUDA backend: device memory round trips; matmul, get_rows, kv_store/kv_load and
// the small ops against the reference; clear errors for unsupported types. Skips (exit code 4) without a CUDA device.
#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/op_helpers.hpp"
#include "backend/ops/attention.hpp"
#include "backend/ops/elementwise.hpp"
#include "backend/ops/get_rows.hpp"
#include "backend/ops/glu.hpp"
#include "backend/ops/kv_store.hpp"
#include "backend/ops/matmul.hpp"
#include "backend/ops/rms_norm.hpp"
#include "backend/ops/rope.hpp"
#include "backend/reference/reference_backend.hpp"
#include "common/catch.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "ember/error.hpp"
#include "model/golden_run.hpp"
#include "quant/quant.hpp"

int main(int argc, char** argv) {
  if (ember::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device on this machine\n");
    return 4;
  }
  return Catch::Session().run(argc, argv);
}

TEST_CASE("CUDA buffers round-trip host data", "[cuda]") {
  auto be = ember::cuda::make_cuda_backend();
  std::vector<float> host(4096);
  std::iota(host.begin(), host.end(), 0.5f);
  auto buffer = be->allocate(host.size() * sizeof(float));
  const auto t = ember::backend::make_tensor(*buffer, 0, ember::quant::DType::f32, 64, 64);
  be->upload(t, host.data());
  std::vector<float> back(host.size());
  be->download(t, back.data());
  CHECK(back == host);
}

TEST_CASE("CUDA ops report unsupported types", "[cuda]") {
  auto be = ember::cuda::make_cuda_backend();
  auto buffer = be->allocate(64 * 1024);
  // Q8_1 is an activation format: no table of that type exists, and get_rows says so.
  const auto table = ember::backend::make_tensor(*buffer, 0, ember::quant::DType::q8_1, 4, 64);
  const auto ids = ember::backend::make_tensor(*buffer, 4096, ember::quant::DType::i32, 2, 1);
  const auto out = ember::backend::make_tensor(*buffer, 8192, ember::quant::DType::f32, 2, 64);
  try {
    ember::ops::get_rows(*be, table, ids, out);
    FAIL("no error");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::unsupported);
  }
}

namespace {

// A device tensor holding `values` ([rows, cols] f32 or i32 bits), and its buffer.
struct DeviceTensor {
  std::unique_ptr<ember::backend::Buffer> buffer;
  ember::backend::Tensor tensor;
};
template <class T>
DeviceTensor device_tensor(ember::backend::Backend& be, const std::vector<T>& values, int64_t rows, int64_t cols,
                           ember::quant::DType type) {
  DeviceTensor d{be.allocate(values.size() * sizeof(T)), {}};
  d.tensor = ember::backend::make_tensor(*d.buffer, 0, type, rows, cols);
  be.upload(d.tensor, values.data());
  return d;
}
std::vector<float> download(ember::backend::Backend& be, const ember::backend::Tensor& t) {
  std::vector<float> v(size_t(t.rows * t.cols));
  be.download(t, v.data());
  return v;
}
// max |a - b| <= rel * max |b| + abs (NaN anywhere fails).
bool close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return false;
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff <= rel * scale + abs;
}

}  // namespace

TEST_CASE("CUDA small ops agree with the reference backend", "[cuda]") {
  using ember::quant::DType;
  auto gpu = ember::cuda::make_cuda_backend();
  auto ref = ember::reference::make_reference_backend();
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = normal(rng);
    return v;
  };
  for (int64_t rows : {1, 5, 33}) {
    INFO("rows: " << rows);
    const int64_t cols = 640;
    const auto a = random(size_t(rows * cols)), b = random(size_t(rows * cols)), w = random(size_t(cols));
    const auto nan_out = std::vector<float>(size_t(rows * cols), NAN);
    // Each op on both backends, then the GPU result against the reference's.
    // Tolerances: those of the CPU backend's op tests (tests/backend/test_ops.cpp).
    int op_index = 0;  // in the order below: add, mul, mul by row, scale, glu silu, glu gelu, rms_norm, rope x2
    auto both = [&](auto op, double rel, double abs) {
      const int which = op_index++;
      INFO("op #" << which);
      std::vector<float> results[2];
      int k = 0;
      for (ember::backend::Backend* be : {static_cast<ember::backend::Backend*>(gpu.get()), ref.get()}) {
        DeviceTensor da = device_tensor(*be, a, rows, cols, DType::f32), db = device_tensor(*be, b, rows, cols, DType::f32);
        DeviceTensor dw = device_tensor(*be, w, 1, cols, DType::f32), dout = device_tensor(*be, nan_out, rows, cols, DType::f32);
        op(*be, da.tensor, db.tensor, dw.tensor, dout.tensor);
        results[k++] = download(*be, dout.tensor);
      }
      CHECK(close(results[0], results[1], rel, abs));
    };
    using T = ember::backend::Tensor;
    using B = ember::backend::Backend;
    both([](B& be, const T& x, const T& y, const T&, const T& o) { ember::ops::add(be, x, y, o); }, 0.0, 0.0);
    both([](B& be, const T& x, const T& y, const T&, const T& o) { ember::ops::mul(be, x, y, o); }, 0.0, 0.0);
    both([](B& be, const T& x, const T&, const T& w, const T& o) { ember::ops::mul(be, x, w, o); }, 0.0, 0.0);
    both([](B& be, const T& x, const T&, const T&, const T& o) { ember::ops::scale(be, x, 0.37f, o); }, 0.0, 0.0);
    both([](B& be, const T& x, const T& y, const T&, const T& o) {
      ember::ops::glu(be, x, y, ember::backend::Activation::silu, o);
    }, 1e-5, 0.0);
    both([](B& be, const T& x, const T& y, const T&, const T& o) {
      ember::ops::glu(be, x, y, ember::backend::Activation::gelu_tanh, o);
    }, 1e-3, 0.0);
    both([](B& be, const T& x, const T&, const T& w, const T& o) { ember::ops::rms_norm(be, x, w, 1e-6f, o); }, 1e-5, 0.0);
    for (auto mode : {ember::backend::RopeMode::normal, ember::backend::RopeMode::neox}) {
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (int64_t t = 0; t < rows; ++t) pos[size_t(t)] = int32_t(t * 977 % 30000);
      both([&](B& be, const T& x, const T&, const T&, const T& o) {
        DeviceTensor dp = device_tensor(be, pos, rows, 1, DType::i32);
        ember::backend::RopeParams p;
        p.n_head = 5;
        p.head_dim = 128;
        p.n_rot = 64;  // half of each head passes through
        p.mode = mode;
        p.freq_base = 1000000.0f;
        ember::ops::rope(be, x, dp.tensor, p, o);
      }, 1e-5 + 3e-8 * 30000, 0.0);  // test_ops: the CPU rotates in float
    }
  }
}

TEST_CASE("CUDA matmul follows the matmul contract for every weight type", "[cuda]") {
  using ember::quant::DType;
  namespace quant = ember::quant;
  auto be = ember::cuda::make_cuda_backend();
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n_in = 1024, n_out = 75;
  for (DType type : quant::weight_types()) {
    INFO(quant::type_name(type));
    if (!be->supports(ember::backend::Op::matmul, type)) continue;   // ember's own formats: no device kernels
    const size_t row_bytes = quant::row_bytes(type, n_in);
    std::vector<std::byte> w(row_bytes * n_out);
    std::vector<float> v(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      for (float& e : v) e = normal(rng);
      quant::quantize_row(type, v.data(), w.data() + o * row_bytes, n_in);
    }
    auto w_buf = be->allocate(w.size());
    const auto wt = ember::backend::make_tensor(*w_buf, 0, type, n_out, n_in);
    be->upload(wt, w.data());
    for (int64_t n_tok : {1, 5, 33}) {
      INFO("tokens: " << n_tok);
      std::vector<float> x(static_cast<size_t>(n_tok * n_in));
      for (float& e : x) e = normal(rng);
      auto x_buf = be->allocate(x.size() * sizeof(float));
      auto y_buf = be->allocate(size_t(n_tok * n_out) * sizeof(float));
      const auto xt = ember::backend::make_tensor(*x_buf, 0, DType::f32, n_tok, n_in);
      const auto yt = ember::backend::make_tensor(*y_buf, 0, DType::f32, n_tok, n_out);
      be->upload(xt, x.data());
      std::vector<float> y(size_t(n_tok * n_out), NAN);
      be->upload(yt, y.data());
      ember::ops::matmul(*be, wt, xt, yt);
      be->download(yt, y.data());
      const DType act = quant::activation_type(type);
      std::vector<std::byte> a(quant::row_bytes(act, n_in));
      int bad = 0;
      for (int64_t t = 0; t < n_tok; ++t) {
        quant::quantize_row(act, x.data() + t * n_in, a.data(), n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          const float want = quant::dot_row(type, w.data() + o * row_bytes, a.data(), n_in);
          const float got = y[size_t(t * n_out + o)];
          if (!(std::fabs(got - want) <= 1e-4f * (std::fabs(want) + std::sqrt(float(n_in))))) {
            if (bad++ == 0) UNSCOPED_INFO("first mismatch: token " << t << " row " << o << " got " << got << " want " << want);
          }
        }
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("CUDA get_rows equals quant::dequantize_row for every table type", "[cuda]") {
  using ember::quant::DType;
  auto be = ember::cuda::make_cuda_backend();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 37, cols = 512;
  const std::vector<int32_t> ids = {36, 0, 5, 5, 17, 1, 36, 2, 9};
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1,
                     DType::q8_0, DType::q4_k, DType::q5_k, DType::q6_k}) {
    INFO(ember::quant::type_name(type));
    const size_t row_bytes = ember::quant::row_bytes(type, cols);
    std::vector<std::byte> table(row_bytes * rows);
    std::vector<float> x(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : x) v = normal(rng);
      ember::quant::quantize_row(type, x.data(), table.data() + r * row_bytes, cols);
    }
    auto table_buf = be->allocate(table.size());
    auto ids_buf = be->allocate(ids.size() * sizeof(int32_t));
    auto out_buf = be->allocate(ids.size() * cols * sizeof(float));
    const auto t = ember::backend::make_tensor(*table_buf, 0, type, rows, cols);
    const auto i = ember::backend::make_tensor(*ids_buf, 0, DType::i32, int64_t(ids.size()), 1);
    const auto o = ember::backend::make_tensor(*out_buf, 0, DType::f32, int64_t(ids.size()), cols);
    be->upload(t, table.data());
    be->upload(i, ids.data());
    std::vector<float> nan_fill(ids.size() * cols, NAN);  // poisoned: every value must be written
    be->upload(o, nan_fill.data());
    ember::ops::get_rows(*be, t, i, o);
    std::vector<float> got(ids.size() * cols);
    be->download(o, got.data());
    int bad = 0;
    std::vector<float> want(static_cast<size_t>(cols));
    for (size_t k = 0; k < ids.size(); ++k) {
      ember::quant::dequantize_row(type, table.data() + ids[k] * row_bytes, want.data(), cols);
      if (std::memcmp(want.data(), got.data() + k * cols, cols * sizeof(float)) != 0 && bad++ == 0) {
        int64_t c = 0;
        while (c < cols && std::memcmp(&want[size_t(c)], &got[k * cols + size_t(c)], sizeof(float)) == 0) ++c;
        UNSCOPED_INFO("first mismatch: id " << ids[k] << " col " << c << " got " << got[k * cols + size_t(c)] << " want " << want[size_t(c)]);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("CUDA kv_store writes the reference bytes and kv_load decodes them", "[cuda]") {
  using ember::quant::DType;
  auto be = ember::cuda::make_cuda_backend();
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t width = 256, cells = 40;
  const std::vector<int32_t> slots = {3, 39, 0, 17, 5};
  const int64_t n = int64_t(slots.size());
  std::vector<float> src(size_t(n * width));
  for (size_t i = 0; i < src.size(); ++i) src[i] = normal(rng) * (i % 29 == 4 ? 25.0f : 1.0f);
  for (DType type : {DType::f32, DType::f16, DType::kv_q8_g32, DType::kv_q8_g64, DType::kv_q4_g32, DType::kv_q4_g64,
                     DType::kv_q4o_g32, DType::kv_q4o_g64}) {
    INFO(ember::quant::type_name(type));
    const size_t row_bytes = ember::quant::row_bytes(type, width);
    auto src_buf = be->allocate(src.size() * sizeof(float));
    auto cache_buf = be->allocate(row_bytes * cells);
    auto slot_buf = be->allocate(slots.size() * sizeof(int32_t));
    auto out_buf = be->allocate(src.size() * sizeof(float));
    const auto s = ember::backend::make_tensor(*src_buf, 0, DType::f32, n, width);
    const auto c = ember::backend::make_tensor(*cache_buf, 0, type, cells, width);
    const auto i = ember::backend::make_tensor(*slot_buf, 0, DType::i32, n, 1);
    const auto o = ember::backend::make_tensor(*out_buf, 0, DType::f32, n, width);
    be->upload(s, src.data());
    be->upload(i, slots.data());
    std::vector<std::byte> cache(row_bytes * cells, std::byte{0x5a});
    be->upload(c, cache.data());
    ember::ops::kv_store(*be, s, c, i);
    ember::ops::kv_load(*be, c, i, o);
    be->download(c, cache.data());
    std::vector<float> loaded(src.size());
    be->download(o, loaded.data());
    int bad_bytes = 0, bad_values = 0;
    std::vector<std::byte> want(row_bytes);
    std::vector<float> decoded(static_cast<size_t>(width));
    for (int64_t t = 0; t < n; ++t) {
      ember::quant::quantize_row(type, src.data() + t * width, want.data(), width);
      bad_bytes += std::memcmp(want.data(), cache.data() + slots[size_t(t)] * row_bytes, row_bytes) != 0;
      ember::quant::dequantize_row(type, want.data(), decoded.data(), width);
      bad_values += std::memcmp(decoded.data(), loaded.data() + t * width, width * sizeof(float)) != 0;
    }
    CHECK(bad_bytes == 0);
    CHECK(bad_values == 0);
    // Cells not written keep their bytes.
    CHECK(cache[1 * row_bytes] == std::byte{0x5a});
  }
}

TEST_CASE("CUDA attention over pages agrees with the reference for every KV type", "[cuda]") {
  using namespace ember::test;
  using ember::quant::DType;
  namespace ops = ember::ops;
  auto gpu = ember::cuda::make_cuda_backend();
  auto ref = ember::reference::make_reference_backend();
  std::mt19937 rng(29);
  // Two sequences over 16-cell pages: row 0 owns pages {3, 0, 4} (40 cells, cell 7
  // evicted), row 1 owns {1, 2} (20 cells); queries at the ends of both.
  const int page = 16, n_slots = 5 * page, n_head = 8, n_kv = 2;
  const int32_t pages0[] = {3, 0, 4}, pages1[] = {1, 2};
  std::vector<int32_t> slots, cell_pos(2 * 48, -1);
  for (int c = 0; c < 40; ++c) slots.push_back(pages0[c / page] * page + c % page), cell_pos[size_t(c)] = c == 7 ? -1 : c;
  for (int c = 0; c < 20; ++c) slots.push_back(pages1[c / page] * page + c % page), cell_pos[size_t(48 + c)] = c;
  const std::vector<int32_t> pos = {35, 36, 37, 38, 39, 18, 19}, seq = {0, 0, 0, 0, 0, 1, 1};
  HostTensor table = matrix<int32_t>(DType::i32, 2, 3, {3, 0, 4, 1, 2, 0});
  HostTensor cells = matrix<int32_t>(DType::i32, 2, 48, cell_pos);
  for (int hd : {64, 128}) {
    for (DType storage : {DType::f32, DType::f16, DType::kv_q8_g32, DType::kv_q8_g64, DType::kv_q4_g32,
                          DType::kv_q4_g64, DType::kv_q4o_g32, DType::kv_q4o_g64}) {
      for (float softcap : {0.0f, 30.0f}) {
        for (int window : {0, 9}) {
          INFO(ember::quant::type_name(storage) << " head_dim " << hd << " softcap " << softcap << " window " << window);
          const HostTensor k_new = random_f32(60, n_kv * hd, rng), v_new = random_f32(60, n_kv * hd, rng);
          const HostTensor q = random_f32(7, n_head * hd, rng, -3, 3);
          std::vector<float> results[2], scores[2];
          int k = 0;
          for (ember::backend::Backend* be : {static_cast<ember::backend::Backend*>(gpu.get()), ref.get()}) {
            Placed p{*be, {}};
            auto [kc, vc] = stored_kv(p, storage, n_slots, k_new, v_new, slots);
            ember::backend::AttentionParams ap;
            ap.n_head = n_head, ap.n_head_kv = n_kv, ap.head_dim = hd, ap.scale = 1.0f / std::sqrt(float(hd));
            ap.window = window, ap.softcap = softcap, ap.page_tokens = page;
            ap.token_pos = p.put(i32(pos)), ap.token_seq = p.put(i32(seq)), ap.page_table = p.put(table);
            ap.seq_cells = p.put(i32({40, 20}));
            ap.cell_pos = p.put(cells);
            ap.score_acc = p.zeros(DType::f32, 2, 48 * n_kv);
            const auto out = p.put(HostTensor{DType::f32, 7, n_head * hd, std::vector<std::byte>(size_t(7 * n_head * hd) * 4, std::byte{0xff})});
            ops::attention(p.be, p.put(q), kc, vc, ap, out);
            results[k] = p.get(out);
            scores[k++] = p.get(ap.score_acc);
          }
          // The kernel computes in f32 from the exactly decoded cache; over an F16 cache it
          // rounds queries and probabilities to F16 as the CPU backend and llama.cpp do, and
          // takes the CPU backend's tolerance there (tests/backend/test_ops.cpp).
          const bool f16 = storage == DType::f16;
          CHECK(max_abs_diff(results[0], results[1]) <= (f16 ? 2e-3 : 1e-4) * max_abs(results[1]));
          CHECK(max_abs_diff(scores[0], scores[1]) <= (f16 ? 1e-3 : 1e-5) * 7 * n_head);
        }
      }
    }
  }
}

TEST_CASE("CUDA forward passes of the golden models agree with llama.cpp and the CPU", "[cuda]") {
  namespace fs = std::filesystem;
  if (!fs::exists(ember::test::golden_dir())) {
    WARN("no golden models under " << ember::test::golden_dir() << "; skipped");
    return;
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ember::test::golden_dir()))
    if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  REQUIRE(!names.empty());
  auto gpu = ember::cuda::make_cuda_backend();
  ember::cpu::CpuBackendOptions cpu_options;
  cpu_options.threads = 2;
  auto cpu = ember::cpu::make_cpu_backend(cpu_options);
  for (const std::string& name : names) {
    // One section per model: `test_cuda "CUDA forward*" -c llama-Q4_0` runs one alone
    // (a kernel fault poisons the CUDA context for the rest of the process).
    DYNAMIC_SECTION(name) {
    const ember::test::GoldenCase g = ember::test::read_golden(ember::test::golden_dir(), name);
    const std::vector<float> on_gpu = ember::test::run_golden(name, *gpu, g);
    const std::vector<float> on_cpu = ember::test::run_golden(name, *cpu, g);
    const auto vs_llama = ember::test::compare_logits(on_gpu, g.logits, g.vocab);
    const auto vs_cpu = ember::test::compare_logits(on_gpu, on_cpu, g.vocab);
    std::printf("cuda golden %-14s vs llama.cpp maxrel %.3e argmax %5.1f %%; vs CPU maxrel %.3e\n", name.c_str(),
                vs_llama.maxrel, 100.0 * vs_llama.argmax_agree, vs_cpu.maxrel);
    // The golden tolerances of the non-bit-identical formats (test_golden.cpp), and the
    // bound against the CPU backend: 1e-3 for float weights. With quantized weights every
    // matmul rounds its activations to 8 bits, so a float difference of one ulp anywhere
    // before it (a sum in another order) can move an activation by a whole step; over the
    // layers of these random models that reaches 1e-2. The reference backend, which keeps
    // the matmul contract to the byte but adds in plain order, is as far from the CPU
    // backend: 1.1e-2 to 2.6e-2 on these files (docs/cuda.md). Those formats are held to 3e-2.
    CHECK(vs_llama.maxrel <= 5e-2);
    CHECK(vs_llama.argmax_agree >= 0.90);
    const bool float_weights = name.find("F16") != std::string::npos || name.find("F32") != std::string::npos;
    CHECK(vs_cpu.maxrel <= (float_weights ? 1e-3 : 3e-2));
    }
  }
}
