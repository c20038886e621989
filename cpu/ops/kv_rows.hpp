// Row kernels over quantized KV-cache rows (quant/kv_formats.hpp) for the CPU
// attention: the part of a cache row that belongs to one kv head (`n` values, n / G
// whole groups) is read in place, one group at a time, never decoded into a
// full-size copy. One scalar, AVX2 (+FMA, F16C) and AVX-512 variant each, chosen by
// the backend's Isa; all compute what quant::dequantize_row specifies (for INT4 in the
// rotated basis, see below), up to float summation order.
#pragma once

#include <cstdint>

#include "cpu/kernels/kernels.hpp"
#include "quant/dtype.hpp"

namespace ember::cpu {

// INT4 rows hold the group-wise rotated values y = R_G x (quant/kv_formats.hpp), the
// "stored domain"; dot, axpy and decode_stored work there, without the rotation, and the
// caller moves queries in with `rotate` and accumulated outputs back with `unrotate`
// (R_G is orthonormal: dot(q, x) = dot(R_G q, y), sum_t w_t x_t = R_G^T sum_t w_t y_t).
// For INT8 the stored values are x itself and both do nothing.
struct KvRowKernels {
  // sum_i q[i] * y[i], y = the `n` stored values of `row`.
  float (*dot)(const float* q, const void* row, int n);
  // acc[i] += w * y[i].
  void (*axpy)(float* acc, float w, const void* row, int n);
  // out[i] = y[i] (a row, or a tile of rows, decoded into L1/L2-sized scratch).
  void (*decode_stored)(const void* row, float* out, int n);
  // out[i] = x[i], exactly quant::dequantize_row (y, then R_G^T).
  void (*decode)(const void* row, float* out, int n);
  // v = R_G v and v = R_G^T v in place, group by group (n a multiple of G); no-ops for INT8.
  void (*rotate)(float* v, int64_t n);
  void (*unrotate)(float* v, int64_t n);
  // The same on already-decoded f32 rows.
  float (*dot_f32)(const float* q, const float* x, int n);
  void (*axpy_f32)(float* acc, float w, const float* x, int n);
};

// Kernels for one of the four kv_q* types at one level; throws unsupported for other types.
KvRowKernels kv_row_kernels(Isa isa, quant::DType type);

}  // namespace ember::cpu
