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

// ---- split-K attention for F16 and F32 caches ----
// Three kernels over (query token, kv head, split of kSplitCells cells): (1) each warp
// scores whole cells against every query head of the group (the key read once into
// registers), storing the scores and each split's (max, total); (2) each split merges
// the splits' statistics into the head's, turns its scores into probabilities (F16-rounded
// over an F16 cache, as above), adds the H2O probabilities, and accumulates its values,
// one thread per value column; (3) the splits' partial outputs are added in split order.

constexpr int kSplitCells = 64;
constexpr int kMaxGroup = 16;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kMaxHeadDim / 32;

struct Split {
  const float* q;
  size_t q_stride;
  const uint8_t *k, *v;
  size_t k_stride, v_stride;
  bool f16;
  int group, n_split, padded_cells;  // padded_cells = n_split * kSplitCells
  float* scores;                     // [token][head][padded_cells]
  float2* stats;                     // [token][head][split]: (max, total)
  float* part;                       // [token][head][split][head_dim]
};

__device__ float cache_value(const uint8_t* row, bool f16, int i) {
  return f16 ? dev::half_to_float(reinterpret_cast<const uint16_t*>(row)[i]) : reinterpret_cast<const float*>(row)[i];
}

__device__ float warp_all_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void split_scores_kernel(Split a, backend::AttentionParams p, Tables t) {
  __shared__ float qs[kMaxGroup * kMaxHeadDim];
  __shared__ float wmax[kWarps][kMaxGroup], wsum[kWarps][kMaxGroup];
  const int64_t token = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z, hd = p.head_dim, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pos = t.token_pos[token], seq = t.token_seq[token];
  const int n_cells = seq >= 0 && seq < t.n_seq ? t.seq_cells[seq] : 0;
  const int h0 = kvh * a.group;
  for (int i = threadIdx.x; i < a.group * hd; i += kThreads) {
    const float x = a.q[size_t(token) * a.q_stride + size_t(h0) * hd + i];
    qs[i] = a.f16 ? dev::half_to_float(dev::float_to_half(x)) : x;
  }
  __syncthreads();
  float m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) m[g] = -INFINITY, l[g] = 0.0f;
  const int c_end = min(n_cells, (split + 1) * kSplitCells);
  const size_t elem = a.f16 ? 2 : 4;
#pragma unroll 2
  for (int c = split * kSplitCells + warp; c < c_end; c += kWarps) {
    const int64_t slot = visible_slot(t, p, seq, pos, c);
    float* srow = a.scores + (size_t(token) * p.n_head + h0) * a.padded_cells + c;
    if (slot < 0) {
      if (lane < a.group) srow[size_t(lane) * a.padded_cells] = -INFINITY;
      continue;
    }
    const uint8_t* krow = a.k + size_t(slot) * a.k_stride + size_t(kvh) * hd * elem;
    float kv[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) kv[i] = lane + 32 * i < hd ? cache_value(krow, a.f16, lane + 32 * i) : 0.0f;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= a.group) break;
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < hd) dot += kv[i] * qs[g * hd + lane + 32 * i];
      float s = warp_all_sum(dot) * p.scale;
      if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
      if (lane == 0) srow[size_t(g) * a.padded_cells] = s;
      if (s > m[g]) {
        l[g] = l[g] * dev::exp_f(m[g] - s) + 1.0f;  // exp(-inf) = 0 for the first
        m[g] = s;
      } else {
        l[g] += dev::exp_f(s - m[g]);
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
      if (g < a.group) wmax[warp][g] = m[g], wsum[warp][g] = l[g];
  }
  __syncthreads();
  if (threadIdx.x < a.group) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, wmax[w][g]);
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (wsum[w][g] > 0.0f) sum += wsum[w][g] * dev::exp_f(wmax[w][g] - mx);
    a.stats[(size_t(token) * p.n_head + h0 + g) * a.n_split + split] = make_float2(mx, sum);
  }
}

__global__ void split_values_kernel(Split a, backend::AttentionParams p, Tables t) {
  __shared__ float prob[kMaxGroup][kSplitCells];
  __shared__ int64_t slots[kSplitCells];
  __shared__ float head_max[kMaxGroup], head_inv[kMaxGroup];
  const int64_t token = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z, hd = p.head_dim;
  const int pos = t.token_pos[token], seq = t.token_seq[token];
  const int n_cells = seq >= 0 && seq < t.n_seq ? t.seq_cells[seq] : 0;
  const int h0 = kvh * a.group, c0 = split * kSplitCells;
  const int n = max(0, min(n_cells - c0, kSplitCells));
  // The head's maximum and total from every split's: warp w merges heads w, w + 4, ...,
  // its lanes striding over the splits.
  for (int g = threadIdx.x / 32; g < a.group; g += kWarps) {
    const int lane = threadIdx.x % 32;
    const float2* st = a.stats + (size_t(token) * p.n_head + h0 + g) * a.n_split;
    float mx = -INFINITY;
    for (int s = lane; s < a.n_split; s += 32) mx = fmaxf(mx, st[s].x);
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int s = lane; s < a.n_split; s += 32)
      if (st[s].y > 0.0f) sum += st[s].y * dev::exp_f(st[s].x - mx);
    sum = warp_all_sum(sum);
    if (lane == 0) {
      head_max[g] = mx;
      head_inv[g] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
  }
  for (int j = threadIdx.x; j < n; j += kThreads) slots[j] = visible_slot(t, p, seq, pos, c0 + j);
  __syncthreads();
  for (int i = threadIdx.x; i < a.group * n; i += kThreads) {
    const int g = i / n, j = i % n;
    float w = 0.0f;
    if (slots[j] >= 0) {
      const float s = a.scores[(size_t(token) * p.n_head + h0 + g) * a.padded_cells + c0 + j];
      w = dev::exp_f(s - head_max[g]) * head_inv[g];
    }
    prob[g][j] = w;
  }
  __syncthreads();
  if (t.score_acc != nullptr) {
    for (int j = threadIdx.x; j < n; j += kThreads) {
      if (slots[j] < 0) continue;
      float sum = 0.0f;
      for (int g = 0; g < a.group; ++g) sum += prob[g][j];
      atomicAdd(t.score_acc + size_t(seq) * t.score_stride + size_t(c0 + j) * p.n_head_kv + kvh, sum);
    }
  }
  if (a.f16) {
    __syncthreads();  // the H2O sums above read the unrounded probabilities
    for (int i = threadIdx.x; i < a.group * n; i += kThreads) {
      const int g = i / n, j = i % n;
      prob[g][j] = dev::half_to_float(dev::float_to_half(prob[g][j]));
    }
  }
  __syncthreads();
  constexpr int kCols = kMaxHeadDim / kThreads;
  float acc[kMaxGroup][kCols] = {};
  const size_t elem = a.f16 ? 2 : 4;
#pragma unroll 8
  for (int j = 0; j < n; ++j) {
    if (slots[j] < 0) continue;
    const uint8_t* vrow = a.v + size_t(slots[j]) * a.v_stride + size_t(kvh) * hd * elem;
    float v[kCols];
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int d = threadIdx.x + kThreads * i;
      v[i] = d < hd ? cache_value(vrow, a.f16, d) : 0.0f;
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= a.group) break;
      const float w = prob[g][j];
#pragma unroll
      for (int i = 0; i < kCols; ++i) acc[g][i] += w * v[i];
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= a.group) break;
    float* dst = a.part + ((size_t(token) * p.n_head + h0 + g) * a.n_split + split) * hd;
