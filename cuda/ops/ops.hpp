// Launchers of the CUDA kernels (one file per op family under cuda/ops/), called by
// the backend (cuda/cuda_backend.cpp) after ops::<op>() has checked types and shapes.
// Each enqueues on `stream` and returns without waiting; launch failures throw
// ember::Error with CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.hpp"
#include "backend/tensor.hpp"

namespace ember::cuda {

// Throws ErrorCode::backend naming `what` when `status` is not cudaSuccess.
void check(cudaError_t status, const char* what);

// Throws ErrorCode::unsupported: `op` has no kernel for tensors of `type`. (Defined in
// cuda_backend.cpp: fmt's compile-time format checks do not build under nvcc.)
[[noreturn]] void unsupported_type(const char* op, quant::DType type);

// Throws ErrorCode::unsupported: `op` handles heads of at most `max` values.
[[noreturn]] void unsupported_head_dim(const char* op, int head_dim, int max);

// Device address of a tensor's first byte.
inline std::byte* device_ptr(const backend::Tensor& t) {
  return static_cast<std::byte*>(t.buffer->device_data()) + t.offset;
}

// Device memory a backend keeps for the ops' temporaries (quantized activations): grown
// when a call needs more, never shrunk, so steady decoding allocates nothing.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { cudaFree(data_); }
  // At least `bytes` of device memory, valid for work enqueued on `stream` from now on.
  // Growing waits for `stream` first (earlier work may still read the old memory).
  void* reserve(cudaStream_t stream, size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// out = x * weights^T under the matmul contract (backend/ops/matmul.hpp): x converted to
// quant::activation_type(weights.type) with the CPU's bytes, then block dot products
// (cuda/device/block_math.hpp) summed per row in the kernel's order.
void matmul(cudaStream_t stream, const backend::Tensor& weights, const backend::Tensor& x,
            const backend::Tensor& out, Scratch& scratch);

// The small ops, with the shapes of backend/ops/*.hpp: exact for add, mul, scale and
// copy_rows; within float rounding of the reference for glu, rms_norm and rope.
void add(cudaStream_t stream, const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out);
void mul(cudaStream_t stream, const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out);
void scale(cudaStream_t stream, const backend::Tensor& x, float factor, const backend::Tensor& out);
void glu(cudaStream_t stream, const backend::Tensor& gate, const backend::Tensor& up, backend::Activation activation,
         const backend::Tensor& out);
void rms_norm(cudaStream_t stream, const backend::Tensor& x, const backend::Tensor& weight, float eps,
              const backend::Tensor& out);
void rope(cudaStream_t stream, const backend::Tensor& x, const backend::Tensor& positions,
          const backend::RopeParams& params, const backend::Tensor& out);
void copy_rows(cudaStream_t stream, const backend::Tensor& tensor, const backend::Tensor& src_rows,
               const backend::Tensor& dst_rows);

// attention with the contract of backend::Backend::attention (paged cells, GQA, window,
// softcap, H2O score_acc), every KV storage type, head_dim <= 256: split-K over cells
// for F16/F32 caches (scores, statistics and partial outputs in `scratch`), else one
// thread block per (token, head) walking the cells (cuda/ops/attention.cu).
void attention(cudaStream_t stream, const backend::Tensor& q, const backend::Tensor& k_cache,
               const backend::Tensor& v_cache, const backend::AttentionParams& params, const backend::Tensor& out,
               Scratch& scratch);

// out[i] = dequantize(table[ids[i]]), bit-identical to quant::dequantize_row
// (cuda/device/block_math.hpp). Every type ember reads (F32, F16, BF16, block formats).
void get_rows(cudaStream_t stream, const backend::Tensor& table, const backend::Tensor& ids,
              const backend::Tensor& out);

// cache[slots[t]] = convert(src[t]) and out[t] = decode(cache[slots[t]]) for F32, F16
// and the quantized KV types, with the bytes and values of lib/quant/kv_formats.cpp
// (cuda/device/kv_math.hpp).
void kv_store(cudaStream_t stream, const backend::Tensor& src, const backend::Tensor& cache,
              const backend::Tensor& slots);
void kv_load(cudaStream_t stream, const backend::Tensor& cache, const backend::Tensor& slots,
             const backend::Tensor& out);

}  // namespace ember::cuda
