// attention on the GPU, the first version: correct before fast. One thread block per
// (query token, query head); the block walks the sequence's visible cells in order,
// decodes the key and value of its kv head into shared memory (per group for the
// rotated INT4 formats), takes the score's dot product with a tree reduction and keeps
// an online softmax (cuda/device/block_math.hpp). With score_acc, a second pass adds
// each cell's final probability (float atomics: the order of those sums is free).
// Invalid tables (a sequence row or slot out of range) cannot raise from the device:
// such cells are skipped; the CPU backends report them.
#include "cuda/device/kv_math.hpp"
#include "cuda/ops/ops.hpp"

namespace ember::cuda {
namespace {

using quant::DType;

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;

struct KvFormat {
  int kind;   // 0 f32, 1 f16, 2 int8, 3 int4, 4 int4o
  int group;  // values per block (1 for f32/f16)
  int bytes;  // bytes per block
};

// Values [col, col + head_dim) of a cache row into dst (shared memory), by the block.
__device__ void decode_head(const uint8_t* row, KvFormat f, int col, int head_dim, float* dst) {
  if (f.kind <= 1) {
    for (int d = threadIdx.x; d < head_dim; d += kThreads)
      dst[d] = f.kind == 0 ? bits_to_float(dev::load_u32(row + 4 * size_t(col + d))) : dev::half_at(row + 2 * size_t(col + d));
    return;
  }
  const int groups = head_dim / f.group, first = col / f.group;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    const uint8_t* block = row + size_t(first + g) * f.bytes;
    float* y = dst + g * f.group;
    if (f.kind == 2) {
      for (int j = 0; j < f.group; ++j) y[j] = dev::kv_q8_value(block, j);
    } else {
      const uint8_t* q4 = f.kind == 4 ? block + 3 * dev::kKvOutliers : block;
      float v[64];
      for (int j = 0; j < f.group; ++j) v[j] = dev::kv_q4_stored(q4, j, f.group);
      if (f.kind == 4) dev::kv_q4o_add_outliers(block, v, f.group);
      dev::unrotate_group(v, f.group);
      for (int j = 0; j < f.group; ++j) y[j] = v[j];
    }
  }
}

struct Tables {
  const int32_t *token_pos, *token_seq, *page_table, *seq_cells, *cell_pos;
  size_t page_stride, cell_stride;  // i32 elements per row
  int64_t n_seq, max_pages, max_cells, cache_rows;
  float* score_acc;
  size_t score_stride;
};

// The cache slot of cell c of sequence `seq` if query position `pos` sees it, else -1.
__device__ int64_t visible_slot(const Tables& t, const backend::AttentionParams& p, int seq, int pos, int c) {
  if (c >= t.max_cells) return -1;
  const int32_t kv_pos = t.cell_pos[size_t(seq) * t.cell_stride + c];
  if (kv_pos < 0 || kv_pos > pos) return -1;
  if (p.window > 0 && pos - kv_pos >= p.window) return -1;
  const int64_t page = c / p.page_tokens;
  if (page >= t.max_pages) return -1;
  const int64_t slot = int64_t(t.page_table[size_t(seq) * t.page_stride + page]) * p.page_tokens + c % p.page_tokens;
  return slot >= 0 && slot < t.cache_rows ? slot : -1;
}

// The sum over the block of v (every thread gets it).
__device__ float block_sum(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  const float s = scratch[0];
  __syncthreads();
  return s;
}

// The softcapped, scaled score of the query head in qh against the key of `slot`
// (decoded into `key`), the same in every thread of the block.
__device__ float cell_score(const uint8_t* k_cache, size_t k_stride, KvFormat kf, int64_t slot, int col,
                            const backend::AttentionParams& p, const float* qh, float* key, float* scratch) {
  decode_head(k_cache + size_t(slot) * k_stride, kf, col, p.head_dim, key);
  __syncthreads();
  float part = 0.0f;
  for (int d = threadIdx.x; d < p.head_dim; d += kThreads) part += qh[d] * key[d];
  float s = block_sum(part, scratch) * p.scale;
  if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
  return s;
}

__global__ void attention_kernel(const float* q, size_t q_stride, const uint8_t* k_cache, size_t k_stride,
                                 const uint8_t* v_cache, size_t v_stride, KvFormat kf, KvFormat vf,
                                 backend::AttentionParams p, Tables t, float* out, size_t out_stride) {
  __shared__ float qh[kMaxHeadDim], key[kMaxHeadDim], value[kMaxHeadDim], scratch[kThreads];
  const int64_t token = blockIdx.x;
  const int h = blockIdx.y, kv_head = h / (p.n_head / p.n_head_kv), col = kv_head * p.head_dim;
  const int pos = t.token_pos[token], seq = t.token_seq[token];
  float* oh = out + size_t(token) * out_stride + size_t(h) * p.head_dim;
  const bool valid = seq >= 0 && seq < t.n_seq;
  const int n_cells = valid ? t.seq_cells[seq] : 0;
  // Over an F16 cache the queries and the probabilities are rounded to F16, as the CPU
  // backend and llama.cpp do (the rounding moves scores by ~1e-4, enough to flip the
  // next matmul's 8-bit activation roundings and move quantized models' logits by 1 %).
  const bool f16 = kf.kind == 1;
  for (int d = threadIdx.x; d < p.head_dim; d += kThreads) {
    const float x = q[size_t(token) * q_stride + size_t(h) * p.head_dim + d];
    qh[d] = f16 ? dev::half_to_float(dev::float_to_half(x)) : x;
  }
  float acc[kMaxHeadDim / kThreads] = {};
  dev::SoftmaxState state = dev::softmax_start();
  __syncthreads();
  if (!f16) {
    // One pass: an online softmax over the cells.
    for (int c = 0; c < n_cells; ++c) {
      const int64_t slot = visible_slot(t, p, seq, pos, c);
      if (slot < 0) continue;
      decode_head(v_cache + size_t(slot) * v_stride, vf, col, p.head_dim, value);  // read after the syncs below
      const float s = cell_score(k_cache, k_stride, kf, slot, col, p, qh, key, scratch);
      float w;
      const float rescale = dev::softmax_push(state, s, &w);
      for (int i = 0, d = threadIdx.x; d < p.head_dim; ++i, d += kThreads) acc[i] = acc[i] * rescale + w * value[d];
      __syncthreads();  // key and value are overwritten next
    }
    for (int i = 0, d = threadIdx.x; d < p.head_dim; ++i, d += kThreads) oh[d] = state.sum > 0.0f ? acc[i] / state.sum : 0.0f;
  } else {
    // Two passes: the maximum and the total first, then the values weighted by the
    // F16-rounded probabilities.
    for (int c = 0; c < n_cells; ++c) {
      const int64_t slot = visible_slot(t, p, seq, pos, c);
      if (slot < 0) continue;
      float w;
      dev::softmax_push(state, cell_score(k_cache, k_stride, kf, slot, col, p, qh, key, scratch), &w);
    }
    const float inv = state.sum > 0.0f ? 1.0f / state.sum : 0.0f;
    for (int c = 0; c < n_cells; ++c) {
      const int64_t slot = visible_slot(t, p, seq, pos, c);
      if (slot < 0) continue;
      decode_head(v_cache + size_t(slot) * v_stride, vf, col, p.head_dim, value);  // read after the syncs below
      const float s = cell_score(k_cache, k_stride, kf, slot, col, p, qh, key, scratch);
      const float w = dev::half_to_float(dev::float_to_half(dev::exp_f(s - state.max) * inv));
      for (int i = 0, d = threadIdx.x; d < p.head_dim; ++i, d += kThreads) acc[i] += w * value[d];
      __syncthreads();
    }
    for (int i = 0, d = threadIdx.x; d < p.head_dim; ++i, d += kThreads) oh[d] = acc[i];
  }
  if (t.score_acc == nullptr || state.sum <= 0.0f) return;
  // H2O: each visible cell's probability, summed into its (cell, kv head) entry.
  for (int c = 0; c < n_cells; ++c) {
    const int64_t slot = visible_slot(t, p, seq, pos, c);
    if (slot < 0) continue;
    const float s = cell_score(k_cache, k_stride, kf, slot, col, p, qh, key, scratch);
    if (threadIdx.x == 0)
      atomicAdd(t.score_acc + size_t(seq) * t.score_stride + size_t(c) * p.n_head_kv + kv_head,
                dev::exp_f(s - state.max) / state.sum);
  }
}

KvFormat kv_format(DType type) {
  switch (type) {
    case DType::f32: return {0, 1, 4};
    case DType::f16: return {1, 1, 2};
    case DType::kv_q8_g32: return {2, 32, dev::kv_q8_bytes(32)};
    case DType::kv_q8_g64: return {2, 64, dev::kv_q8_bytes(64)};
    case DType::kv_q4_g32: return {3, 32, dev::kv_q4_bytes(32)};
    case DType::kv_q4_g64: return {3, 64, dev::kv_q4_bytes(64)};
    case DType::kv_q4o_g32: return {4, 32, dev::kv_q4o_bytes(32)};
    case DType::kv_q4o_g64: return {4, 64, dev::kv_q4o_bytes(64)};
    default: unsupported_type("attention", type);
  }
}

const int32_t* i32(const backend::Tensor& t) { return reinterpret_cast<const int32_t*>(device_ptr(t)); }

}  // namespace

