// AVX-512 kernels of the plain weight types F32, F16 and BF16 (F32 activations).
// Weights are widened to f32 once per step and reused by every activation row of the tile.
#include "cpu/kernels/avx512/simd.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// Shared step kernel: 16 values per step; Widen turns 16 stored weights into f32.
// Step kernel: kVectors registers of 16 values per step, one accumulator each.
// Tiles use one (NW x NX accumulators live at once); the single-row decode path uses
// four, so that four FMA chains hide the FMA latency.
template <class Widen, int kVectors>
struct FloatStep {
  static constexpr int kStep = 16 * kVectors;
  struct Vecs {
    __m512 v[kVectors];
  };
  using Act = Vecs;
  using Wt = Vecs;
  using Acc = Vecs;
  static Acc zero() {
    Acc a;
    for (__m512& v : a.v) v = _mm512_setzero_ps();
    return a;
  }
  static Act load_act(const std::byte* a, int64_t s) {
    Act x;
    for (int i = 0; i < kVectors; ++i) x.v[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(a) + kStep * s + 16 * i);
    return x;
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    Wt x;
    for (int i = 0; i < kVectors; ++i) x.v[i] = Widen::load(w + Widen::kBytes * (kStep * s + 16 * i));
    return x;
  }
  static void madd(Acc& acc, const Wt& w, const Act& x) {
    for (int i = 0; i < kVectors; ++i) acc.v[i] = _mm512_fmadd_ps(w.v[i], x.v[i], acc.v[i]);
  }
  static float reduce(const Acc& acc) {
    __m512 sum = acc.v[0];
    for (int i = 1; i < kVectors; ++i) sum = _mm512_add_ps(sum, acc.v[i]);
    return hsum(sum);
  }
  static float tail(const std::byte* w, const std::byte* a, int64_t first, int64_t n) {
    return Widen::ref_dot(w + Widen::kBytes * first, a + 4 * first, n - first);
  }
};

struct WidenF32 {
  static constexpr int kBytes = 4;
  static __m512 load(const std::byte* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_f32(w, x, n); }
};
struct WidenF16 {
  static constexpr int kBytes = 2;
  static __m512 load(const std::byte* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_f16(w, x, n); }
};
struct WidenBF16 {
  static constexpr int kBytes = 2;
  static __m512 load(const std::byte* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static float ref_dot(const void* w, const void* x, int64_t n) { return quant::ref::dot_bf16(w, x, n); }
};

void copy_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, size_t(n) * 4); }

template <class Widen, void (*RefDequantize)(const void*, float*, int64_t)>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, Widen::load(p + Widen::kBytes * i));
  if (i < n) RefDequantize(p + Widen::kBytes * i, dst + i, n - i);
}

constexpr int kTileW = 4, kTileX = 4;

}  // namespace

// The invariant path (SumOrder::batch_invariant) keeps one accumulator per row and token, whatever the batch.
extern const WeightKernels kF32 = {quant::DType::f32, quant::DType::f32, copy_f32,
                                   dot<FloatStep<WidenF32, 4>>,
                                   dot_tile_split<FloatStep<WidenF32, 4>, FloatStep<WidenF32, 1>, kTileW, kTileX>,
                                   dequantize<WidenF32, quant::ref::dequantize_f32>, kTileW, kTileX, {},
    nullptr, {}, dot_tile_invariant<FloatStep<WidenF32, 1>>};
extern const WeightKernels kF16 = {quant::DType::f16, quant::DType::f32, copy_f32,
                                   dot<FloatStep<WidenF16, 4>>,
                                   dot_tile_split<FloatStep<WidenF16, 4>, FloatStep<WidenF16, 1>, kTileW, kTileX>,
                                   dequantize<WidenF16, quant::ref::dequantize_f16>, kTileW, kTileX, {},
    nullptr, {}, dot_tile_invariant<FloatStep<WidenF16, 1>>};
extern const WeightKernels kBF16 = {quant::DType::bf16, quant::DType::f32, copy_f32,
                                    dot<FloatStep<WidenBF16, 4>>,
                                   dot_tile_split<FloatStep<WidenBF16, 4>, FloatStep<WidenBF16, 1>, kTileW, kTileX>,
                                    dequantize<WidenBF16, quant::ref::dequantize_bf16>, kTileW, kTileX, {},
    nullptr, {}, dot_tile_invariant<FloatStep<WidenBF16, 1>>};

}  // namespace ember::cpu::avx512
