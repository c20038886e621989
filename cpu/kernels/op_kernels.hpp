// The CPU ops' ISA-specific code, one table per instruction-set level.
//
// How the CPU backend picks ISA-specific code (the one mechanism, issue 13): code that
// needs a level's instructions lives in per-level source files that cpu/CMakeLists.txt
// compiles with that level's flags (kernels/<level>/ for the weight kernels,
// ops/levels/<level>/ for the ops; ops/levels/loops.cpp is plain C++ compiled once per
// level so that the compiler vectorizes it for each). Each level exports constant tables
// of function pointers (WeightKernels per weight type, kernels.hpp; one OpKernels here),
// and dispatch.cpp looks them up by Isa: weight_kernels(isa, type), op_kernels(isa).
// Generic code is compiled for the baseline target and calls through the tables: it has
// no target attributes, no target_clones and no branches on the level. Taking a table's
// address runs no code of the level, so the lookup is safe on CPUs that lack it.
//
// Every entry of every level computes the same bits as the scalar level's, except where
// a comment says it sums in another order.
#pragma once

#include <cstdint>

#include "cpu/kernels/kernels.hpp"
#include "quant/dtype.hpp"

namespace ember::cpu {

// Row kernels over one kv head's part of a quantized KV-cache row (quant/kv_formats.hpp),
// used by the CPU attention (cpu/ops/kv_rows.hpp explains the stored domain).
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

// The ops' kernels at one level. Rows are contiguous float arrays of `n` values unless
// stated; F16 values are IEEE binary16 bits.
struct OpKernels {
  Isa level;  // the level whose code this is (op_level of the Isa asked for)

  // ---- elementwise (elementwise.cpp, rms_norm.cpp, rope.cpp) ----
  void (*add_row)(const float* a, const float* b, float* out, int64_t n);  // out = a + b
  void (*mul_row)(const float* a, const float* b, float* out, int64_t n);  // out = a * b
  void (*scale_row)(const float* x, float factor, float* out, int64_t n);  // out = x * factor
  // out = silu(gate) * up, llama.cpp's vector SiLU (vec_math.hpp: silu_fma).
  void (*silu_glu_row)(const float* gate, const float* up, float* out, int64_t n);
  // out = gelu(gate) * up, GELU read from the F16 table (elementwise.cpp explains).
  void (*gelu_glu_row)(const float* gate, const float* up, float* out, int64_t n);
  // out = (x * factor) * w, or x * factor where w is null (RMSNorm's last step).
  void (*scale_weighted)(const float* x, const float* w, float factor, float* out, int64_t n);
  // RoPE on one head: pairs (i, i + half) (neox) or (2i, 2i + 1) (normal); cs holds
  // cos, sin per pair; src and dst do not overlap.
  void (*rotate_neox)(const float* src, float* dst, const float* cs, int half);
  void (*rotate_normal)(const float* src, float* dst, const float* cs, int half);

  // ---- KV cache (kv_store.cpp, attention_flash.cpp) ----
  void (*to_f16)(const float* src, uint16_t* dst, int64_t n);  // round to nearest even
  void (*f16_to_f32)(const void* row, float* out, int n);      // exact