void attention(cudaStream_t stream, const backend::Tensor& q, const backend::Tensor& k_cache,
               const backend::Tensor& v_cache, const backend::AttentionParams& params, const backend::Tensor& out) {
  if (q.rows == 0 || params.n_head == 0) return;
  if (params.head_dim > kMaxHeadDim) unsupported_head_dim("attention", params.head_dim, kMaxHeadDim);
  Tables t{};
  t.token_pos = i32(params.token_pos);
  t.token_seq = i32(params.token_seq);
  t.page_table = i32(params.page_table);
  t.seq_cells = i32(params.seq_cells);
  t.cell_pos = i32(params.cell_pos);
  t.page_stride = params.page_table.row_stride / sizeof(int32_t);
  t.cell_stride = params.cell_pos.row_stride / sizeof(int32_t);
  t.n_seq = params.page_table.rows;
  t.max_pages = params.page_table.cols;
  t.max_cells = params.cell_pos.cols;
  t.cache_rows = k_cache.rows;
  if (params.score_acc.rows > 0) {
    t.score_acc = reinterpret_cast<float*>(device_ptr(params.score_acc));
    t.score_stride = params.score_acc.row_stride / sizeof(float);
  }
  backend::AttentionParams p = params;  // the kernel takes the scalars by value
  p.token_pos = p.token_seq = p.page_table = p.seq_cells = p.cell_pos = p.score_acc = {};
  const dim3 grid(unsigned(q.rows), unsigned(params.n_head));
  attention_kernel<<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const float*>(device_ptr(q)), q.row_stride / sizeof(float),
      reinterpret_cast<const uint8_t*>(device_ptr(k_cache)), k_cache.row_stride,
      reinterpret_cast<const uint8_t*>(device_ptr(v_cache)), v_cache.row_stride, kv_format(k_cache.type),
      kv_format(v_cache.type), p, t, reinterpret_cast<float*>(device_ptr(out)), out.row_stride / sizeof(float));
  check(cudaGetLastError(), "attention kernel launch");
}

}  // namespace ember::cuda
