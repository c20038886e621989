// AVX-512 kernels of Q4_K and Q5_K weights in the rows8 layout (cpu/kernels/repack.hpp:
// weights repacked at load; one record per super-block of 8 rows: d[8] and dmin[8]
// (fp16), each row's three scale words, Q5_K's fifth bits as words, codes[4][8][8]: word
// k of the 32 nibble bytes of sub-block pair p, per row). Per output, llama.cpp's Q4_K
// orders (per super-block; kGrouped: per 64 values, for whole groups of 4 tokens), the
// integer sums exact, so the bits of the file-layout kernels of q4_k.cpp: one token on
// 256-bit registers (one group of 8 rows, one stream of records; EVEX vpdpbusd in four
// chains, vpmulld by the scale), batches two groups per register (rows8_repacked.hpp).
//
// C: Block (quant::BlockQ4_K or BlockQ5_K) and kBits (4 or 5).
#pragma once

#include "cpu/kernels/avx512/rows8_repacked.hpp"
#include "cpu/kernels/avx512/simd.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// One token's integer sums of the sub-block pair p (values 64p .. 64p + 63) for 16 rows
// (lane r: row r): is = sc0 * dot(lo codes) + sc1 * dot(hi codes), im = the mins mn0, mn1
// by the token's bsums of the two sub-blocks.
inline void pair_sums16(const __m512i lo[8], const __m512i hi[8], const quant::BlockQ8_K& act, int p, __m512i sc0,
                        __m512i sc1, __m512i mn0, __m512i mn1, __m512i& is, __m512i& im) {
  const auto* qs = reinterpret_cast<const std::byte*>(act.qs) + 64 * p;
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (int k = 0; k < 8; ++k) {
    s0 = _mm512_dpbusd_epi32(s0, lo[k], _mm512_set1_epi32(int32_t(load_u32(qs + 4 * k))));
    s1 = _mm512_dpbusd_epi32(s1, hi[k], _mm512_set1_epi32(int32_t(load_u32(qs + 32 + 4 * k))));
  }
  is = _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1));
  const int32_t bp0 = act.bsums[4 * p] + act.bsums[4 * p + 1], bp1 = act.bsums[4 * p + 2] + act.bsums[4 * p + 3];
  im = _mm512_add_epi32(_mm512_mullo_epi32(mn0, _mm512_set1_epi32(bp0)), _mm512_mullo_epi32(mn1, _mm512_set1_epi32(bp1)));
}

// Bit j of each qh byte as bit 4 of the same byte (16-bit shifts; what crosses bytes is
// masked off): the fifth bits of sub-block j.
inline __m256i high_bit4(__m256i qh, int j) {
  const __m256i h = j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
  return _mm256_and_si256(h, _mm256_set1_epi8(0x10));
}
inline __m512i high_bit4(__m512i qh, int j) {
  const __m512i h = j <= 4 ? _mm512_slli_epi16(qh, unsigned(4 - j)) : _mm512_srli_epi16(qh, unsigned(j - 4));
  return _mm512_and_si512(h, _mm512_set1_epi8(0x10));
}

// The 6-bit scales and mins of 8 rows (lane r) from their three scale words, as int32:
// byte j of lo[0] / lo[1] is sc_j / mn_j and of hi[0] / hi[1] sc_{j+4} / mn_{j+4} (j < 4),
// the packing quant::unpack_k_scales reads, for all rows at once.
template <class V, class Ops>
inline void rec_scales(V s0, V s1, V s2, V sc[8], V mn[8]) {
  const V m6 = Ops::bytes(0x3f), m4 = Ops::bytes(0x0f), m2 = Ops::bytes(0x30), low = Ops::dwords(0xff);
  const V lo[2] = {Ops::and_(s0, m6), Ops::and_(s1, m6)};
  const V hi[2] = {Ops::or_(Ops::and_(s2, m4), Ops::and_(Ops::shr(s0, 2), m2)),
                   Ops::or_(Ops::and_(Ops::shr(s2, 4), m4), Ops::and_(Ops::shr(s1, 2), m2))};
  sc[0] = Ops::and_(lo[0], low), mn[0] = Ops::and_(lo[1], low);
  sc[1] = Ops::and_(Ops::shr(lo[0], 8), low), mn[1] = Ops::and_(Ops::shr(lo[1], 8), low);
  sc[2] = Ops::and_(Ops::shr(lo[0], 16), low), mn[2] = Ops::and_(Ops::shr(lo[1], 16), low);
  sc[3] = Ops::shr(lo[0], 24), mn[3] = Ops::shr(lo[1], 24);
  sc[4] = Ops::and_(hi[0], low), mn[4] = Ops::and_(hi[1], low);
  sc[5] = Ops::and_(Ops::shr(hi[0], 8), low), mn[5] = Ops::and_(Ops::shr(hi[1], 8), low);
  sc[6] = Ops::and_(Ops::shr(hi[0], 16), low), mn[6] = Ops::and_(Ops::shr(hi[1], 16), low);
  sc[7] = Ops::shr(hi[0], 24), mn[7] = Ops::shr(hi[1], 24);
}

