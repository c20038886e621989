// The functions behind each level's OpKernels table (cpu/kernels/op_kernels.hpp),
// declared per level namespace; tables.cpp puts them into the tables.
//
// Files (one concept each) and the levels they are compiled for (cpu/CMakeLists.txt):
//   loops.cpp           plain C++ loops, compiled once per level with its flags (scalar,
//                       avx2, avx512; ARM64: scalar only, its baseline already has NEON)
//   <level>/f16.cpp     F16 conversions and the F16-table GELU row
//   <level>/attention_rows.cpp   F16/F32 dot and axpy rows (avx2: also pv_lanes_f16)
//   <level>/attention_lanes.cpp  llama.cpp's lanes16 / lanes64 dot products and GEMM
//   <level>/kv_rows.cpp          quantized KV-cache rows
//   <level>/attention_decode.cpp F16, INT8 and INT4 decode-attention scores and P.V
//                                (scalar, avx2, avx512)
//   <level>/gemm_f32.cpp         f32 GEMMs of the flash attention (scalar, avx512,
//                                neon; avx2: kernels/avx2/gemm_f32.cpp)
// A level without its own variant of something uses a lower level's (tables.cpp).
#pragma once

#include <cstdint>

#include "cpu/kernels/op_kernels.hpp"
#include "quant/dtype.hpp"

