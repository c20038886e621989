#include "cpu/kernels/repack.hpp"

#include <cstring>

#include "common/fail.hpp"
#include "quant/blocks.hpp"
#include "quant/dtype.hpp"

namespace ember::cpu {
namespace {

struct Rows8Format {
  size_t block_bytes;
  int m_offset;   // offset of the fp16 offset in a block, or -1
  int qh_offset;  // offset of the 4 high-bit bytes, or -1
  size_t qs_offset;
};

bool format_of(quant::DType type, Rows8Format& f) {
  switch (type) {
    case quant::DType::q4_0: f = {sizeof(quant::BlockQ4_0), -1, -1, 2}; return true;
    case quant::DType::q4_1: f = {sizeof(quant::BlockQ4_1), 2, -1, 4}; return true;
    case quant::DType::q5_1: f = {sizeof(quant::BlockQ5_1), 2, 4, 8}; return true;
    case quant::DType::q4_g128: f = {68, 2, -1, 4}; return true;  // lib/quant/q4_g.cpp
    case quant::DType::q4_g64: f = {36, 2, -1, 4}; return true;
    default: return false;
  }
}

// Q4_K and Q5_K: one record per super-block of 8 rows (repack.hpp).
template <class Block>
void repack_k(const std::byte* src, size_t src_stride, std::byte* dst, int64_t rows, int64_t nb) {
  constexpr size_t kBlock = sizeof(Block);
  constexpr bool kHigh = requires(Block b) { b.qh; };
  using R = RecordK<kHigh ? 5 : 4>;
  static_assert(R::kBytes == kLayoutRows8Group * kBlock, "a record holds exactly the 8 blocks' bytes");
  const size_t row_bytes = size_t(nb) * kBlock;
  for (int64_t g = 0; g < rows; g += kLayoutRows8Group) {
    std::byte* group = dst + size_t(g) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      std::byte* rec = group + size_t(b) * kLayoutRows8Group * kBlock;
      for (int r = 0; r < kLayoutRows8Group; ++r) {
        const std::byte* blk = src + size_t(g + r) * src_stride + size_t(b) * kBlock;
        std::memcpy(rec + R::kD + 2 * r, blk + offsetof(Block, d), 2);
        std::memcpy(rec + R::kDmin + 2 * r, blk + offsetof(Block, dmin), 2);
        for (int w = 0; w < 3; ++w)
          std::memcpy(rec + R::kScales + 32 * w + 4 * r, blk + offsetof(Block, scales) + 4 * w, 4);
        if constexpr (kHigh)
          for (int k = 0; k < 8; ++k) std::memcpy(rec + R::kQh + 32 * k + 4 * r, blk + offsetof(Block, qh) + 4 * k, 4);
        for (int p = 0; p < 4; ++p)
          for (int k = 0; k < 8; ++k)
            std::memcpy(rec + R::kCodes + 256 * p + 32 * k + 4 * r, blk + offsetof(Block, qs) + 32 * p + 4 * k, 4);
      }
    }
  }
}

}  // namespace

bool rows8_layout_defined(quant::DType type) {
  Rows8Format f;
  return type == quant::DType::q4_k || type == quant::DType::q5_k || format_of(type, f);
}

void repack_rows8(quant::DType type, const std::byte* src, size_t src_stride, std::byte* dst, int64_t rows,
                  int64_t n) {
  Rows8Format f{};
  if (!rows8_layout_defined(type)) fail(ErrorCode::internal, "repack_rows8: no rows8 layout for {}", quant::type_name(type));
  if (rows % kLayoutRows8Group != 0 || n % quant::type_info(type).block_elems != 0)
    fail(ErrorCode::internal, "repack_rows8: [{}, {}] is not whole groups of 8 rows and whole blocks", rows, n);
  const int64_t nb = n / quant::type_info(type).block_elems;
  if (type == quant::DType::q4_k) return repack_k<quant::BlockQ4_K>(src, src_stride, dst, rows, nb);
  if (type == quant::DType::q5_k) return repack_k<quant::BlockQ5_K>(src, src_stride, dst, rows, nb);
  format_of(type, f);
  const int subs = int(quant::type_info(type).block_elems / quant::kQK);  // 32-value runs of codes per block
  const size_t row_bytes = size_t(nb) * f.block_bytes;
  const size_t m_at = 16, qh_at = f.m_offset >= 0 ? 32 : 16, codes_at = qh_at + (f.qh_offset >= 0 ? 32 : 0);
  for (int64_t g = 0; g < rows; g += kLayoutRows8Group) {
    std::byte* group = dst + size_t(g) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      std::byte* rec = group + size_t(b) * kLayoutRows8Group * f.block_bytes;
      for (int r = 0; r < kLayoutRows8Group; ++r) {
        const std::byte* blk = src + size_t(g + r) * src_stride + size_t(b) * f.block_bytes;
        std::memcpy(rec + 2 * r, blk, 2);
        if (f.m_offset >= 0) std::memcpy(rec + m_at + 2 * r, blk + f.m_offset, 2);
        if (f.qh_offset >= 0) std::memcpy(rec + qh_at + 4 * r, blk + f.qh_offset, 4);
        for (int j = 0; j < subs; ++j)
          for (int k = 0; k < 4; ++k)
            std::memcpy(rec + codes_at + 128 * j + 32 * k + 4 * r, blk + f.qs_offset + 16 * j + 4 * k, 4);
      }
    }
  }
}

size_t activation_sums_offset(int64_t n) {
  return (size_t(n / quant::kQK) * sizeof(quant::BlockQ8_0) + sizeof(int32_t) - 1) / sizeof(int32_t) *
         sizeof(int32_t);
}

size_t activation_row_bytes_with_sums(int64_t n) {
  return activation_sums_offset(n) + size_t(n / quant::kQK) * sizeof(int32_t);
}

void append_activation_sums(std::byte* row, int64_t n, int32_t factor) {
  const int64_t nb = n / quant::kQK;
  std::byte* sums = row + activation_sums_offset(n);
  for (int64_t b = 0; b < nb; ++b) {
    const auto* codes = reinterpret_cast<const int8_t*>(row + size_t(b) * sizeof(quant::BlockQ8_0) + 2);
    int32_t sum = 0;
    for (int i = 0; i < quant::kQK; ++i) sum += codes[i];
    sum *= factor;
    std::memcpy(sums + size_t(b) * sizeof(int32_t), &sum, sizeof(sum));
  }
}

}  // namespace ember::cpu
