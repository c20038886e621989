// The small ops on the GPU: add, mul (b broadcast when it has one row), scale, the
// gated activations, rms_norm (one thread block per row, reduced in f32), rope (one
// thread per rotated pair; angles in double as the reference computes them; in place
// allowed) and copy_rows (one thread block per copied row, byte by byte).
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

template <int kOp>  // 0: add, 1: mul
__global__ void binary_kernel(const float* a, size_t as, const float* b, size_t bs, bool b_row, float* out,
                              size_t os, int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float x = a[size_t(r) * as + size_t(c)], y = b[(b_row ? 0 : size_t(r) * bs) + size_t(c)];
  out[size_t(r) * os + size_t(c)] = kOp == 0 ? x + y : x * y;
}

__global__ void scale_kernel(const float* x, size_t xs, float factor, float* out, size_t os, int64_t rows,
                             int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[size_t(r) * os + size_t(c)] = x[size_t(r) * xs + size_t(c)] * factor;
}

__global__ void glu_kernel(const float* g, size_t gs, const float* u, size_t us, bool silu, float* out, size_t os,
                           int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float x = g[size_t(r) * gs + size_t(c)];
  float act;
  if (silu) {
    act = x / (1.0f + expf(-x));
  } else {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    act = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
  out[size_t(r) * os + size_t(c)] = act * u[size_t(r) * us + size_t(c)];
}

__global__ void rms_norm_kernel(const float* x, size_t xs, const float* w, float eps, float* out, size_t os,
                                int64_t cols) {
  __shared__ float partial[kThreads];
  const float* row = x + size_t(blockIdx.x) * xs;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) sum += row[c] * row[c];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / float(cols) + eps);
  float* o = out + size_t(blockIdx.x) * os;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) o[c] = row[c] * inv_rms * (w ? w[c] : 1.0f);
}

// Grid: x over (head, pair) of a token, y over tokens.
__global__ void rope_kernel(const float* x, size_t xs, const int32_t* positions, const float* factors,
                            backend::RopeParams p, float* out, size_t os, int64_t n_tok) {
  const int half = p.n_rot / 2, pass = p.head_dim - p.n_rot;
  const int64_t per_head = half + pass;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= per_head * p.n_head) return;
  const int h = int(i / per_head), k = int(i % per_head);
  for (int64_t t = blockIdx.y; t < n_tok; t += gridDim.y) {
    const float* hs = x + size_t(t) * xs + size_t(h) * p.head_dim;
    float* hd = out + size_t(t) * os + size_t(h) * p.head_dim;
    if (k >= half) {  // a dimension that does not rotate
      hd[p.n_rot + (k - half)] = hs[p.n_rot + (k - half)];
      continue;
    }
    const double pos = double(positions[t]) * p.freq_scale;
    const double factor = factors ? double(factors[k]) : 1.0;
    const double theta = pos * pow(double(p.freq_base), -2.0 * k / p.n_rot) / factor;
    double s, c;
    sincos(theta, &s, &c);
    c *= p.mscale;
    s *= p.mscale;
    const int i0 = p.mode == backend::RopeMode::normal ? 2 * k : k;
    const int i1 = p.mode == backend::RopeMode::normal ? 2 * k + 1 : k + half;
    const double a = hs[i0], b = hs[i1];
    hd[i0] = float(a * c - b * s);
    hd[i1] = float(a * s + b * c);
  }
}

__global__ void copy_rows_kernel(uint8_t* base, size_t stride, size_t row_bytes, const int32_t* src,
                                 const int32_t* dst) {
  const uint8_t* from = base + size_t(src[blockIdx.x]) * stride;
  uint8_t* to = base + size_t(dst[blockIdx.x]) * stride;
  for (size_t i = threadIdx.x; i < row_bytes; i += kThreads) to[i] = from[i];
}

const float* f32(const backend::Tensor& t) { return reinterpret_cast<const float*>(device_ptr(t)); }
float* f32_out(const backend::Tensor& t) { return reinterpret_cast<float*>(device_ptr(t)); }
size_t floats(const backend::Tensor& t) { return t.row_stride / sizeof(float); }

constexpr int64_t kMaxGridRows = 65535;

}  // namespace

