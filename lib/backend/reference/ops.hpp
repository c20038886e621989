// Reference implementations of every op: plain scalar C++ on host memory, the
// behaviour the other backends are tested against. Contracts are in
// lib/backend/ops/<op>.hpp; shapes are checked before these run.
#pragma once

#include "backend/backend.hpp"

namespace ember::reference {

using backend::Tensor;

void get_rows(const Tensor& table, const Tensor& ids, const Tensor& out);
void matmul(const Tensor& weights, const Tensor& x, const Tensor& out);
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void mul(const Tensor& a, const Tensor& b, const Tensor& out);
void scale(const Tensor& x, float factor, const Tensor& out);
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
void rope(const Tensor& x, const Tensor& positions, const backend::RopeParams& params, const Tensor& out);
void glu(const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out);
void kv_store(const Tensor& src, const Tensor& cache, const Tensor& slots);
void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const backend::AttentionParams& params,
               const Tensor& out);

// Scalar activation functions shared with other backends' tails.
float silu(float x);
float gelu_tanh(float x);

}  // namespace ember::reference
