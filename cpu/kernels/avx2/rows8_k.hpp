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
#include "cpu/kernels/repack.hpp"
#include "cpu/kernels/tile.hpp"
#include "cpu/kernels/unroll.hpp"

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

// The fifth bits of sub-block j for the codes of one word (lane r: the word's 4 qh bytes
// of row r), as bit 4 of each byte (16-bit shifts; what crosses bytes is masked off).
inline __m256i high_bit4(__m256i qh, int j) {
  const __m256i h = j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
  return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}

// Bytes A and B of each dword of v as the int16 pair (byte A, byte B) of that dword.
template <int A, int B>
inline __m256i bytes_to_words(__m256i v) {
  constexpr uint32_t pick = uint32_t(A) | 0x8000u | uint32_t(B) << 16 | 0x80000000u, step = 0x00040004u;
  const __m256i mask = _mm256_setr_epi32(int32_t(pick), int32_t(pick + step), int32_t(pick + 2 * step),
                                         int32_t(pick + 3 * step), int32_t(pick), int32_t(pick + step),
                                         int32_t(pick + 2 * step), int32_t(pick + 3 * step));
  return _mm256_shuffle_epi8(v, mask);
}

// The 6-bit scales and mins of one Q4_K / Q5_K record, lane r: row r, as sub_block_rows8
// and rows8_k's min step take them: sc[j] = sc_j (int32 with VNNI, else in both int16
// halves), mn[p] = the int16 pair (mn_2p, mn_2p+1). Eight rows unpacked at once from
// the record's three scale words (the 12-byte packing of quant::unpack_k_scales).
inline void record_scales_k(const std::byte* rec, __m256i sc[8], __m256i mn[4]) {
  using R = RecordK<4>;  // the scale words sit alike in Q4_K and Q5_K records
  const __m256i s0 = load256(rec + R::kScales), s1 = load256(rec + R::kScales + 32);
  const __m256i s2 = load256(rec + R::kScales + 64);
  const __m256i low6 = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f), top2 = _mm256_set1_epi8(0x30);
  // Byte j of each lane: sc_j / mn_j (lo) and sc_{j+4} / mn_{j+4} (hi), j < 4.
  const __m256i sc_lo = _mm256_and_si256(s0, low6), mn_lo = _mm256_and_si256(s1, low6);
  const __m256i sc_hi =
      _mm256_or_si256(_mm256_and_si256(s2, low4), _mm256_and_si256(_mm256_srli_epi32(s0, 2), top2));
  const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), low4),
                                        _mm256_and_si256(_mm256_srli_epi32(s1, 2), top2));
  const auto scale = [](__m256i v, auto jc) {
    constexpr int j = decltype(jc)::value;
    // With VNNI byte j alone (bytes_to_words' second index past the lane's dword is
    // replaced by a zero), else byte j in both halves.
    if constexpr (kVnni) return _mm256_and_si256(bytes_to_words<j, j>(v), _mm256_set1_epi32(0xffff));
    return bytes_to_words<j, j>(v);
  };
  unroll<4>([&](auto jc) {
    sc[decltype(jc)::value] = scale(sc_lo, jc);
    sc[4 + decltype(jc)::value] = scale(sc_hi, jc);
  });
  mn[0] = bytes_to_words<0, 1>(mn_lo);
  mn[1] = bytes_to_words<2, 3>(mn_lo);
  mn[2] = bytes_to_words<0, 1>(mn_hi);
  mn[3] = bytes_to_words<2, 3>(mn_hi);
}

// The token's bsums of sub-block pair p against mn[p]: (bsums[4p] + bsums[4p + 1],
// bsums[4p + 2] + bsums[4p + 3]) by (mn_2p, mn_2p+1), one vpmaddwd.
inline __m256i mins_pair(__m256i mn, const int16_t* bs, int p) {
  const int32_t pair = int32_t(uint16_t(bs[4 * p] + bs[4 * p + 1])) |
                       int32_t(uint32_t(uint16_t(bs[4 * p + 2] + bs[4 * p + 3])) << 16);
  return _mm256_madd_epi16(mn, _mm256_set1_epi32(pair));
}

