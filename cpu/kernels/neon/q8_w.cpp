// ARM64 kernels of Q8_W weights with Q8_T activations (W8A8, lib/quant/q8_w.cpp), in the
// x86 levels' design (kernels/avx2/q8_w.cpp): one scale per weight row and one per
// token, so a whole row's code products are summed in int32 lanes (dot4: SDOT at the
// dotprod and i8mm levels; at most 4 * 128 * 128 per block and lane, no overflow below
// 2^31 for any row shorter than 130,000 values) and converted and scaled once per row
// and token. At the i8mm level batches take pairs of rows x pairs of tokens with SMMLA,
// also summed in int32 to the end. Integer sums are exact, so every level gives the
// reference's bits.
#include <vector>

#include "common/fp16.hpp"
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct StepQ8W {
  static constexpr int kStep = quant::kQK;
  using Act = ActQ8_0;
  using Wt = WtCodes;
  struct Acc {
    int32x4_t v;
    float scale;
  };
  static Acc zero() { return {vdupq_n_s32(0), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_0::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) {
    const std::byte* b = w + size_t(s) * sizeof(quant::BlockQ8_0);
    return {load_s8(b + 2), load_s8(b + 18), half_at(b)};
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    acc.v = dot4(dot4(acc.v, w.q0, a.y0), w.q1, a.y1);
    acc.scale = w.d * a.d;   // the same in every block of the row and token
  }
  static float reduce(const Acc& acc) { return acc.scale * float(vaddvq_s32(acc.v)); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

#if defined(__ARM_FEATURE_MATMUL_INT8)
// Q8_W rows are stored as Q8_0's, so the pair loads are MmlaQ8_0's; only the sums differ:
// int32 to the end of the row, then one scale.
struct Q8WRows {
  static WtCodes load(const std::byte* row, int64_t s) { return StepQ8W::load_w(row, s); }
};
struct MmlaQ8W : MmlaQ8_0<Q8WRows> {
  struct Acc {
    int32x4_t v;
    float32x4_t scale;
  };
  static Acc zero() { return {vdupq_n_s32(0), vdupq_n_f32(0.0f)}; }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    acc.v = vaddq_s32(acc.v, mmla32(w.q, a.y));
    acc.scale = vmulq_f32(w.d, a.d);
  }
  static float32x4_t finish(const Acc& acc) { return vmulq_f32(acc.scale, vcvtq_f32_s32(acc.v)); }
};
#else
struct MmlaQ8W {};
#endif

// Q8_T, as quant::ref::quantize_q8_t: one max |x| for the row, codes rounded half to
// even (FCVTNS) from x * (127 / max), d = fp16(max / 127) in every block.
void quantize_q8_t(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(dst);
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < n; i += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + i)));
  const float amax = vmaxvq_f32(m);
  const uint16_t d = fp32_to_fp16(amax / 127.0f);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    int32x4_t q[8];
    for (int i = 0; i < 8; ++i) q[i] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + b * quant::kQK + 4 * i), id));
    int8_t* qs = blocks[b].qs;
    for (int h = 0; h < 2; ++h) {
      const int16x8_t a = vcombine_s16(vmovn_s32(q[4 * h]), vmovn_s32(q[4 * h + 1]));
      const int16x8_t c = vcombine_s16(vmovn_s32(q[4 * h + 2]), vmovn_s32(q[4 * h + 3]));
      vst1q_s8(qs + 16 * h, vcombine_s8(vmovn_s16(a), vmovn_s16(c)));
    }
    blocks[b].d = d;
  }
}

constexpr int kTileW = 4, kTileX = 2;

// Butterfly stage H (1 or 2) inside a register of 4 values: lanes j and j + H of each
// pair become a + c and a - c (a = lane j, c = lane j + H).
template <int H>
inline float32x4_t butterfly_in(float32x4_t r) {
  const float32x4_t swapped = H == 1 ? vrev64q_f32(r) : vextq_f32(r, r, 2);
  const uint32x4_t high = H == 1 ? vreinterpretq_u32_u64(vdupq_n_u64(0xFFFFFFFF00000000ull))
                                 : vcombine_u32(vdup_n_u32(0), vdup_n_u32(0xFFFFFFFFu));
  return vbslq_f32(high, vsubq_f32(swapped, r), vaddq_f32(r, swapped));
}

// quant::kv::rotate_groups(x, n, 64) into `out`, bit for bit, as the x86 levels' rotate64:
// the signs, the six butterfly stages in the reference's order (1 and 2 inside the 16
// registers of a group, 4 to 32 between them), then * 1/8.
void rotate64(const float* x, float* out, int64_t n) {
  static_assert(quant::ref::kQ8WRGroup == 64);
  const uint32_t* masks = quant::kv::kRotationSignMasks64.bits;  // 64-byte aligned
  for (int64_t g = 0; g < n; g += 64) {
    float32x4_t r[16];
    for (int k = 0; k < 16; ++k) {
      const uint32x4_t v = veorq_u32(vreinterpretq_u32_f32(vld1q_f32(x + g + 4 * k)), vld1q_u32(masks + 4 * k));
      r[k] = butterfly_in<2>(butterfly_in<1>(vreinterpretq_f32_u32(v)));
    }
    for (int h = 1; h < 16; h *= 2)
      for (int i = 0; i < 16; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const float32x4_t a = r[k], c = r[k + h];
          r[k] = vaddq_f32(a, c);
          r[k + h] = vsubq_f32(a, c);
        }
    for (int k = 0; k < 16; ++k) vst1q_f32(out + g + 4 * k, vmulq_n_f32(r[k], 0.125f));
  }
}

void quantize_q8_tr(const float* x, void* dst, int64_t n) {
  thread_local std::vector<float> rotated;
  rotated.resize(size_t(n));
  rotate64(x, rotated.data(), n);
  quantize_q8_t(rotated.data(), dst, n);
}

void dequantize_wr(const void* src, float* dst, int64_t n) { quant::ref::dequantize_q8_wr(src, dst, n); }

}  // namespace

extern const WeightKernels kQ8_W = {quant::DType::q8_w, quant::DType::q8_t, quantize_q8_t, dot<StepQ8W>,
                                    dot_tile_mmla<StepQ8W, MmlaQ8W, kTileW, kTileX>, quant::ref::dequantize_q8_w,
                                    kTileW, kTileX, {}, nullptr, {}, dot_tile<StepQ8W, kTileW, kTileX>};

// Q8_WR (lib/quant/q8_wr.cpp): Q8_W's kernels on rotated weights, the activations rotated
// by rotate64 (the reference rotation's f32 values at every level), then quantized as Q8_T.
extern const WeightKernels kQ8_WR = {quant::DType::q8_wr, quant::DType::q8_tr, quantize_q8_tr, dot<StepQ8W>,
                                    dot_tile_mmla<StepQ8W, MmlaQ8W, kTileW, kTileX>, dequantize_wr,
                                    kTileW, kTileX, {}, nullptr, {}, dot_tile<StepQ8W, kTileW, kTileX>};

}  // namespace ember::cpu::EMBER_NEON_NS
