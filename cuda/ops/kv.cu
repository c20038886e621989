// kv_store and kv_load on the GPU. Quantized caches get one thread per group, running
// the formats' reference arithmetic (cuda/device/kv_math.hpp), so a cache row written
// here holds the bytes the CPU backend writes; F16 rounds to nearest even as the CPU does.
#include <type_traits>

#include "cuda/device/kv_math.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

using quant::DType;

enum class Kv { f32, f16, q8, q4, q4o };

constexpr int kThreads = 128;
constexpr int kMaxGridRows = 65535;

struct KvType {
  Kv kind;
  int group;  // values per unit of work: 1 for f32/f16, else the format's group
  int bytes;  // bytes per unit
};

// Grid: x over the units of a row, y over tokens (striding when there are more).
template <Kv kKind>
__global__ void kv_store_kernel(const float* src, size_t src_stride, uint8_t* cache, size_t cache_stride,
                                const int32_t* slots, int64_t units, int group, int bytes, int64_t n_tok) {
  const int64_t u = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (u >= units) return;
  for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
    const float* x = src + size_t(t) * src_stride + size_t(u) * group;
    uint8_t* out = cache + size_t(slots[t]) * cache_stride + size_t(u) * bytes;
    if constexpr (kKind == Kv::f32) {
      reinterpret_cast<float*>(out)[0] = x[0];
    } else if constexpr (kKind == Kv::f16) {
      dev::put_u16(out, dev::float_to_half(x[0]));
    } else if constexpr (kKind == Kv::q8) {
      dev::kv_q8_quantize(x, out, group);
    } else if constexpr (kKind == Kv::q4) {
      dev::kv_q4_quantize(x, out, out + 4, group);
    } else {
      dev::kv_q4o_quantize(x, out, group);
    }
  }
}

template <Kv kKind>
__global__ void kv_load_kernel(const uint8_t* cache, size_t cache_stride, const int32_t* slots, float* out,
                               size_t out_stride, int64_t units, int group, int bytes, int64_t n) {
  const int64_t u = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (u >= units) return;
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    const uint8_t* in = cache + size_t(slots[t]) * cache_stride + size_t(u) * bytes;
    float* y = out + size_t(t) * out_stride + size_t(u) * group;
    if constexpr (kKind == Kv::f32) {
      y[0] = bits_to_float(dev::load_u32(in));
    } else if constexpr (kKind == Kv::f16) {
      y[0] = dev::half_at(in);
    } else if constexpr (kKind == Kv::q8) {
      for (int j = 0; j < group; ++j) y[j] = dev::kv_q8_value(in, j);
    } else {
      const uint8_t* q4 = kKind == Kv::q4o ? in + 3 * dev::kKvOutliers : in;
      float v[64];
      for (int j = 0; j < group; ++j) v[j] = dev::kv_q4_stored(q4, j, group);
      if constexpr (kKind == Kv::q4o) dev::kv_q4o_add_outliers(in, v, group);
      dev::unrotate_group(v, group);
      for (int j = 0; j < group; ++j) y[j] = v[j];
    }
  }
}

KvType kv_type(DType type, const char* op) {
  switch (type) {
    case DType::f32: return {Kv::f32, 1, 4};
    case DType::f16: return {Kv::f16, 1, 2};
    case DType::kv_q8_g32: return {Kv::q8, 32, dev::kv_q8_bytes(32)};
    case DType::kv_q8_g64: return {Kv::q8, 64, dev::kv_q8_bytes(64)};
    case DType::kv_q4_g32: return {Kv::q4, 32, dev::kv_q4_bytes(32)};
    case DType::kv_q4_g64: return {Kv::q4, 64, dev::kv_q4_bytes(64)};
    case DType::kv_q4o_g32: return {Kv::q4o, 32, dev::kv_q4o_bytes(32)};
    case DType::kv_q4o_g64: return {Kv::q4o, 64, dev::kv_q4o_bytes(64)};
    default: unsupported_type(op, type);
  }
}

// Calls f with std::integral_constant<Kv, kind>: one kernel instance per kind.
template <class F>
void with_kind(Kv kind, F&& f) {
  switch (kind) {
    case Kv::f32: return f(std::integral_constant<Kv, Kv::f32>{});
    case Kv::f16: return f(std::integral_constant<Kv, Kv::f16>{});
    case Kv::q8: return f(std::integral_constant<Kv, Kv::q8>{});
    case Kv::q4: return f(std::integral_constant<Kv, Kv::q4>{});
    case Kv::q4o: return f(std::integral_constant<Kv, Kv::q4o>{});
  }
}

dim3 grid_for(int64_t units, int64_t rows) {
  return dim3(unsigned((units + kThreads - 1) / kThreads), unsigned(rows < kMaxGridRows ? rows : kMaxGridRows));
}

}  // namespace

void kv_store(cudaStream_t stream, const backend::Tensor& src, const backend::Tensor& cache,
              const backend::Tensor& slots) {
  const KvType k = kv_type(cache.type, "kv_store");
  const int64_t units = src.cols / k.group;
  if (src.rows == 0 || units == 0) return;
  const auto* x = reinterpret_cast<const float*>(device_ptr(src));
  auto* c = reinterpret_cast<uint8_t*>(device_ptr(cache));
  const auto* s = reinterpret_cast<const int32_t*>(device_ptr(slots));
  const size_t xs = src.row_stride / sizeof(float);
  const dim3 grid = grid_for(units, src.rows);
  with_kind(k.kind, [&](auto kind) {
    kv_store_kernel<decltype(kind)::value><<<grid, kThreads, 0, stream>>>(x, xs, c, cache.row_stride, s, units, k.group,
                                                                          k.bytes, src.rows);
  });
  check(cudaGetLastError(), "kv_store kernel launch");
}

void kv_load(cudaStream_t stream, const backend::Tensor& cache, const backend::Tensor& slots,
             const backend::Tensor& out) {
  const KvType k = kv_type(cache.type, "kv_load");
  const int64_t units = out.cols / k.group;
  if (out.rows == 0 || units == 0) return;
  const auto* c = reinterpret_cast<const uint8_t*>(device_ptr(cache));
  const auto* s = reinterpret_cast<const int32_t*>(device_ptr(slots));
  auto* y = reinterpret_cast<float*>(device_ptr(out));
  const size_t ys = out.row_stride / sizeof(float);
  const dim3 grid = grid_for(units, out.rows);
  with_kind(k.kind, [&](auto kind) {
    kv_load_kernel<decltype(kind)::value><<<grid, kThreads, 0, stream>>>(c, cache.row_stride, s, y, ys, units, k.group,
                                                                         k.bytes, out.rows);
  });
  check(cudaGetLastError(), "kv_load kernel launch");
}

}  // namespace ember::cuda
