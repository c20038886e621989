// kv_store: writes new key or value rows into cache slots.
//
//   src:   [n_tok, width] f32 (width = n_head_kv * head_dim)
//   cache: [n_slots, width] F32 or F16 (the KV storage type)
//   slots: [n_tok, 1] i32, each in [0, n_slots); cache[slots[t]] = convert(src[t])
// F16 conversion rounds to nearest even.
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void kv_store(backend::Backend& be, const backend::Tensor& src, const backend::Tensor& cache,
                     const backend::Tensor& slots) {
  using namespace detail;
  expect_type("kv_store", "src", src, DType::f32);
  expect_type("kv_store", "slots", slots, DType::i32);
  if (cache.type != DType::f32 && cache.type != DType::f16)
    fail(ErrorCode::unsupported, "kv_store: cache type {} is not supported", quant::type_name(cache.type));
  expect_shape("kv_store", "slots", slots, src.rows, 1);
  expect_shape("kv_store", "cache", cache, cache.rows, src.cols);
  be.kv_store(src, cache, slots);
}

}  // namespace ember::ops
