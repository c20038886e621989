// CPU kernels for the weight formats, one table per instruction-set level.
//
// The scalar level is lib/quant's reference arithmetic; the AVX2 and AVX-512 levels
// (x86-64) and the NEON, dot-product and i8mm levels (ARM64) are compiled with their
// own flags (cpu/CMakeLists.txt) and only called after the CPU reports the features. Every level computes what lib/quant specifies
// and is tested against it (tests/quant). The ops' ISA-specific code uses the same
// mechanism (per-level sources, constant tables, one lookup): op_kernels.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "quant/dtype.hpp"

namespace ember::cpu {

// Ordered from the least to the most capable level of each architecture. avx2vnni:
// the AVX2 kernels with AVX-VNNI integer dot products (same results).
enum class Isa { scalar, avx2, avx2vnni, avx512, neon, dotprod, i8mm };
std::string_view isa_name(Isa isa);
// The level whose op kernels (op_kernels.hpp) `isa` runs: levels that only differ in
// weight kernels share them (avx2vnni runs avx2's; dotprod and i8mm run neon's).
Isa op_level(Isa isa);

// Levels this CPU can run, from scalar to the best.
std::span<const Isa> available_isas();
// The best available level, or the one forced by EMBER_CPU_ISA=<isa_name> (if available):
// scalar, avx2, avx2vnni, avx512 on x86-64; scalar, neon, dotprod, i8mm on ARM64.
Isa best_isa();

// Kernels for one weight type at one level.
struct WeightKernels {
  quant::DType weight_type;
  quant::DType activation_type;   // quant::activation_type(weight_type)
  // Converts `n` f32 activations to activation_type (n: multiple of the block size).
  void (*quantize_activations)(const float* x, void* dst, int64_t n);
  // Dot product of a weight row with a converted activation row, as quant::dot_row.
  float (*dot)(const void* weights, const void* activations, int64_t n);
  // out[j * out_stride + i] = dot(weights row i, activation row j) for i < n_w, j < n_x:
  // a small tile that reuses loaded activations across weight rows.
  void (*dot_tile)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                   size_t activation_row_bytes, int n_x, float* out, size_t out_stride, int64_t n);
  // Dequantizes `n` values (embedding lookups).
  void (*dequantize)(const void* src, float* dst, int64_t n);
  // The tile shape dot_tile runs at full speed (weight rows x activation rows); larger
  // requests are covered with tiles of this shape, so callers pass multiples of it.
  int tile_w;
  int tile_x;

  // Optional prefill path (all members null/0 where a level has none). Activation rows
  // already in activation_type are repacked once per op into a layout private to the
  // level, in which one register holds the same part of many blocks, so that the
  // per-block float work is shared; dot_tile then takes packed rows. Pays off when the
  // packing is reused by several weight rows, i.e. from about tile_x tokens up, or
  // for every token count where `decode` is set.
  struct Packed {
    size_t (*row_bytes)(int64_t n);  // bytes of one packed row of `n` values
    // Packs one row of `n` values (activation_type) into `row_bytes(n)` bytes at `packed`.
    void (*pack)(const void* activations, void* packed, int64_t n);
    // As WeightKernels::dot_tile, with activation rows in the packed layout.
    void (*dot_tile)(const void* weights, size_t weight_row_bytes, int n_w, const void* packed,
                     size_t packed_row_bytes, int n_x, float* out, size_t out_stride, int64_t n);
    int tile_w;
    int tile_x;
    // True where the packed dot_tile also beats the plain kernels for one activation
    // row (it then reads the weight rows one after another): matmul uses the packed
    // path for every token count, decode too, packing the row once per op.
    bool decode;
    // 0: matmul walks chunks of weight rows outermost and passes tokens in blocks of 32
    // (the chunk stays in L2). > 0: it walks blocks of at most this many tokens
    // outermost (fewer where their packed rows would not stay in L2) and passes each
    // over all weight rows, one dot_tile call per chunk of rows: for kernels whose
    // per-call preparation of the weights is shared by the tokens of the call.
    int token_block = 0;
  } packed;

  // Optional (null where every token is summed in the same order): dot_tile in the
  // order the reference uses for the tokens of a batch that fall in whole groups of
  // kGroupTokens, i.e. tokens [0, n - n % kGroupTokens) of an op over n tokens; the
  // others go through dot_tile. llama.cpp's Q4_K kernels differ so (quant/lanes.hpp).
  void (*dot_tile_grouped)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                           size_t activation_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) = nullptr;
  // Optional: a packed path for backend::SumOrder::batch_invariant, used for every token
  // count (pack once per op, then a dot_tile whose rows do not depend on the others).
  Packed invariant_packed = {};
  // Optional (null where dot_tile already sums every activation row alike whatever n_x):
  // dot_tile whose result for an activation row does not depend on the other rows of
  // the call, for backend::SumOrder::batch_invariant. matmul then uses it for every
  // token count and neither the packed nor the grouped path.
  void (*dot_tile_invariant)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                             size_t activation_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) = nullptr;
  static constexpr int kGroupTokens = 4;
  // Optional (dot_tile null where the level has none): weights in the rows8 layout
  // (cpu/kernels/repack.hpp), repacked at load by the CPU backend. dot_tile takes
  // `weights` at the first row of a group and n_w a multiple of 8, for every token
  // count; a token's result does not depend on the other tokens of the call (so it
  // also serves backend::SumOrder::batch_invariant).
  struct Repacked {
    void (*dot_tile)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                     size_t activation_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) = nullptr;
    int tile_x = 0;  // tokens from which matmul treats a call as prefill (as WeightKernels::tile_x)
    // Optional: as WeightKernels::dot_tile_grouped, on the rows8 layout (formats whose
    // reference sums whole groups of tokens in another order: Q4_K).
    void (*dot_tile_grouped)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                             size_t activation_row_bytes, int n_x, float* out, size_t out_stride,
                             int64_t n) = nullptr;
    // Nonzero where dot_tile and dot_tile_grouped take Q8_0 activation rows that carry,
    // per block, this factor times the sum of its codes (the symmetric formats: -offset,
    // the start of each block's integer sum; cpu/kernels/repack.hpp:
    // activation_row_bytes_with_sums), which matmul appends once per op.
    int activation_sums = 0;
  } repacked = {};
};

// Kernels of `weight_type` at level `isa`; throws unsupported for types without kernels.
const WeightKernels& weight_kernels(Isa isa, quant::DType weight_type);

}  // namespace ember::cpu
