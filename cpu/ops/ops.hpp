// The CPU backend's op implementations, one file per op in cpu/ops/.
// Tensors are on host buffers (Buffer::host_data() != nullptr); shapes were
// checked by lib/backend/ops/<op>.hpp before these are called.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/kernels/kernels.hpp"
#include "cpu/thread_pool.hpp"

namespace ember::cpu {

using backend::Tensor;

// cos/sin of the last rope call: every layer of a forward pass ropes the same
// positions with one of at most two frequency bases, so the table is reused.
struct RopeTable {
  backend::RopeParams params;
  std::vector<int32_t> positions;
  std::vector<float> cos_sin;  // [n_tok][n_rot / 2][2]
};

// What an op may use: the pool, the chosen kernel level and reusable scratch memory.
struct OpContext {
  ThreadPool& pool;
  Isa isa;
  std::vector<std::byte>& scratch;  // grows as needed; contents undefined between ops
  RopeTable rope_tables[2];         // most recently used first
  // backend::SumOrder::batch_invariant: matmul sums every token in its plain order
  // (no grouped kernels) and attention sums every query token in GEMM order.
  bool batch_invariant = false;
};

void matmul(OpContext& ctx, const Tensor& weights, const Tensor& x, const Tensor& out);
void get_rows(OpContext& ctx, const Tensor& table, const Tensor& ids, const Tensor& out);
void add(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void mul(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void scale(OpContext& ctx, const Tensor& x, float factor, const Tensor& out);
void rms_norm(OpContext& ctx, const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
void rope(OpContext& ctx, const Tensor& x, const Tensor& positions, const backend::RopeParams& params,
          const Tensor& out);
void glu(OpContext& ctx, const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out);
void kv_store(OpContext& ctx, const Tensor& src, const Tensor& cache, const Tensor& slots);
void attention(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
               const backend::AttentionParams& params, const Tensor& out);

}  // namespace ember::cpu