// 8 weight rows (file layout, rows w_row_bytes apart; or, kRepacked, one group of the
// rows8 layout) by n_x activation rows.
template <class C, bool kGrouped, bool kRepacked = false>
void rows8_k(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
             size_t out_stride, int64_t n) {
  using Rec = RecordK<C::kBits>;
  using Block = typename C::Block;
  constexpr size_t kBlock = sizeof(Block), kActBlock = sizeof(quant::BlockQ8_K);
  const int64_t nb = n / quant::kQKK;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float acc[kRows8Tokens][8], acc_min[kRows8Tokens][8];
    for (int t = 0; t < nt; ++t) {
      _mm256_store_ps(acc[t], _mm256_setzero_ps());
      _mm256_store_ps(acc_min[t], _mm256_setzero_ps());
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * (kRepacked ? Rec::kBytes : kBlock);
      __m256i q[8][8];  // [sub-block][dword], lane r: row r
      __m256i high[8];  // 5 bits: qh bytes 4k .. 4k + 3 of each row
      if constexpr (C::kBits == 5) {
        if constexpr (kRepacked) {
          for (int k = 0; k < 8; ++k) high[k] = load256(wb + Rec::kQh + 32 * k);
        } else {
          load_transposed8(wb + offsetof(Block, qh), w_row_bytes, high);
        }
      }
      for (int g = 0; g < 4; ++g) {
        __m256i bytes[8];
        if constexpr (kRepacked) {
          for (int k = 0; k < 8; ++k) bytes[k] = load256(wb + Rec::kCodes + 256 * g + 32 * k);
        } else {
          load_transposed8(wb + offsetof(Block, qs) + 32 * g, w_row_bytes, bytes);
        }
        for (int k = 0; k < 8; ++k) {
          q[2 * g][k] = _mm256_and_si256(bytes[k], nibble);
          q[2 * g + 1][k] = _mm256_and_si256(_mm256_srli_epi16(bytes[k], 4), nibble);
          if constexpr (C::kBits == 5) {
            q[2 * g][k] = _mm256_or_si256(q[2 * g][k], high_bit4(high[k], 2 * g));
            q[2 * g + 1][k] = _mm256_or_si256(q[2 * g + 1][k], high_bit4(high[k], 2 * g + 1));
          }
        }
      }
      // sc[j][r] (in both int16 halves without VNNI); mn[p][r] = (mn[2p], mn[2p + 1]) as int16.
      alignas(32) int32_t sc[8][8], mn[4][8];
      __m256 d, dmin;
      if constexpr (kRepacked) {
        __m256i vsc[8], vmn[4];
        record_scales_k(wb, vsc, vmn);
        for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(sc[j]), vsc[j]);
        for (int p = 0; p < 4; ++p) _mm256_store_si256(reinterpret_cast<__m256i*>(mn[p]), vmn[p]);
        d = _mm256_cvtph_ps(load128(wb + Rec::kD));
        dmin = _mm256_cvtph_ps(load128(wb + Rec::kDmin));
      } else {
        for (int r = 0; r < 8; ++r) {
          const KScales8 s = unpack_scales(wb + size_t(r) * w_row_bytes + 4);
          for (int j = 0; j < 8; ++j) sc[j][r] = int32_t(((s.sc >> (8 * j)) & 0xff) * (kVnni ? 1u : 0x10001u));
          for (int p = 0; p < 4; ++p)
            mn[p][r] = int32_t(((s.mn >> (16 * p)) & 0xff) | ((s.mn >> (16 * p + 8)) & 0xff) << 16);
        }
        d = load_fp16_rows8(wb, w_row_bytes);
        dmin = load_fp16_rows8(wb + 2, w_row_bytes);
      }
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
          const __m256i m = mins_pair(_mm256_load_si256(reinterpret_cast<const __m256i*>(mn[p])), bs, p);
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

// One token against one Q4_K / Q5_K group of the rows8 layout, the accumulators in
// registers: rows8_k<C, false, true>'s operations for one token in the same order
// (so bit-identical to a batch's; for Q4_K llama.cpp's per-super-block order).
template <class C>
inline void rows8_k_one(const std::byte* w, const std::byte* a, float* out, int64_t nb) {
  using Rec = RecordK<C::kBits>;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* rec = w + size_t(b) * Rec::kBytes;
    for (size_t off = 0; off < Rec::kBytes; off += 64) __builtin_prefetch(rec + kPrefetchAhead + off);
    const std::byte* ab = a + size_t(b) * sizeof(quant::BlockQ8_K);
    const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs);
    const auto* bs = reinterpret_cast<const int16_t*>(ab + offsetof(quant::BlockQ8_K, bsums));
    alignas(32) int32_t sc[8][8];
    __m256i vsc[8], mn[4];
    record_scales_k(rec, vsc, mn);
    for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(sc[j]), vsc[j]);
    __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      __m256i lo[8], hi[8];
      for (int k = 0; k < 8; ++k) {
        const __m256i bytes = load256(rec + Rec::kCodes + 256 * p + 32 * k);
        lo[k] = _mm256_and_si256(bytes, nibble);
        hi[k] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
        if constexpr (C::kBits == 5) {
          const __m256i qh = load256(rec + Rec::kQh + 32 * k);
          lo[k] = _mm256_or_si256(lo[k], high_bit4(qh, 2 * p));
          hi[k] = _mm256_or_si256(hi[k], high_bit4(qh, 2 * p + 1));
        }
      }
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(sub_block_rows8<C::kBits>(lo, qs + 64 * p, sc[2 * p]),
                                                     sub_block_rows8<C::kBits>(hi, qs + 64 * p + 32, sc[2 * p + 1])));
      imin = _mm256_add_epi32(imin, mins_pair(mn[p], bs, p));
    }
    const __m256 da = _mm256_set1_ps(load_f32(ab));
    const __m256 d = _mm256_cvtph_ps(load128(rec + Rec::kD)), dmin = _mm256_cvtph_ps(load128(rec + Rec::kDmin));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, da), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, da), acc_min);
  }
  store_rows8(out, _mm256_sub_ps(acc, acc_min));
}

// WeightKernels::Repacked::dot_tile (kGrouped: Q4_K's dot_tile_grouped): whole
// groups of the rows8 layout, every token count; a token's sums do not depend on the
// other tokens of the call.
template <class C, bool kGrouped>
void dot_tile_rows8_k_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                               size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  for (int r = 0; r < n_w; r += kRows8) {
    if (!kGrouped && n_x == 1) {
      rows8_k_one<C>(w + size_t(r) * w_row_bytes, a, out + r, n / quant::kQKK);
    } else {
      rows8_k<C, kGrouped, true>(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, out + r, out_stride,
                                 n);
    }
  }
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