  // ---- attention, llama.cpp's orders (attention.cpp) ----
  // dot(q, k) in any order and acc += w * v (one FMA per element), F16 or f32 rows.
  float (*dot_f16)(const float* q, const uint16_t* k, int n);
  void (*axpy_f16)(float* acc, float w, const uint16_t* v, int n);
  float (*dot_f32)(const float* q, const float* k, int n);
  void (*axpy_f32)(float* acc, float w, const float* v, int n);
  // axpy_f16 for a slice of columns of many rows, into per-lane partial sums:
  // part[(g * lanes + lane[j]) * cols + c] += w[g * ldw + j] * rows[j][c0 + c] for
  // j = 0 .. n-1 in order, g < group, c < cols (a multiple of 16), one FMA per element as
  // axpy_f16 does, so the sums are the same bits. nullptr: axpy_f16 row by row.
  void (*pv_lanes_f16)(const float* w, int ldw, int group, const uint16_t* const* rows, const int32_t* lane, int n,
                       int c0, int cols, int lanes, float* part);
  // The slice width pv_lanes_f16 is called with (a multiple of 16 dividing head_dim,
  // else 16): 16 keeps the AVX2 loop's partials in L1, AVX-512 holds 64 in registers.
  int pv_lanes_cols = 16;
  // The lanes64 and lanes16 dot products (cpu/ops/levels/lanes16.hpp; lanes16: n a
  // multiple of 16) and the lanes16 GEMM C[m][n] = A[m][k] . B[n][k] (k a multiple of 16).
  float (*dot64_f16)(const float* q, const uint16_t* k, int n);
  float (*dot64_f32)(const float* q, const float* k, int n);
  float (*dot16_f16)(const float* q, const uint16_t* k, int n);
  float (*dot16_f32)(const float* q, const float* k, int n);
  void (*gemm16)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
  // out[d] = the lanes16 sum (lanes 64: first (v0+v2)+(v1+v3)) of part[lane][d]; part is overwritten.
  void (*reduce_lanes)(float* part, int lanes, int n, float* out);
  // s[j] = exp_fma(s[j] - max_score).
  void (*exp_row)(float* s, int64_t n, float max_score);

  // ---- flash attention (attention_flash.cpp) ----
  // s[j] = exp_approx(s[j] - max_score), -inf entries 0; returns the sum (in index order).
  float (*exp_masked)(float* s, int64_t n, float max_score);
  // The same, the sum taken in 16 lanes (entries j = l mod 16) added pairwise at the end:
  // an order the compiler vectorizes (decode's lone-token path).
  float (*exp_masked16)(float* s, int64_t n, float max_score);
  void (*add_into)(float* acc, const float* x, int64_t n);  // acc += x
  void (*scale_by)(float* x, float factor, int64_t n);      // x *= factor
  // Row-major f32 products with leading strides; the summation order is the level's own.
  // C[m][n] = alpha * A[m][k] . B[n][k]^T
  void (*gemm_nt)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                  float alpha);
  // C[m][n] = A[m][k] . B[k][n]
  void (*gemm_nn)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
  // Quantized KV-cache rows: the kernels of one of the kv_q* formats, nullptr for other types.
  const KvRowKernels* (*kv_rows)(quant::DType type);

  // ---- decode attention over F16 cache rows (attention_flash.cpp, a lone query token) ----
  // nullptr at a level without them (the decoded-tile path runs); head_dim a multiple of
  // 16 and at most 512; rows[j] points at one kv head's head_dim F16 values. The
  // summation order is the level's own.
  // s[g * lds + j] = scale * q[g] . k_j for the group's query heads q: [group][hd].
  void (*scores_f16)(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                     int lds);
  // acc[g][d] += sum_j p[g * ldp + j] * v_j[d], acc: [group][hd].
  void (*pv_f16)(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc);
  // The same scores over INT8 cache rows (KV_Q8_G32 / G64, gsize 32 or 64): rows[j] points
  // at one kv head's hd / gsize blocks; s[g * lds + j] = scale * sum over blocks b of
  // d_jb * (q[g] . codes_jb). nullptr: the decoded-tile path.
  void (*scores_q8)(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
                    float* s, int lds);
  // acc[g][d] += sum_j p[g * ldp + j] * v_j[d] over INT8 value rows (as pv_f16).
  void (*pv_q8)(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc);
  // The same over INT4 rows (KV_Q4_G32 / G64), in the stored (rotated) domain: q must be
  // rotated, acc is the rotated sum (kv_formats.hpp).
  void (*scores_q4)(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
                    float* s, int lds);
  void (*pv_q4)(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc);
};

// The op kernels of level `isa` (levels that differ only in weight kernels share a
// table: op_level); throws unsupported where this CPU cannot run the level.
const OpKernels& op_kernels(Isa isa);

}  // namespace ember::cpu
