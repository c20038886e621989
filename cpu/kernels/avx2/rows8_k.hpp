// AVX2 batches of the Q4_K and Q5_K formats, 8 weight rows at a time with one int32
// lane per row (rows8.hpp), in either of llama.cpp's Q4_K orders: kGrouped updates the
// accumulators after every 64 values (q4_k.cpp's StepGrouped), otherwise once per
// super-block (Step; Q5_K has no order to keep and uses this one). Per sub-block j and
// token, the rows' codes by the token's dwords give sc_j * dot_j for 8 rows
// (sub_block_rows8); the mins go through the token's bsums,
// (bsums[4p] + bsums[4p + 1], bsums[4p + 2] + bsums[4p + 3]) against the rows'
// (mn[2p], mn[2p + 1]) in one vpmaddwd.
//
// C: Block (quant::BlockQ4_K or BlockQ5_K: d, dmin, 12 scale bytes at 4, qs) and
// kBits (4, or 5 with the fifth bits in Block::qh: bit j of qh[l] for value l of
// sub-block j).
#pragma once

#include "cpu/kernels/avx2/blocks256.hpp"
#include "cpu/kernels/avx2/rows8.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// sc_j * dot_j of one sub-block for 8 rows (lane r), `sc` as rows8_k stores it: with
// VNNI the whole int32 dot product times the scale (vpmulld), else int16 sums by the
// int16 scale pairs (vpmaddwd): all eight dwords at once for 4-bit codes
// (8 * 2 * 15 * 128 < 2^15), four at a time for 5-bit ones.
template <int kBits>
inline __m256i sub_block_rows8(const __m256i q[8], const std::byte* a, const int32_t* sc) {
  const __m256i scale = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc));
  if constexpr (kVnni) return _mm256_mullo_epi32(dot_rows8<8>(_mm256_setzero_si256(), q, a), scale);
  if constexpr (kBits == 4) return _mm256_madd_epi16(maddubs_sum<8>(q, a), scale);
  return _mm256_add_epi32(_mm256_madd_epi16(maddubs_sum<4>(q, a), scale),
                          _mm256_madd_epi16(maddubs_sum<4>(q + 4, a + 16), scale));
}

template <class C, bool kGrouped>
void rows8_k(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
             size_t out_stride, int64_t n) {
  using Block = typename C::Block;
  constexpr size_t kBlock = sizeof(Block), kActBlock = sizeof(quant::BlockQ8_K);
  const int64_t nb = n / quant::kQKK;
  const __m256i nibble = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float acc[kRows8Tokens][8], acc_min[kRows8Tokens][8];
    for (int t = 0; t < nt; ++t) {
      _mm256_store_ps(acc[t], _mm256_setzero_ps());
      _mm256_store_ps(acc_min[t], _mm256_setzero_ps());
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * kBlock;
      __m256i q[8][8];  // [sub-block][dword], lane r: row r
      __m256i high[8];  // 5 bits: qh bytes 4k .. 4k + 3 of each row
      if constexpr (C::kBits == 5) load_transposed8(wb + offsetof(Block, qh), w_row_bytes, high);
      for (int g = 0; g < 4; ++g) {
        __m256i bytes[8];
        load_transposed8(wb + offsetof(Block, qs) + 32 * g, w_row_bytes, bytes);
        for (int k = 0; k < 8; ++k) {
          q[2 * g][k] = _mm256_and_si256(bytes[k], nibble);
          q[2 * g + 1][k] = _mm256_and_si256(_mm256_srli_epi16(bytes[k], 4), nibble);
          if constexpr (C::kBits == 5) {
            // Bit j of each qh byte to bit 4 (16-bit shifts; what crosses bytes is masked off).
            const auto bit_to_4 = [&](int j) {
              const __m256i h = j <= 4 ? _mm256_slli_epi16(high[k], 4 - j) : _mm256_srli_epi16(high[k], j - 4);
              return _mm256_and_si256(h, bit4);
            };
            q[2 * g][k] = _mm256_or_si256(q[2 * g][k], bit_to_4(2 * g));
            q[2 * g + 1][k] = _mm256_or_si256(q[2 * g + 1][k], bit_to_4(2 * g + 1));
          }
        }
      }
      // sc[j][r] (in both int16 halves without VNNI); mn[p][r] = (mn[2p], mn[2p + 1]) as int16.
      alignas(32) int32_t sc[8][8], mn[4][8];
      for (int r = 0; r < 8; ++r) {
        const KScales8 s = unpack_scales(wb + size_t(r) * w_row_bytes + 4);
        for (int j = 0; j < 8; ++j) sc[j][r] = int32_t(((s.sc >> (8 * j)) & 0xff) * (kVnni ? 1u : 0x10001u));
        for (int p = 0; p < 4; ++p)
          mn[p][r] = int32_t(((s.mn >> (16 * p)) & 0xff) | ((s.mn >> (16 * p + 8)) & 0xff) << 16);
      }
      const __m256 d = load_fp16_rows8(wb, w_row_bytes), dmin = load_fp16_rows8(wb + 2, w_row_bytes);
      for (int t = 0; t < nt; ++t) {
        const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
        const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs);
        const auto* bs = reinterpret_cast<const int16_t*>(ab + offsetof(quant::BlockQ8_K, bsums));
        const __m256 da = _mm256_set1_ps(load_f32(ab));
        const __m256 dd = _mm256_mul_ps(d, da), ddmin = _mm256_mul_ps(dmin, da);
        __m256 vacc = _mm256_load_ps(acc[t]), vmin = _mm256_load_ps(acc_min[t]);
        __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          __m256i s = sub_block_rows8<C::kBits>(q[2 * p], qs + 64 * p, sc[2 * p]);
          s = _mm256_add_epi32(s, sub_block_rows8<C::kBits>(q[2 * p + 1], qs + 64 * p + 32, sc[2 * p + 1]));
          const int32_t pair = int32_t(uint16_t(bs[4 * p] + bs[4 * p + 1])) |
                               int32_t(uint32_t(uint16_t(bs[4 * p + 2] + bs[4 * p + 3])) << 16);
          const __m256i m = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(mn[p])),
                                              _mm256_set1_epi32(pair));
          if constexpr (kGrouped) {
            vacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, vacc);
            vmin = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), ddmin, vmin);
          } else {
            isum = _mm256_add_epi32(isum, s);
            imin = _mm256_add_epi32(imin, m);
          }
        }
        if constexpr (!kGrouped) {
          vacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, vacc);
          vmin = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), ddmin, vmin);
        }
        _mm256_store_ps(acc[t], vacc);
        _mm256_store_ps(acc_min[t], vmin);
      }
    }
    for (int t = 0; t < nt; ++t)
      store_rows8(out + size_t(t0 + t) * out_stride, _mm256_sub_ps(_mm256_load_ps(acc[t]), _mm256_load_ps(acc_min[t])));
  }
}

// A dot_tile: rows8_k over whole groups of 8 rows, `Other` for the rest and (unless
// kGrouped, whose single tokens never come here) for one token.
template <class C, bool kGrouped, DotTileFn Other>
void dot_tile_rows8_k(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                      int n_x, float* out, size_t out_stride, int64_t n) {
  if (!kGrouped && n_x == 1) {
    Other(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const auto* a = static_cast<const std::byte*>(activations);
  over_row_groups<Other>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_k<C, kGrouped>(w, w_row_bytes, a, a_row_bytes, n_x, o, out_stride, n);
                         });
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
