// The weight-type registry: the one list of the tensor types ember multiplies with.
//
// Everything that enumerates weight types expands EMBER_WEIGHT_TYPES instead of
// listing them: the DType ids (dtype.hpp), their layout (type_info), weight_types(),
// the reference functions and their dispatch (formats.hpp, quant.cpp), the scalar
// kernel level (cpu/kernels/scalar/scalar.cpp), the kernel tables of every ISA level
// and their lookup (cpu/kernels/levels.hpp, dispatch.cpp), the tests that walk
// weight_types() and the generated formats table of docs/models.md. Adding a format is
// one row here, its reference file lib/quant/<id>.cpp (dequantize_<id>, quantize_<id>,
// dot_<id> in namespace ember::quant::ref) and, for the levels its row names, a
// kernel file per level defining `k<NAME>` (docs/quant.md, "Adding a weight type").
//
// X(id, NAME, type_id, block_elems, block_bytes, activation, levels)
//   id           the DType enumerator and the suffix of the reference functions
//   NAME         the name in files and messages ("Q4_K"); the kernel tables are k<NAME>
//   type_id      the GGUF type id (ggml's ggml_type); ember's own formats use ids from
//                1100 up, which no GGUF writer but ember's uses
//   block_elems  values per block; block_bytes  bytes per block
//   activation   the type activations are converted to (quant::activation_type)
//   levels       which ISA levels have kernel tables of their own:
//                  ALL   scalar and every SIMD level (x86: avx2, avx2vnni, avx512;
//                        ARM64: neon, dotprod, i8mm)
//                  X86   scalar and the x86 levels (avx2 and avx2vnni from one source in
//                        kernels/avx2/, avx512 from kernels/avx512/); the ARM64 levels
//                        run the scalar one
//                  AVX2  scalar, avx2 and avx2vnni (one source, kernels/avx2/); avx512
//                        runs avx2's table, the ARM64 levels the scalar one
//                  REF   scalar only: every level runs the reference arithmetic
//                A level without a table of its own runs that of the level below it
//                (avx512 -> avx2 -> scalar, avx2vnni -> avx2, i8mm -> dotprod -> neon ->
//                scalar): cpu/kernels/dispatch.cpp.
//
// Types listed here must have a companion activation type that lib/quant can
// quantize (F32, Q8_0, Q8_1, Q8_K, Q8_T: one scale per token, lib/quant/q8_w.cpp, or Q8_TR:
// Q8_T in a rotated basis, lib/quant/q8_wr.cpp).
#pragma once

#define EMBER_WEIGHT_TYPES(X)                 \
  X(f32, F32, 0, 1, 4, f32, ALL)               \
  X(f16, F16, 1, 1, 2, f32, ALL)               \
  X(bf16, BF16, 30, 1, 2, f32, ALL)            \
  X(q8_0, Q8_0, 8, 32, 34, q8_0, ALL)          \
  X(q4_0, Q4_0, 2, 32, 18, q8_0, ALL)          \
  X(q4_1, Q4_1, 3, 32, 20, q8_1, ALL)          \
  X(q5_0, Q5_0, 6, 32, 22, q8_0, ALL)          \
  X(q5_1, Q5_1, 7, 32, 24, q8_1, ALL)          \
  X(q4_k, Q4_K, 12, 256, 144, q8_k, ALL)       \
  X(q5_k, Q5_K, 13, 256, 176, q8_k, ALL)       \
  X(q6_k, Q6_K, 14, 256, 210, q8_k, ALL)       \
  X(q4_g128, Q4_G128, 1100, 128, 68, q8_1, ALL)  \
  X(q4_g64, Q4_G64, 1101, 64, 36, q8_1, ALL)    \
  X(q8_w, Q8_W, 1102, 32, 34, q8_t, ALL)       \
  X(q8_wr, Q8_WR, 1104, 64, 68, q8_tr, ALL)

// EMBER_IF_LEVEL(levels, level, x): x where the registry's `levels` column gives
// `level` (scalar, avx2, avx2vnni, avx512, neon, dotprod, i8mm) a table of its own.
#define EMBER_IF_LEVEL(levels, level, x) EMBER_IF_LEVEL_##levels##_##level(x)
#define EMBER_IF_LEVEL_ALL_scalar(x) x
#define EMBER_IF_LEVEL_ALL_avx2(x) x
#define EMBER_IF_LEVEL_ALL_avx2vnni(x) x
#define EMBER_IF_LEVEL_ALL_avx512(x) x
#define EMBER_IF_LEVEL_ALL_neon(x) x
#define EMBER_IF_LEVEL_ALL_dotprod(x) x
#define EMBER_IF_LEVEL_ALL_i8mm(x) x
#define EMBER_IF_LEVEL_X86_scalar(x) x
#define EMBER_IF_LEVEL_X86_avx2(x) x
#define EMBER_IF_LEVEL_X86_avx2vnni(x) x
#define EMBER_IF_LEVEL_X86_avx512(x) x
#define EMBER_IF_LEVEL_X86_neon(x)
#define EMBER_IF_LEVEL_X86_dotprod(x)
#define EMBER_IF_LEVEL_X86_i8mm(x)
#define EMBER_IF_LEVEL_AVX2_scalar(x) x
#define EMBER_IF_LEVEL_AVX2_avx2(x) x
#define EMBER_IF_LEVEL_AVX2_avx2vnni(x) x
#define EMBER_IF_LEVEL_AVX2_avx512(x)
#define EMBER_IF_LEVEL_AVX2_neon(x)
#define EMBER_IF_LEVEL_AVX2_dotprod(x)
#define EMBER_IF_LEVEL_AVX2_i8mm(x)
#define EMBER_IF_LEVEL_REF_scalar(x) x
#define EMBER_IF_LEVEL_REF_avx2(x)
#define EMBER_IF_LEVEL_REF_avx2vnni(x)
#define EMBER_IF_LEVEL_REF_avx512(x)
#define EMBER_IF_LEVEL_REF_neon(x)
#define EMBER_IF_LEVEL_REF_dotprod(x)
#define EMBER_IF_LEVEL_REF_i8mm(x)
