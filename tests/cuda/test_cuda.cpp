// The CUDA backend: device memory round trips, and the clear error its ops give
// until they are implemented. Skips (exit code 4) without a CUDA device.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <numeric>
#include <vector>

#include "backend/ops/matmul.hpp"
#include "common/catch.hpp"
#include "cuda/cuda_backend.hpp"
#include "ember/error.hpp"

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
