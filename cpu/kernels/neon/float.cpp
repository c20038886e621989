// ARM64 kernels of the plain weight types F32, F16 and BF16 (F32 activations).
// Weights are widened to f32 once per step and reused by every activation row of the tile.
#include "cpu/kernels/neon/simd.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// Step kernel: kVectors registers of 4 values per step, one accumulator each. Tiles
// use two (NW x NX x 2 accumulators live at once, of NEON's 32 registers); the
// single-row decode path uses four FMA chains to hide the FMA latency.
template <class Widen, int kVectors>
struct FloatStep {
  static constexpr int kStep = 4 * kVectors;
  struct Vecs {
    float32x4_t v[kVectors];
  };
  using Act = Vecs;
  using Wt = Vecs;
  using Acc = Vecs;
  static Acc zero() {
    Acc a;
    for (float32x4_t& v : a.v) v = vdupq_n_f32(0.0f);
    return a;
  }
  static Act load_act(const std::byte* a, int64_t s) {
    Act x;
    for (int i = 0; i < kVectors; ++i) x.v[i] = vld1q_f32(reinterpret_cast<const float*>(a) + kStep * s + 4 * i);
    return x;
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    Wt x;
    for (int i = 0; i < kVectors; ++i) x.v[i] = Widen::load(w + Widen::kBytes * (kStep * s + 4 * i));
    return x;
  }
  static void madd(Acc& acc, const Wt& w, const Act& x) {
    for (int i = 0; i < kVectors; ++i) acc.v[i] = vfmaq_f32(acc.v[i], w.v[i], x.v[i]);
  }
  static float reduce(const Acc& acc) {
    float32x4_t sum = acc.v[0];
    for (int i = 1; i < kVectors; ++i) sum = vaddq_f32(sum, acc.v[i]);
    return vaddvq_f32(sum);
  }
  static float tail(const std::byte* w, const std::byte* a, int64_t first, int64_t n) {
    return Widen::ref_dot(w + Widen::kBytes * first, a + 4 * first, n - first);
  }
};

struct WidenF32 {
  static constexpr int kBytes = 4;
  static float32x4_t load(const std::byte* p) { return vld1q_f32(reinterpret_cast<const float*>(p)); }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_f32(w, x, n); }
};
struct WidenF16 {
  static constexpr int kBytes = 2;
  static float32x4_t load(const std::byte* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
  }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_f16(w, x, n); }
};
struct WidenBF16 {
  static constexpr int kBytes = 2;
  // bf16 is the upper half of an f32.
  static float32x4_t load(const std::byte* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
  }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_bf16(w, x, n); }
};

void copy_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, size_t(n) * 4); }

template <class Widen, void (*RefDequantize)(const void*, float*, int64_t)>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, Widen::load(p + Widen::kBytes * i));
  if (i < n) RefDequantize(p + Widen::kBytes * i, dst + i, n - i);
}

constexpr int kTileW = 4, kTileX = 2;

template <class Widen>
using Decode = FloatStep<Widen, 4>;
template <class Widen>
using Tile = FloatStep<Widen, 2>;

}  // namespace

// The invariant tile (SumOrder::batch_invariant) keeps the tiles' two accumulators for one token too.
extern const WeightKernels kF32 = {quant::DType::f32, quant::DType::f32, copy_f32, dot<Decode<WidenF32>>,
                                   dot_tile_split<Decode<WidenF32>, Tile<WidenF32>, kTileW, kTileX>,
                                   dequantize<WidenF32, quant::ref::dequantize_f32>, kTileW, kTileX, {}, nullptr, {},
                                   dot_tile<Tile<WidenF32>, kTileW, kTileX>};
extern const WeightKernels kF16 = {quant::DType::f16, quant::DType::f32, copy_f32, dot<Decode<WidenF16>>,
                                   dot_tile_split<Decode<WidenF16>, Tile<WidenF16>, kTileW, kTileX>,
                                   dequantize<WidenF16, quant::ref::dequantize_f16>, kTileW, kTileX, {}, nullptr, {},
                                   dot_tile<Tile<WidenF16>, kTileW, kTileX>};
extern const WeightKernels kBF16 = {quant::DType::bf16, quant::DType::f32, copy_f32, dot<Decode<WidenBF16>>,
                                    dot_tile_split<Decode<WidenBF16>, Tile<WidenBF16>, kTileW, kTileX>,
                                    dequantize<WidenBF16, quant::ref::dequantize_bf16>, kTileW, kTileX, {}, nullptr,
                                    {}, dot_tile<Tile<WidenBF16>, kTileW, kTileX>};

}  // namespace ember::cpu::EMBER_NEON_NS
