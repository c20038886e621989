// Row kernels over quantized KV-cache rows (quant/kv_formats.hpp) for the CPU
// attention: the part of a cache row that belongs to one kv head (`n` values, n / G
// whole groups) is read in place, one group at a time, never decoded into a
// full-size copy. One scalar, AVX2 (+FMA, F16C), AVX-512 and NEON variant each
// (cpu/ops/levels/<level>/kv_rows.cpp), chosen by the backend's Isa through
// op_kernels(); all compute what quant::dequantize_row specifies (for INT4 in the
// rotated basis, see below), up to float summation order.
#pragma once

#include <cstdint>

#include "cpu/kernels/op_kernels.hpp"
#include "quant/dtype.hpp"

namespace ember::cpu {

// INT4 rows hold the group-wise rotated values y = R_G x (quant/kv_formats.hpp), the
// "stored domain"; dot, axpy and decode_stored work there, without the rotation, and the
// caller moves queries in with `rotate` and accumulated outputs back with `unrotate`
// (R_G is orthonormal: dot(q, x) = dot(R_G q, y), sum_t w_t x_t = R_G^T sum_t w_t y_t).
// For INT8 the stored values are x itself and both do nothing.
//
// struct KvRowKernels (cpu/kernels/op_kernels.hpp): dot, axpy and decode_stored work in
// the stored domain, decode gives x, rotate / unrotate move vectors in and out.

// Kernels for one of the six kv_q* types at one level; throws unsupported for other types.
KvRowKernels kv_row_kernels(Isa isa, quant::DType type);

}  // namespace ember::cpu