void add(cudaStream_t stream, const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out) {
  if (a.rows * a.cols == 0) return;
  binary_kernel<0><<<blocks_for(a.rows * a.cols), kThreads, 0, stream>>>(
      f32(a), floats(a), f32(b), floats(b), b.rows == 1, f32_out(out), floats(out), a.rows, a.cols);
  check(cudaGetLastError(), "add kernel launch");
}

void mul(cudaStream_t stream, const backend::Tensor& a, const backend::Tensor& b, const backend::Tensor& out) {
  if (a.rows * a.cols == 0) return;
  binary_kernel<1><<<blocks_for(a.rows * a.cols), kThreads, 0, stream>>>(
      f32(a), floats(a), f32(b), floats(b), b.rows == 1, f32_out(out), floats(out), a.rows, a.cols);
  check(cudaGetLastError(), "mul kernel launch");
}

void scale(cudaStream_t stream, const backend::Tensor& x, float factor, const backend::Tensor& out) {
  if (x.rows * x.cols == 0) return;
  scale_kernel<<<blocks_for(x.rows * x.cols), kThreads, 0, stream>>>(f32(x), floats(x), factor, f32_out(out),
                                                                     floats(out), x.rows, x.cols);
  check(cudaGetLastError(), "scale kernel launch");
}

void glu(cudaStream_t stream, const backend::Tensor& gate, const backend::Tensor& up, backend::Activation activation,
         const backend::Tensor& out) {
  if (gate.rows * gate.cols == 0) return;
  glu_kernel<<<blocks_for(gate.rows * gate.cols), kThreads, 0, stream>>>(
      f32(gate), floats(gate), f32(up), floats(up), activation == backend::Activation::silu, f32_out(out),
      floats(out), gate.rows, gate.cols);
  check(cudaGetLastError(), "glu kernel launch");
}

void rms_norm(cudaStream_t stream, const backend::Tensor& x, const backend::Tensor& weight, float eps,
              const backend::Tensor& out) {
  if (x.rows == 0) return;
  // One thread block per row: rows beyond the grid limit go in further launches.
  for (int64_t r0 = 0; r0 < x.rows; r0 += kMaxGridRows) {
    const int64_t n = x.rows - r0 < kMaxGridRows ? x.rows - r0 : kMaxGridRows;
    rms_norm_kernel<<<unsigned(n), kThreads, 0, stream>>>(f32(x) + size_t(r0) * floats(x), floats(x),
                                                          weight.empty() ? nullptr : f32(weight), eps,
                                                          f32_out(out) + size_t(r0) * floats(out), floats(out), x.cols);
    check(cudaGetLastError(), "rms_norm kernel launch");
  }
}

void rope(cudaStream_t stream, const backend::Tensor& x, const backend::Tensor& positions,
          const backend::RopeParams& params, const backend::Tensor& out) {
  if (x.rows == 0 || params.n_head == 0) return;
  const int64_t work = int64_t(params.n_rot / 2 + params.head_dim - params.n_rot) * params.n_head;
  const dim3 grid(blocks_for(work), unsigned(x.rows < kMaxGridRows ? x.rows : kMaxGridRows));
  backend::RopeParams p = params;
  p.freq_factors = {};  // passed as a pointer; the kernel takes the rest by value
  rope_kernel<<<grid, kThreads, 0, stream>>>(
      f32(x), floats(x), reinterpret_cast<const int32_t*>(device_ptr(positions)),
      params.freq_factors.empty() ? nullptr : f32(params.freq_factors), p, f32_out(out), floats(out), x.rows);
  check(cudaGetLastError(), "rope kernel launch");
}

void copy_rows(cudaStream_t stream, const backend::Tensor& tensor, const backend::Tensor& src_rows,
               const backend::Tensor& dst_rows) {
  for (int64_t r0 = 0; r0 < src_rows.rows; r0 += kMaxGridRows) {
    const int64_t n = src_rows.rows - r0 < kMaxGridRows ? src_rows.rows - r0 : kMaxGridRows;
    copy_rows_kernel<<<unsigned(n), kThreads, 0, stream>>>(
        reinterpret_cast<uint8_t*>(device_ptr(tensor)), tensor.row_stride, tensor.row_bytes(),
        reinterpret_cast<const int32_t*>(device_ptr(src_rows)) + r0,
        reinterpret_cast<const int32_t*>(device_ptr(dst_rows)) + r0);
    check(cudaGetLastError(), "copy_rows kernel launch");
  }
}

}  // namespace ember::cuda