#pragma unroll
    for (int i = 0; i < kCols; ++i) {
      const int d = threadIdx.x + kThreads * i;
      if (d < hd) dst[d] = acc[g][i];
    }
  }
}

__global__ void split_reduce_kernel(Split a, int n_head, int hd, float* out, size_t out_stride) {
  const int64_t token = blockIdx.x;
  const int h = blockIdx.y;
  const float* src = a.part + (size_t(token) * n_head + h) * a.n_split * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float sum = 0.0f;
#pragma unroll 16
    for (int s = 0; s < a.n_split; ++s) sum += src[size_t(s) * hd + d];
    out[size_t(token) * out_stride + size_t(h) * hd + d] = sum;
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
               const backend::Tensor& v_cache, const backend::AttentionParams& params, const backend::Tensor& out,
               Scratch& scratch) {
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
  const int group = params.n_head / params.n_head_kv;
  const int n_split = int((t.max_cells + kSplitCells - 1) / kSplitCells);
  const size_t score_bytes = size_t(q.rows) * size_t(params.n_head) * size_t(n_split) * kSplitCells * sizeof(float);
  const bool float_cache = (k_cache.type == DType::f16 || k_cache.type == DType::f32) && v_cache.type == k_cache.type;
  if (float_cache && group <= kMaxGroup && n_split > 0 && score_bytes <= (size_t(256) << 20)) {
    Split a{};
    a.q = reinterpret_cast<const float*>(device_ptr(q));
    a.q_stride = q.row_stride / sizeof(float);
    a.k = reinterpret_cast<const uint8_t*>(device_ptr(k_cache));
    a.v = reinterpret_cast<const uint8_t*>(device_ptr(v_cache));
    a.k_stride = k_cache.row_stride;
    a.v_stride = v_cache.row_stride;
    a.f16 = k_cache.type == DType::f16;
    a.group = group;
    a.n_split = n_split;
    a.padded_cells = n_split * kSplitCells;
    const size_t heads = size_t(q.rows) * size_t(params.n_head);
    const size_t stats_bytes = heads * size_t(n_split) * sizeof(float2);
    const size_t part_bytes = heads * size_t(n_split) * size_t(params.head_dim) * sizeof(float);
    auto* base = static_cast<uint8_t*>(scratch.reserve(stream, score_bytes + stats_bytes + part_bytes));
    a.scores = reinterpret_cast<float*>(base);
    a.stats = reinterpret_cast<float2*>(base + score_bytes);
    a.part = reinterpret_cast<float*>(base + score_bytes + stats_bytes);
    const dim3 grid(unsigned(q.rows), unsigned(params.n_head_kv), unsigned(n_split));
    split_scores_kernel<<<grid, kThreads, 0, stream>>>(a, p, t);
    check(cudaGetLastError(), "attention scores launch");
    split_values_kernel<<<grid, kThreads, 0, stream>>>(a, p, t);
    check(cudaGetLastError(), "attention values launch");
    split_reduce_kernel<<<dim3(unsigned(q.rows), unsigned(params.n_head)), kThreads, 0, stream>>>(
        a, params.n_head, params.head_dim, reinterpret_cast<float*>(device_ptr(out)), out.row_stride / sizeof(float));
    check(cudaGetLastError(), "attention reduce launch");
    return;
  }
  const dim3 grid(unsigned(q.rows), unsigned(params.n_head));
  attention_kernel<<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const float*>(device_ptr(q)), q.row_stride / sizeof(float),
      reinterpret_cast<const uint8_t*>(device_ptr(k_cache)), k_cache.row_stride,
      reinterpret_cast<const uint8_t*>(device_ptr(v_cache)), v_cache.row_stride, kv_format(k_cache.type),
      kv_format(v_cache.type), p, t, reinterpret_cast<float*>(device_ptr(out)), out.row_stride / sizeof(float));
  check(cudaGetLastError(), "attention kernel launch");
}

}  // namespace ember::cuda
