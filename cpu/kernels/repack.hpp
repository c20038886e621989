// Load-time weight layouts of the CPU backend (Backend::prepare_weight).
//
// The rows8 layout (Tensor::layout == kLayoutRows8) of the 32-value formats with
// 4-bit codes and a free float order (Q4_0, Q4_1, Q5_1, Q4_G128, Q4_G64), and of Q4_K
// and Q5_K (below): the batched kernels of a level (avx2 rows8_32.hpp) transpose the codes of
// 8 weight rows so that one int32 lane holds one row, and the scales of 8 rows side by
// side, once per block and call. For
// prefill the transposition is shared by many tokens; for decode (one token) it costs
// as much as the dot products, so decode used a row-at-a-time kernel whose float work
// per block is not shared. Stored transposed once at load, both get the shared form.
//
// A group of 8 rows (r = 0..7) keeps its 8 * row_bytes bytes; block b of the group
// becomes one record of 8 * block_bytes bytes at b * 8 * block_bytes:
//   d[8]        the rows' fp16 scales, row r at 2r
//   m[8]        (Q4_1, Q5_1) the rows' fp16 offsets
//   qh[8]       (Q5_1) each row's 4 high-bit bytes, row r at 4r
//   codes[4][8] 4-byte words: codes[k][r] = bytes 4k .. 4k + 3 of row r's 16 nibble bytes
// Q4_G128 and Q4_G64 (d, m, then 4 or 2 runs of 16 nibble bytes per block) have one
// such codes[4][8] per run, one after another (128 bytes each).
//
// Q4_K (super-blocks of 256 values: d, dmin, 12 bytes of 6-bit scales and mins, 128
// nibble bytes) has one record of 1152 bytes per super-block of the 8 rows:
//   d[8], dmin[8]    fp16, row r at 2r (bytes 0 and 16)
//   s[3][8]          4-byte words: s[w][r] = scale bytes 4w .. 4w + 3 of row r (bytes 32)
//   codes[4][8][8]   4-byte words: codes[p][k][r] = nibble bytes 32p + 4k .. + 3 of row r
//                    (bytes 128; p: the pair of sub-blocks 2p and 2p + 1)
// so that one 256-bit load gives one word of each of the 8 rows. Q5_K (the same, with 32
// bytes qh of fifth bits before qs) puts qh[8][8] (word k of row r's qh at 128 + 32k + 4r)
// before the codes, which then start at 384 (1408 bytes per record).
// Level-independent (plain byte moves), so every level's kernels can read it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::cpu {

constexpr uint8_t kLayoutRows8 = 1;
constexpr int kLayoutRows8Group = 8;

// Byte offsets in a record of the rows8 layout of Q4_K (kBits 4) or Q5_K (kBits 5).
template <int kBits>
struct RecordK {
  static constexpr size_t kD = 0, kDmin = 16, kScales = 32, kQh = 128, kCodes = kBits == 5 ? 384 : 128;
  static constexpr size_t kBytes = kCodes + 1024;
};

// True for the types the rows8 layout is defined for.
bool rows8_layout_defined(quant::DType type);

// Repacks `rows` rows (a multiple of 8) of `n` values of `type` from `src` (rows
// `src_stride` bytes apart) into `dst` (row_bytes(type, n) * rows bytes).
void repack_rows8(quant::DType type, const std::byte* src, size_t src_stride, std::byte* dst, int64_t rows,
                  int64_t n);

// Q8_0 activation rows that carry their blocks' code sums (WeightKernels::Repacked::
// activation_sums): the row's n / 32 blocks as quant::row_bytes(q8_0, n) gives them, then,
// from byte activation_sums_offset(n), one int32 per block, `factor` times the sum of its
// 32 codes. The symmetric formats' kernels start each block's integer sum at -offset
// times that sum; matmul takes it once per op, not once per call of a chunk of weight rows.
size_t activation_sums_offset(int64_t n);
size_t activation_row_bytes_with_sums(int64_t n);
// Writes the sums of the Q8_0 row of n values at `row` (activation_row_bytes_with_sums(n) bytes).
void append_activation_sums(std::byte* row, int64_t n, int32_t factor);

}  // namespace ember::cpu