namespace ember::cpu {

// Signatures of OpKernels' entries, so that each level's declarations below are one line.
namespace op_signature {
using BinaryRow = void(const float* a, const float* b, float* out, int64_t n);
using ScaleRow = void(const float* x, float factor, float* out, int64_t n);
using ScaleWeighted = void(const float* x, const float* w, float factor, float* out, int64_t n);
using Rotate = void(const float* src, float* dst, const float* cs, int half);
using ToF16 = void(const float* src, uint16_t* dst, int64_t n);
using FromF16 = void(const void* row, float* out, int n);
using DotF16 = float(const float* q, const uint16_t* k, int n);
using DotF32 = float(const float* q, const float* k, int n);
using AxpyF16 = void(float* acc, float w, const uint16_t* v, int n);
using AxpyF32 = void(float* acc, float w, const float* v, int n);
using PvLanesF16 = void(const float* w, int ldw, int group, const uint16_t* const* rows, const int32_t* lane, int n,
                        int c0, int cols, int lanes, float* part);
using Gemm16 = void(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
using ReduceLanes = void(float* part, int lanes, int n, float* out);
using ExpRow = void(float* s, int64_t n, float max_score);
using ExpMasked = float(float* s, int64_t n, float max_score);
using AddInto = void(float* acc, const float* x, int64_t n);
using ScaleBy = void(float* x, float factor, int64_t n);
using GemmNt = void(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                    float alpha);
using GemmNn = void(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
// The kernels of one quantized KV format (kv_q8_g32 ...), nullptr for other types.
using KvRows = const KvRowKernels*(quant::DType type);
using ScoresF16 = void(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                       int lds);
using PvF16 = void(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc);
using ScoresQ8 = void(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
                      float* s, int lds);
using PvQ8 = void(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n,
                  float* acc);
}  // namespace op_signature

// loops.cpp, compiled once per level into the namespace EMBER_OPS_NS names.
#define EMBER_DECLARE_OP_LOOPS                                                            \
  op_signature::BinaryRow add_row, mul_row, silu_glu_row;                                 \
  op_signature::ScaleRow scale_row;                                                       \
  op_signature::ScaleWeighted scale_weighted;                                             \
  op_signature::Rotate rotate_neox, rotate_normal;                                        \
  op_signature::ReduceLanes reduce_lanes;                                                 \
  op_signature::ExpRow exp_row;                                                           \
  op_signature::ExpMasked exp_masked, exp_masked16;                                       \
  op_signature::AddInto add_into;                                                         \
  op_signature::ScaleBy scale_by;

namespace scalar {
EMBER_DECLARE_OP_LOOPS
op_signature::ToF16 to_f16;
op_signature::FromF16 f16_to_f32;
op_signature::BinaryRow gelu_glu_row;
op_signature::DotF16 dot_f16, dot64_f16, dot16_f16;
op_signature::DotF32 dot_f32, dot64_f32, dot16_f32;
op_signature::AxpyF16 axpy_f16;
op_signature::AxpyF32 axpy_f32;
op_signature::Gemm16 gemm16;
op_signature::GemmNt gemm_nt;
op_signature::GemmNn gemm_nn;
op_signature::KvRows kv_rows;
op_signature::ScoresF16 scores_f16;
op_signature::PvF16 pv_f16;
op_signature::ScoresQ8 scores_q8, scores_q4;
op_signature::PvQ8 pv_q8, pv_q4;
// The GELU(tanh) of every F16 value as F16 bits (elementwise.cpp explains), built on first use.
const uint16_t* gelu_f16_table();
}  // namespace scalar

#if defined(EMBER_X86)
namespace avx2 {
EMBER_DECLARE_OP_LOOPS
op_signature::ToF16 to_f16;
op_signature::FromF16 f16_to_f32;
op_signature::BinaryRow gelu_glu_row;
op_signature::DotF16 dot_f16, dot64_f16, dot16_f16;
op_signature::DotF32 dot_f32, dot64_f32, dot16_f32;
op_signature::AxpyF16 axpy_f16;
op_signature::AxpyF32 axpy_f32;
op_signature::PvLanesF16 pv_lanes_f16;  // attention_rows.cpp
op_signature::Gemm16 gemm16;
op_signature::KvRows kv_rows;
op_signature::ScoresF16 scores_f16;  // attention_decode.cpp
op_signature::PvF16 pv_f16;
op_signature::ScoresQ8 scores_q8, scores_q4;
op_signature::PvQ8 pv_q8, pv_q4;
// gemm_nt, gemm_nn: cpu/kernels/avx2/gemm_f32.cpp (cpu/kernels/gemm_f32.hpp): fixed-order
// kernels for few rows, Eigen's products for more.
}  // namespace avx2

namespace avx512 {
EMBER_DECLARE_OP_LOOPS
op_signature::FromF16 f16_to_f32;
op_signature::DotF16 dot_f16, dot64_f16, dot16_f16;
op_signature::DotF32 dot64_f32, dot16_f32;
op_signature::AxpyF16 axpy_f16;
op_signature::Gemm16 gemm16;
op_signature::GemmNt gemm_nt;
op_signature::GemmNn gemm_nn;
op_signature::KvRows kv_rows;
op_signature::ScoresF16 scores_f16;  // attention_decode.cpp
op_signature::PvF16 pv_f16;
op_signature::ScoresQ8 scores_q8, scores_q4;
op_signature::PvQ8 pv_q8, pv_q4;
op_signature::PvLanesF16 pv_lanes_f16;  // attention_rows.cpp
}  // namespace avx512
#endif

#if defined(EMBER_ARM64)
namespace neon {
op_signature::ToF16 to_f16;
op_signature::FromF16 f16_to_f32;
op_signature::BinaryRow gelu_glu_row;
op_signature::DotF16 dot_f16, dot64_f16, dot16_f16;
op_signature::DotF32 dot_f32, dot64_f32, dot16_f32;
op_signature::AxpyF16 axpy_f16;
op_signature::AxpyF32 axpy_f32;
op_signature::Gemm16 gemm16;
op_signature::GemmNt gemm_nt;
op_signature::GemmNn gemm_nn;
op_signature::KvRows kv_rows;
op_signature::ScoresF16 scores_f16;  // attention_decode.cpp
op_signature::PvF16 pv_f16;
op_signature::ScoresQ8 scores_q8, scores_q4;
op_signature::PvQ8 pv_q8, pv_q4;
}  // namespace neon
#endif

#undef EMBER_DECLARE_OP_LOOPS

}  // namespace ember::cpu
