// kv_store: writes new key or value rows into cache slots.
//
//   src:   [n_tok, width] f32 (width = n_head_kv * head_dim)
//   cache: [n_slots, width] F32, F16 or a KV storage type (quant/kv_formats.hpp)
//   slots: [n_tok, 1] i32, each in [0, n_slots); cache[slots[t]] = convert(src[t])
// F16 conversion rounds to nearest even; the quantized types quantize each group of
// the row as quant/kv_formats.hpp specifies (backends must produce the same bytes).
#pragma once

#include "backend/ops/check.hpp"
#include "quant/kv_formats.hpp"

namespace ember::ops::detail {

// A quantized KV row is whole groups: the width must be a multiple of the group size.
inline void expect_whole_groups(const char* op, DType type, int64_t width) {
  if (const int group = quant::kv::group_size(type); group != 0 && width % group != 0)
    fail(ErrorCode::invalid_argument, "{}: width {} is not a multiple of the {} group size {}", op, width,
         quant::type_name(type), group);
}

}  // namespace ember::ops::detail

namespace ember::ops {

inline void kv_store(backend::Backend& be, const backend::Tensor& src, const backend::Tensor& cache,
                     const backend::Tensor& slots) {
  using namespace detail;
  expect_type("kv_store", "src", src, DType::f32);
  expect_type("kv_store", "slots", slots, DType::i32);
  if (!quant::is_kv_storage_type(cache.type))
    fail(ErrorCode::unsupported, "kv_store: cache type {} is not supported", quant::type_name(cache.type));
  expect_shape("kv_store", "slots", slots, src.rows, 1);
  expect_shape("kv_store", "cache", cache, cache.rows, src.cols);
  expect_whole_groups("kv_store", cache.type, src.cols);
  be.kv_store(src, cache, slots);
}

// kv_load: reads cache rows back as f32 (the inverse of kv_store, up to its rounding).
//
//   cache: [n_slots, width] a KV storage type
//   slots: [n, 1] i32, each in [0, n_slots)
//   out:   [n, width] f32; out[t] = decode(cache[slots[t]])
inline void kv_load(backend::Backend& be, const backend::Tensor& cache, const backend::Tensor& slots,
                    const backend::Tensor& out) {
  using namespace detail;
  expect_type("kv_load", "out", out, DType::f32);
  expect_type("kv_load", "slots", slots, DType::i32);
  if (!quant::is_kv_storage_type(cache.type))
    fail(ErrorCode::unsupported, "kv_load: cache type {} is not supported", quant::type_name(cache.type));
  expect_shape("kv_load", "slots", slots, out.rows, 1);
  expect_shape("kv_load", "cache", cache, cache.rows, out.cols);
  expect_whole_groups("kv_load", cache.type, out.cols);
  be.kv_load(cache, slots, out);
}

// copy_rows: copies whole rows of a tensor within it, byte for byte (any type).
//
//   tensor:   [n, width]
//   src_rows, dst_rows: [m, 1] i32, each in [0, n); tensor[dst_rows[i]] = tensor[src_rows[i]].
//   No row may be both a source and a destination (results would depend on order).
inline void copy_rows(backend::Backend& be, const backend::Tensor& tensor, const backend::Tensor& src_rows,
                      const backend::Tensor& dst_rows) {
  using namespace detail;
  expect_type("copy_rows", "src_rows", src_rows, DType::i32);
  expect_type("copy_rows", "dst_rows", dst_rows, DType::i32);
  expect_shape("copy_rows", "src_rows", src_rows, src_rows.rows, 1);
  expect_shape("copy_rows", "dst_rows", dst_rows, src_rows.rows, 1);
  be.copy_rows(tensor, src_rows, dst_rows);
}

}  // namespace ember::ops
