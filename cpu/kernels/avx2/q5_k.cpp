// AVX2 kernels of Q5_K weights with Q8_K activations (see blocks256.hpp).
// The fifth bit of code l of sub-block j is bit j of qh[l]: a 16-bit shift brings it
// to bit 4 of the same byte (the bits a 16-bit shift carries across bytes are masked off).
#include "cpu/kernels/avx2/blocks256.hpp"
#include "cpu/kernels/avx2/rows8_k.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

inline void load_codes(const std::byte* block, WtKOffset& w) {
  load_k_nibbles(block + offsetof(quant::BlockQ5_K, qs), w);
  const __m256i qh = load256(block + offsetof(quant::BlockQ5_K, qh));
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  w.q[0] = _mm256_or_si256(w.q[0], _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
  w.q[1] = _mm256_or_si256(w.q[1], _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
  w.q[2] = _mm256_or_si256(w.q[2], _mm256_and_si256(_mm256_slli_epi16(qh, 2), bit4));
  w.q[3] = _mm256_or_si256(w.q[3], _mm256_and_si256(_mm256_slli_epi16(qh, 1), bit4));
  w.q[4] = _mm256_or_si256(w.q[4], _mm256_and_si256(qh, bit4));
  w.q[5] = _mm256_or_si256(w.q[5], _mm256_and_si256(_mm256_srli_epi16(qh, 1), bit4));
  w.q[6] = _mm256_or_si256(w.q[6], _mm256_and_si256(_mm256_srli_epi16(qh, 2), bit4));
  w.q[7] = _mm256_or_si256(w.q[7], _mm256_and_si256(_mm256_srli_epi16(qh, 3), bit4));
}

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtKOffset;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_K);
    Wt w;
    load_k_offset_scales(b, w);
    load_codes(b, w);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) { madd_k_offset(acc, w, a); }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b, p += sizeof(quant::BlockQ5_K)) {
    const auto& blk = *reinterpret_cast<const quant::BlockQ5_K*>(p);
    const float d = half(blk.d), dmin = half(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    WtKOffset w;
    load_codes(p, w);
    for (int j = 0; j < 8; ++j)
      store_sub_block(dst + b * quant::kQKK + 32 * j, w.q[j], d * float(s.sc[j]), dmin * float(s.mn[j]));
  }
}

constexpr int kTileW = 2, kTileX = 2;
constexpr DotTileFn kPlain = dot_tile<Step, kTileW, kTileX>;

// Batches: rows8_k.hpp (one FMA per super-block and 8 rows).
struct Q5KRows8 {
  using Block = quant::BlockQ5_K;
  static constexpr int kBits = 5;
};

}  // namespace

extern const WeightKernels kQ5_K = {quant::DType::q5_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_rows8_k<Q5KRows8, false, kPlain>, dequantize, kRows8, 4, {}, nullptr,
                                    {}, kPlain, {dot_tile_rows8_k_repacked<Q5KRows8, false>, 4}};

}  // namespace ember::cpu::EMBER_AVX2_NS
