// The CUDA backend: device memory round trips, get_rows against the reference, and the
// clear error of the ops not implemented yet. Skips (exit code 4) without a CUDA device.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/ops/get_rows.hpp"
#include "backend/ops/matmul.hpp"
#include "common/catch.hpp"
#include "cuda/cuda_backend.hpp"
#include "ember/error.hpp"
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

TEST_CASE("CUDA ops not implemented yet report unsupported", "[cuda]") {
  auto be = ember::cuda::make_cuda_backend();
  auto buffer = be->allocate(3 * 32 * 32 * sizeof(float));
  const auto w = ember::backend::make_tensor(*buffer, 0, ember::quant::DType::f32, 32, 32);
  const auto x = ember::backend::make_tensor(*buffer, 32 * 32 * 4, ember::quant::DType::f32, 32, 32);
  const auto y = ember::backend::make_tensor(*buffer, 2 * 32 * 32 * 4, ember::quant::DType::f32, 32, 32);
  try {
    ember::ops::matmul(*be, w, x, y);
    FAIL("no error");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::unsupported);
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
      bad += std::memcmp(want.data(), got.data() + k * cols, cols * sizeof(float)) != 0;
    }
    CHECK(bad == 0);
  }
}
