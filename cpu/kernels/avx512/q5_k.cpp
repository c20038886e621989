// AVX-512 kernels of Q5_K weights with Q8_K activations (see blocks256.hpp).
#include "cpu/kernels/avx512/packed256.hpp"
#include "cpu/kernels/avx512/rows8_k_repacked.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// Adds the fifth bits (bit j of qh[l] for value l of sub-block j) to the codes of
// registers (0, 2), (1, 3), (4, 6), (5, 7). With y = [qh, qh >> 2] (one 256-bit half
// each), the bit of both halves of register k sits at the same position of y, and
// a 16-bit shift brings it to bit 4 (what a 16-bit shift carries across bytes is
// masked off with 0x10).
inline void add_high_bits(const std::byte* qh_bytes, __m512i* q) {
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh_bytes));
  const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
  const __m512i bit4 = _mm512_set1_epi8(0x10);
  q[0] = _mm512_or_si512(q[0], _mm512_and_si512(_mm512_slli_epi16(y, 4), bit4));
  q[1] = _mm512_or_si512(q[1], _mm512_and_si512(_mm512_slli_epi16(y, 3), bit4));
  q[2] = _mm512_or_si512(q[2], _mm512_and_si512(y, bit4));
  q[3] = _mm512_or_si512(q[3], _mm512_and_si512(_mm512_srli_epi16(y, 1), bit4));
}

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_KOffset;
  using Wt = WtKOffset;
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_K);
    Wt w;
    load_k_offset_scales(b, w);
    const std::byte* qs = b + offsetof(quant::BlockQ5_K, qs);
    load_nibbles(qs, w.q[0], w.q[1]);
    load_nibbles(qs + 64, w.q[2], w.q[3]);
    add_high_bits(b + offsetof(quant::BlockQ5_K, qh), w.q);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) { madd_k_offset(acc, w, a); }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Prefill path: two super-blocks per step (packed256.hpp). Register k's byte b of lane L
// is code 4k + b of sub-block j(L); its fifth bit is bit j(L) of byte 4k + b of qh,
// i.e. of dword k of the super-block's qh: shifted right by j(L) per lane, it lands on
// bit 0 of each byte.
struct Q5_KPair {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_K);
  static WtKPair load_pair(const std::byte* b0, const std::byte* b1) {
    WtKPair w;
    load_k_pair(b0, b1, offsetof(quant::BlockQ5_K, qs), w);
    const size_t qh_offset = offsetof(quant::BlockQ5_K, qh);
    const __m512i qh = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + qh_offset))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + qh_offset)), 1);
    // Per lane: the sub-block's bit index j and the super-block's first qh dword (0 or 8).
    const __m512i sub = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7, 1, 3, 5, 7);
    const __m512i base = _mm512_setr_epi32(0, 0, 0, 0, 8, 8, 8, 8, 0, 0, 0, 0, 8, 8, 8, 8);
    for (int k = 0; k < 8; ++k) {
      const __m512i words = _mm512_permutexvar_epi32(_mm512_add_epi32(base, _mm512_set1_epi32(k)), qh);
      const __m512i bits = _mm512_and_si512(_mm512_srlv_epi32(words, sub), _mm512_set1_epi32(0x01010101));
      w.q[k] = _mm512_or_si512(w.q[k], _mm512_slli_epi32(bits, 4));
    }
    return w;
  }
};
using Packed = PackedKPairStep<Q5_KPair>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const quant::BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const quant::BlockQ5_K& blk = blocks[b];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
    for (int j = 0; j < 8; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * (j / 2)));
      const __m256i low = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
      const __mmask32 high = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << j)));
      const __m256i codes = _mm256_mask_add_epi8(low, high, low, _mm256_set1_epi8(0x10));
      store_sub_block(dst + b * quant::kQKK + 32 * j, codes, d * float(s.sc[j]), dmin * float(s.mn[j]));
    }
  }
}

constexpr int kPackedW = 4, kPackedX = 4;
constexpr bool kPackedDecode = true;
constexpr int kTileW = 4, kTileX = 3;

// Weights repacked at load: rows8_k_repacked.hpp.
struct Q5KRec {
  using Block = quant::BlockQ5_K;
  static constexpr int kBits = 5;
};

}  // namespace

extern const WeightKernels kQ5_K = {quant::DType::q5_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile<Step, kTileW, kTileX>, dequantize, kTileW, kTileX,
    {packed_pair_row_bytes, pack_q8_k_pairs, dot_tile_packed<Packed, Step, kPackedW, kPackedX>, kPackedW, kPackedX, kPackedDecode},
    nullptr, {}, nullptr, {dot_tile_k_repacked<Q5KRec, false>, 4}};

}  // namespace ember::cpu::avx512