struct Ops256 {
  static __m256i bytes(char v) { return _mm256_set1_epi8(v); }
  static __m256i dwords(int v) { return _mm256_set1_epi32(v); }
  static __m256i and_(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
  static __m256i or_(__m256i a, __m256i b) { return _mm256_or_si256(a, b); }
  static __m256i shr(__m256i a, int k) { return _mm256_srli_epi32(a, k); }
};

struct Ops512 {
  static __m512i bytes(char v) { return _mm512_set1_epi8(v); }
  static __m512i dwords(int v) { return _mm512_set1_epi32(v); }
  static __m512i and_(__m512i a, __m512i b) { return _mm512_and_si512(a, b); }
  static __m512i or_(__m512i a, __m512i b) { return _mm512_or_si512(a, b); }
  static __m512i shr(__m512i a, int k) { return _mm512_srli_epi32(a, k); }
};

// One token against one group (8 rows, lane r = row r), the per-super-block order.
template <class C>
void rec8_one(const std::byte* w, const std::byte* a, float* out, int64_t nb) {
  using R = RecordK<C::kBits>;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* rec = w + size_t(b) * R::kBytes;
    for (size_t off = 0; off < R::kBytes; off += 64) __builtin_prefetch(rec + kPrefetchAhead + off);
    const std::byte* ab = a + size_t(b) * sizeof(quant::BlockQ8_K);
    const auto& act = *reinterpret_cast<const quant::BlockQ8_K*>(ab);
    const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs);
    __m256i sc[8], mn[8];
    rec_scales<__m256i, Ops256>(load256(rec + R::kScales), load256(rec + R::kScales + 32),
                                load256(rec + R::kScales + 64), sc, mn);
    __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      // Four chains: lo and hi sub-blocks, even and odd words.
      __m256i c[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int k = 0; k < 8; ++k) {
        const __m256i v = load256(rec + R::kCodes + 256 * p + 32 * k);
        __m256i lo = _mm256_and_si256(v, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        if constexpr (C::kBits == 5) {
          const __m256i qh = load256(rec + R::kQh + 32 * k);
          lo = _mm256_or_si256(lo, high_bit4(qh, 2 * p));
          hi = _mm256_or_si256(hi, high_bit4(qh, 2 * p + 1));
        }
        c[k % 2] = _mm256_dpbusd_epi32(c[k % 2], lo, _mm256_set1_epi32(int32_t(load_u32(qs + 64 * p + 4 * k))));
        c[2 + k % 2] =
            _mm256_dpbusd_epi32(c[2 + k % 2], hi, _mm256_set1_epi32(int32_t(load_u32(qs + 64 * p + 32 + 4 * k))));
      }
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_mullo_epi32(_mm256_add_epi32(c[0], c[1]), sc[2 * p]),
                                                     _mm256_mullo_epi32(_mm256_add_epi32(c[2], c[3]), sc[2 * p + 1])));
      const int32_t bp0 = act.bsums[4 * p] + act.bsums[4 * p + 1], bp1 = act.bsums[4 * p + 2] + act.bsums[4 * p + 3];
      imin = _mm256_add_epi32(imin, _mm256_add_epi32(_mm256_mullo_epi32(mn[2 * p], _mm256_set1_epi32(bp0)),
                                                     _mm256_mullo_epi32(mn[2 * p + 1], _mm256_set1_epi32(bp1))));
    }
    const __m256 da = _mm256_set1_ps(act.d);
    const __m256 d = _mm256_cvtph_ps(load128(rec + R::kD)), dmin = _mm256_cvtph_ps(load128(rec + R::kDmin));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, da), acc);
    acc_min = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, da), acc_min);
  }
  _mm256_storeu_ps(out, _mm256_sub_ps(acc, acc_min));
}

