// get_rows on the GPU: one thread per output value, dequantized by the block arithmetic
// shared with the host tests (cuda/device/block_math.hpp), so each row equals
// quant::dequantize_row of the selected table row bit for bit.
#include "cuda/device/block_math.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

using quant::DType;

// Value c of a row, per format: kValues values in blocks of kBytes.
struct F32 {
  static constexpr int kValues = 1, kBytes = 4;
  static __device__ float value(const uint8_t* b, int) { return bits_to_float(dev::load_u32(b)); }
};
struct F16 {
  static constexpr int kValues = 1, kBytes = 2;
  static __device__ float value(const uint8_t* b, int) { return dev::half_at(b); }
};
struct BF16 {
  static constexpr int kValues = 1, kBytes = 2;
  static __device__ float value(const uint8_t* b, int) { return dev::bf16_to_float(dev::load_u16(b)); }
};
#define EMBER_BLOCK_FORMAT(Name, values, bytes, fn)                                    \
  struct Name {                                                                         \
    static constexpr int kValues = values, kBytes = bytes;                              \
    static __device__ float value(const uint8_t* b, int i) { return dev::fn(b, i); }    \
  };
EMBER_BLOCK_FORMAT(Q4_0, 32, dev::kQ4_0Bytes, q4_0_value)
EMBER_BLOCK_FORMAT(Q4_1, 32, dev::kQ4_1Bytes, q4_1_value)
EMBER_BLOCK_FORMAT(Q5_0, 32, dev::kQ5_0Bytes, q5_0_value)
EMBER_BLOCK_FORMAT(Q5_1, 32, dev::kQ5_1Bytes, q5_1_value)
EMBER_BLOCK_FORMAT(Q8_0, 32, dev::kQ8_0Bytes, q8_0_value)
EMBER_BLOCK_FORMAT(Q4_K, 256, dev::kQ4_KBytes, q4_k_value)
EMBER_BLOCK_FORMAT(Q5_K, 256, dev::kQ5_KBytes, q5_k_value)
EMBER_BLOCK_FORMAT(Q6_K, 256, dev::kQ6_KBytes, q6_k_value)
#undef EMBER_BLOCK_FORMAT

constexpr int kThreads = 256;
constexpr int kMaxGridRows = 65535;

// Grid: x over the columns, y over output rows (striding when there are more rows).
template <class F>
__global__ void get_rows_kernel(const uint8_t* table, size_t table_stride, const int32_t* ids, float* out,
                                size_t out_stride, int64_t cols, int64_t rows) {
  const int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint8_t* row = table + size_t(ids[r]) * table_stride;
    out[size_t(r) * out_stride + size_t(c)] = F::value(row + size_t(c / F::kValues) * F::kBytes, int(c % F::kValues));
  }
}

template <class F>
void launch(cudaStream_t stream, const backend::Tensor& table, const backend::Tensor& ids,
            const backend::Tensor& out) {
  if (ids.rows == 0 || table.cols == 0) return;
  const dim3 grid(unsigned((table.cols + kThreads - 1) / kThreads),
                  unsigned(ids.rows < kMaxGridRows ? ids.rows : kMaxGridRows));
  get_rows_kernel<F><<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const uint8_t*>(device_ptr(table)), table.row_stride,
      reinterpret_cast<const int32_t*>(device_ptr(ids)), reinterpret_cast<float*>(device_ptr(out)),
      out.row_stride / sizeof(float), table.cols, ids.rows);
  check(cudaGetLastError(), "get_rows kernel launch");
}

}  // namespace

void get_rows(cudaStream_t stream, const backend::Tensor& table, const backend::Tensor& ids,
              const backend::Tensor& out) {
  switch (table.type) {
    case DType::f32: return launch<F32>(stream, table, ids, out);
    case DType::f16: return launch<F16>(stream, table, ids, out);
    case DType::bf16: return launch<BF16>(stream, table, ids, out);
    case DType::q4_0: return launch<Q4_0>(stream, table, ids, out);
    case DType::q4_1: return launch<Q4_1>(stream, table, ids, out);
    case DType::q5_0: return launch<Q5_0>(stream, table, ids, out);
    case DType::q5_1: return launch<Q5_1>(stream, table, ids, out);
    case DType::q8_0: return launch<Q8_0>(stream, table, ids, out);
    case DType::q4_k: return launch<Q4_K>(stream, table, ids, out);
    case DType::q5_k: return launch<Q5_K>(stream, table, ids, out);
    case DType::q6_k: return launch<Q6_K>(stream, table, ids, out);
    default:
      unsupported_type("get_rows", table.type);
  }
}

}  // namespace ember::cuda
