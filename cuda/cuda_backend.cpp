#include <cuda_runtime.h>

#include "common/fail.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
    fail(ErrorCode::backend, "CUDA error in {}: {} ({})", what, cudaGetErrorName(status), cudaGetErrorString(status));
  }
}

void* Scratch::reserve(cudaStream_t stream, size_t bytes) {
  if (bytes <= bytes_) return data_;
  check(cudaStreamSynchronize(stream), "scratch growth (wait)");
  cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
  const size_t want = bytes < (size_t(1) << 20) ? size_t(1) << 20 : bytes + bytes / 2;
  if (cudaMalloc(&data_, want) != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    fail(ErrorCode::out_of_memory, "cannot allocate {} bytes of GPU scratch memory", want);
  }
  bytes_ = want;
  return data_;
}

void unsupported_type(const char* op, quant::DType type) {
  fail(ErrorCode::unsupported, "the CUDA backend has no {} kernel for {} tensors", op, quant::type_name(type));
}

void unsupported_head_dim(const char* op, int head_dim, int max) {
  fail(ErrorCode::unsupported, "the CUDA backend's {} handles heads of at most {} values, not {}", op, max, head_dim);
}

namespace {

class DeviceBuffer final : public backend::Buffer {
 public:
  explicit DeviceBuffer(size_t bytes) : size_(bytes) {
    if (cudaMalloc(&data_, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
      fail(ErrorCode::out_of_memory, "cannot allocate {:.1f} MiB of GPU memory ({:.1f} MiB free of {:.1f} MiB)",
           double(bytes) / 1048576.0, double(free_bytes) / 1048576.0, double(total_bytes) / 1048576.0);
    }
  }
  ~DeviceBuffer() override { cudaFree(data_); }
  size_t size() const override { return size_; }
  std::byte* host_data() override { return nullptr; }
  void* device_data() override { return data_; }

 private:
  void* data_ = nullptr;
  size_t size_;
};

class CudaBackend final : public backend::Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);  // nothing enqueued may outlive the scratch memory
    cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "cuda"; }
  // The weight types with device kernels (ops/matmul.cu, ops/get_rows.cu): the GGUF
  // types; ember's own formats of the registry (Q4_G128, Q4_G64) have none yet.
  bool supports(backend::Op op, quant::DType type) const override {
    if (op == backend::Op::matmul || op == backend::Op::get_rows) {
      using quant::DType;
      switch (type) {
        case DType::f32: case DType::f16: case DType::bf16: case DType::q8_0: case DType::q4_0: case DType::q4_1:
        case DType::q5_0: case DType::q5_1: case DType::q4_k: case DType::q5_k: case DType::q6_k: return true;
        default: return false;
      }
    }
    return Backend::supports(op, type);
  }
  std::unique_ptr<backend::Buffer> allocate(size_t bytes) override { return std::make_unique<DeviceBuffer>(bytes); }
  std::shared_ptr<backend::Buffer> wrap_host(std::span<const std::byte> bytes, std::shared_ptr<const void>) override {
    auto buffer = std::make_shared<DeviceBuffer>(bytes.size());
    check(cudaMemcpy(buffer->device_data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload weights");
    return buffer;
  }
  void upload(const backend::Tensor& dst, const void* src) override {
    check(cudaMemcpyAsync(device_ptr(dst), src, dst.bytes(), cudaMemcpyHostToDevice, stream_), "upload");
  }
  void download(const backend::Tensor& src, void* dst) override {
    check(cudaMemcpyAsync(dst, device_ptr(src), src.bytes(), cudaMemcpyDeviceToHost, stream_), "download");
    synchronize();
  }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  std::optional<DeviceMemory> device_memory() const override {
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return DeviceMemory{free_bytes, total_bytes};
  }

  void get_rows(const backend::Tensor& table, const backend::Tensor& ids, const backend::Tensor& out) override {
    cuda::get_rows(stream_, table, ids, out);
  }
  void matmul(const backend::Tensor& weights, const backend::Tensor& x, const backend::Tensor& out) override {
    if (weights.layout != 0)
      fail(ErrorCode::invalid_argument, "matmul: the CUDA backend reads no repacked weights (layout {})",
           weights.layout);
    cuda::matmul(stream_, weights, x, out, scratch_);
  }
  void add(const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out) override {
    cuda::add(stream_, a, b, out);
  }
  void mul(const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out) override {
    cuda::mul(stream_, a, b, out);
  }
  void scale(const backend::Tensor& x, float factor, const backend::Tensor& out) override {
    cuda::scale(stream_, x, factor, out);
  }
  void rms_norm(const backend::Tensor& x, const backend::Tensor& weight, float eps,
                const backend::Tensor& out) override {
    cuda::rms_norm(stream_, x, weight, eps, out);
  }
  void rope(const backend::Tensor& x, const backend::Tensor& positions, const backend::RopeParams& params,
            const backend::Tensor& out) override {
    cuda::rope(stream_, x, positions, params, out);
  }
  void glu(const backend::Tensor& gate, const backend::Tensor& up, backend::Activation activation,
           const backend::Tensor& out) override {
    cuda::glu(stream_, gate, up, activation, out);
  }
  void kv_load(const backend::Tensor& cache, const backend::Tensor& slots, const backend::Tensor& out) override {
    cuda::kv_load(stream_, cache, slots, out);
  }
  void copy_rows(const backend::Tensor& tensor, const backend::Tensor& src_rows,
                 const backend::Tensor& dst_rows) override {
    cuda::copy_rows(stream_, tensor, src_rows, dst_rows);
  }
  void kv_store(const backend::Tensor& src, const backend::Tensor& cache, const backend::Tensor& slots) override {
    cuda::kv_store(stream_, src, cache, slots);
  }
  void attention(const backend::Tensor& q, const backend::Tensor& k_cache, const backend::Tensor& v_cache,
                 const backend::AttentionParams& params, const backend::Tensor& out) override {
    // The kernels keep their softmax statistics in scratch and never write them out.
    if (params.lse.rows > 0 || params.prior_out.rows > 0)
      fail(ErrorCode::unsupported, "attention: lse and prior outputs are not implemented on CUDA");
    if (params.exclude_recent > 0)
      fail(ErrorCode::unsupported, "attention: exclude_recent is not implemented on CUDA");
    cuda::attention(stream_, q, k_cache, v_cache, params, out, attention_scratch_);
  }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  Scratch scratch_;            // temporaries of the ops (quantized activations)
  Scratch attention_scratch_;  // attention's scores, statistics and partial outputs
};

}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<backend::Backend> make_cuda_backend(int device) {
  const int n = device_count();
  if (n == 0) fail(ErrorCode::unsupported, "no CUDA device is available");
  if (device < 0 || device >= n) fail(ErrorCode::invalid_argument, "CUDA device {} does not exist ({} present)", device, n);
  return std::make_unique<CudaBackend>(device);
}

}  // namespace ember::cuda