// n_x tokens against the groups at ra (rows 0-7) and rb (rows 8-15; ra again for a lone
// group, stored under a mask), in the per-super-block order or (kGrouped) grouped16's.
template <class C, bool kGrouped>
void rec16_batch(const std::byte* ra, const std::byte* rb, const std::byte* a, size_t a_row_bytes, int n_x,
                 float* out, size_t out_stride, int64_t nb) {
  using R = RecordK<C::kBits>;
  constexpr int kTokens = 32;
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_K);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    alignas(64) float acc[kTokens][16], acc_min[kTokens][16];
    alignas(64) int32_t isum[kTokens][16], imin[kTokens][16];
    for (int t = 0; t < nt; ++t) {
      _mm512_store_ps(acc[t], _mm512_setzero_ps());
      _mm512_store_ps(acc_min[t], _mm512_setzero_ps());
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* pa = ra + size_t(b) * R::kBytes;
      const std::byte* pb = rb + size_t(b) * R::kBytes;
      __m512i sc[8], mn[8];
      rec_scales<__m512i, Ops512>(two_halves(pa + R::kScales, pb + R::kScales),
                                  two_halves(pa + R::kScales + 32, pb + R::kScales + 32),
                                  two_halves(pa + R::kScales + 64, pb + R::kScales + 64), sc, mn);
      const __m512 vd = halves_fp16(pa + R::kD, pb + R::kD), vdmin = halves_fp16(pa + R::kDmin, pb + R::kDmin);
      if constexpr (!kGrouped)
        for (int t = 0; t < nt; ++t) {
          _mm512_store_si512(isum[t], _mm512_setzero_si512());
          _mm512_store_si512(imin[t], _mm512_setzero_si512());
        }
      for (int p = 0; p < 4; ++p) {
        __m512i lo[8], hi[8];
        for (int k = 0; k < 8; ++k) {
          const size_t off = R::kCodes + 256 * size_t(p) + 32 * size_t(k);
          const __m512i v = two_halves(pa + off, pb + off);
          lo[k] = _mm512_and_si512(v, nibble);
          hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
          if constexpr (C::kBits == 5) {
            const __m512i qh = two_halves(pa + R::kQh + 32 * k, pb + R::kQh + 32 * k);
            lo[k] = _mm512_or_si512(lo[k], high_bit4(qh, 2 * p));
            hi[k] = _mm512_or_si512(hi[k], high_bit4(qh, 2 * p + 1));
          }
        }
        for (int t = 0; t < nt; ++t) {
          const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
          const auto& act = *reinterpret_cast<const quant::BlockQ8_K*>(ab);
          __m512i is, im;
          pair_sums16(lo, hi, act, p, sc[2 * p], sc[2 * p + 1], mn[2 * p], mn[2 * p + 1], is, im);
          if constexpr (kGrouped) {
            const __m512 da = _mm512_set1_ps(act.d);
            _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(vd, da), _mm512_load_ps(acc[t])));
            _mm512_store_ps(acc_min[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(vdmin, da),
                                                        _mm512_load_ps(acc_min[t])));
          } else {
            _mm512_store_si512(isum[t], _mm512_add_epi32(_mm512_load_si512(isum[t]), is));
            _mm512_store_si512(imin[t], _mm512_add_epi32(_mm512_load_si512(imin[t]), im));
          }
        }
      }
      if constexpr (!kGrouped)
        for (int t = 0; t < nt; ++t) {
          const __m512 da = _mm512_set1_ps(load_f32(a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock));
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[t])), _mm512_mul_ps(vd, da),
                                                  _mm512_load_ps(acc[t])));
          _mm512_store_ps(acc_min[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(imin[t])),
                                                      _mm512_mul_ps(vdmin, da), _mm512_load_ps(acc_min[t])));
        }
    }
    for (int t = 0; t < nt; ++t)
      store16(out + size_t(t0 + t) * out_stride, _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(acc_min[t])),
              ra != rb);
  }
}

// WeightKernels::Repacked::dot_tile (kGrouped: its dot_tile_grouped): whole groups of the
// rows8 layout, every token count, two groups at a time.
template <class C, bool kGrouped>
void dot_tile_k_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                         int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQKK;
  for (int r = 0; r < n_w; r += 16) {
    const std::byte* ra = w + size_t(r) * w_row_bytes;
    const std::byte* rb = r + 16 <= n_w ? ra + 8 * w_row_bytes : ra;
    if (!kGrouped && n_x == 1) {
      rec8_one<C>(ra, a, out + r, nb);
      if (rb != ra) rec8_one<C>(rb, a, out + r + 8, nb);
    } else {
      rec16_batch<C, kGrouped>(ra, rb, a, a_row_bytes, n_x, out + r, out_stride, nb);
    }
  }
}

}  // namespace
}  // namespace ember::cpu::avx512
