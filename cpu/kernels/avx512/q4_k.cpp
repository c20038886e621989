// AVX-512 kernels of Q4_K weights with Q8_K activations (see blocks256.hpp).
#include "cpu/kernels/avx512/packed256.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_KOffset;
  using Wt = WtKOffset;
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_K);
    Wt w;
    load_k_offset_scales(b, w);
    const std::byte* qs = b + offsetof(quant::BlockQ4_K, qs);
    load_nibbles(qs, w.q[0], w.q[1]);
    load_nibbles(qs + 64, w.q[2], w.q[3]);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) { madd_k_offset(acc, w, a); }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Prefill path: two super-blocks per step (packed256.hpp).
struct Q4_KPair {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_K);
  static WtKPair load_pair(const std::byte* b0, const std::byte* b1) {
    WtKPair w;
    load_k_pair(b0, b1, offsetof(quant::BlockQ4_K, qs), w);
    return w;
  }
};
using Packed = PackedKPairStep<Q4_KPair>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const quant::BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const quant::BlockQ4_K& blk = blocks[b];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * g));
      const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
      float* y = dst + b * quant::kQKK + 64 * g;
      store_sub_block(y, lo, d * float(s.sc[2 * g]), dmin * float(s.mn[2 * g]));
      store_sub_block(y + 32, hi, d * float(s.sc[2 * g + 1]), dmin * float(s.mn[2 * g + 1]));
    }
  }
}

constexpr int kPackedW = 4, kPackedX = 4;
constexpr bool kPackedDecode = true;
constexpr int kTileW = 4, kTileX = 4;

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile<Step, kTileW, kTileX>, dequantize, kTileW, kTileX,
    {packed_pair_row_bytes, pack_q8_k_pairs, dot_tile_packed<Packed, Step, kPackedW, kPackedX>, kPackedW, kPackedX, kPackedDecode}};

}  // namespace ember::cpu::avx512
