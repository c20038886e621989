// Shared helpers of the op tests: host-side tensors, placing them on a backend, and
// running one op on the reference and the CPU backend (in the spirit of ggml's
// test-backend-ops).
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "backend/ops/kv_store.hpp"
#include "backend/reference/reference_backend.hpp"
#include "common/catch.hpp"
#include "cpu/cpu_backend.hpp"
#include "quant/quant.hpp"

namespace ember::test {

using backend::Backend;
using backend::DType;
using backend::Tensor;

// A tensor on a backend with host-side contents.
struct HostTensor {
  DType type = DType::f32;
  int64_t rows = 0, cols = 0;
  std::vector<std::byte> bytes;
};

inline HostTensor random_f32(int64_t rows, int64_t cols, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  HostTensor t{DType::f32, rows, cols, std::vector<std::byte>(size_t(rows * cols) * 4)};
  auto* f = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t i = 0; i < rows * cols; ++i) f[i] = dist(rng);
  return t;
}

inline HostTensor i32(const std::vector<int32_t>& values) {
  HostTensor t{DType::i32, int64_t(values.size()), 1, std::vector<std::byte>(values.size() * 4)};
  std::memcpy(t.bytes.data(), values.data(), values.size() * 4);
  return t;
}

// A [rows, cols] i32 or f32 tensor from row-major values.
template <typename T>
HostTensor matrix(DType type, int64_t rows, int64_t cols, const std::vector<T>& values) {
  REQUIRE(values.size() == size_t(rows * cols));
  HostTensor t{type, rows, cols, std::vector<std::byte>(values.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline HostTensor quantized(DType type, const HostTensor& f32) {
  HostTensor t{type, f32.rows, f32.cols, std::vector<std::byte>(quant::row_bytes(type, f32.cols) * size_t(f32.rows))};
  for (int64_t r = 0; r < f32.rows; ++r)
    quant::quantize_row(type, reinterpret_cast<const float*>(f32.bytes.data()) + r * f32.cols,
                        t.bytes.data() + size_t(r) * quant::row_bytes(type, f32.cols), f32.cols);
  return t;
}

// Owns the backend copies of host tensors for one backend.
struct Placed {
  Backend& be;
  std::vector<std::unique_ptr<backend::Buffer>> buffers;
  Tensor put(const HostTensor& h) {
    buffers.push_back(be.allocate(h.bytes.size()));
    Tensor t = backend::make_tensor(*buffers.back(), 0, h.type, h.rows, h.cols);
    be.upload(t, h.bytes.data());
    return t;
  }
  Tensor zeros(DType type, int64_t rows, int64_t cols) {
    HostTensor h{type, rows, cols, std::vector<std::byte>(quant::row_bytes(type, cols) * size_t(rows))};
    return put(h);
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> out(size_t(t.rows * t.cols));
    be.download(t, out.data());
    return out;
  }
  std::vector<std::byte> get_bytes(const Tensor& t) {
    std::vector<std::byte> out(t.bytes());
    be.download(t, out.data());
    return out;
  }
};

// K and V caches of type `storage` (V of `v_storage` where given), [n_slots, k_new.cols],
// holding the rows of k_new and v_new at `slots` (stored with the backend's kv_store).
inline std::pair<Tensor, Tensor> stored_kv(Placed& p, DType storage, int64_t n_slots, const HostTensor& k_new,
                                           const HostTensor& v_new, const std::vector<int32_t>& slots,
                                           std::optional<DType> v_storage = std::nullopt) {
  const Tensor kc = p.zeros(storage, n_slots, k_new.cols);
  const Tensor vc = p.zeros(v_storage.value_or(storage), n_slots, k_new.cols);
  const Tensor t_slots = p.put(i32(slots));
  ops::kv_store(p.be, p.put(k_new), kc, t_slots);
  ops::kv_store(p.be, p.put(v_new), vc, t_slots);
  return {kc, vc};
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}
inline double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, double(std::abs(v)));
  return m;
}

// Runs `op` on the reference backend.
template <typename Op>
auto on_reference(Op op) {
  auto ref = reference::make_reference_backend();
  Placed a{*ref, {}};
  return op(a);
}

// Runs `op` on the CPU backend; `isa` forces the kernel level (default: the best this
// machine has).
template <typename Op>
auto on_cpu(int threads, Op op, std::optional<cpu::Isa> isa = std::nullopt) {
  auto cpu = cpu::make_cpu_backend({.threads = threads, .isa = isa});
  Placed b{*cpu, {}};
  return op(b);
}

// Runs `op` on both backends and returns (reference result, cpu result).
template <typename Op>
auto both(int threads, Op op, std::optional<cpu::Isa> isa = std::nullopt) {
  auto r = on_reference(op);
  auto c = on_cpu(threads, op, isa);
  return std::pair{std::move(r), std::move(c)};
}

}  // namespace ember::test
