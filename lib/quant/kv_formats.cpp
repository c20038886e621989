// Reference arithmetic of the KV-cache formats; the layout is specified in kv_formats.hpp.
#include "quant/kv_formats.hpp"

#include "quant/kv_pages.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp16.hpp"

namespace ember::quant::kv {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// f16 nearest to `v` that is <= v (toward -inf).
uint16_t fp16_round_down(float v) {
  uint16_t h = fp32_to_fp16(v);
  if (fp16_to_fp32(h) > v) {
    if (h & 0x8000u) {
      ++h;  // more negative
    } else {
      h = h == 0 ? uint16_t(0x8001u) : uint16_t(h - 1);
    }
  }
  return h;
}

// f16 nearest to `v` that is >= v (toward +inf).
uint16_t fp16_round_up(float v) {
  uint16_t h = fp32_to_fp16(v);
  if (fp16_to_fp32(h) < v) {
    if (h & 0x8000u) {
      h = h == 0x8000u ? uint16_t(1) : uint16_t(h - 1);  // less negative
    } else {
      ++h;
    }
  }
  return h;
}

// round_half_even(v) clamped to [lo, hi] (|lo|, |hi| < 2^22); NaN becomes lo. Inline and
// without branches, so that the loops that call it vectorize: std::nearbyint is a
// library call on the x86-64 baseline, and the INT4 clipping search makes thousands of
// these per group of every key and value stored. Below 2^22 in magnitude, adding and
// subtracting 1.5 * 2^23 rounds to an integer, to nearest with ties to even (the sum's
// unit in the last place is 1); larger values are first clamped to +-2^22, which the
// final clamp maps where it maps them (checked against std::nearbyint for every float,
// for the [0, 15] and [-127, 127] ranges used here). NaN stays NaN until the last line.
// (Plain comparisons rather than std::fmin/fmax, which compile to library calls without
// -ffinite-math-only.)
int round_clamp(float v, float lo, float hi) {
  constexpr float kMagic = 12582912.0f, kBig = 4194304.0f;  // 1.5 * 2^23, 2^22
  float c = v > kBig ? kBig : v;
  c = c < -kBig ? -kBig : c;
  const float r = (c + kMagic) - kMagic;
  return int(!(r >= lo) ? lo : (r > hi ? hi : r));
}

}  // namespace

int group_size(DType type) {
  switch (type) {
    case DType::kv_q8_g32:
    case DType::kv_q4_g32:
    case DType::kv_q4o_g32:
      return 32;
    case DType::kv_q8_g64:
    case DType::kv_q4_g64:
    case DType::kv_q4o_g64:
      return 64;
    default:
      return 0;
  }
}

void quantize_q8(const float* src, void* dst, int64_t n, int group) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / group; ++b, out += group + 2) {
    const float* x = src + b * group;
    float amax = 0.0f;
    for (int j = 0; j < group; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;  // NaN ignored
    const uint16_t d = fp32_to_fp16(amax / 127.0f);
    const float scale = fp16_to_fp32(d);
    store_u16(out, d);
    auto* q = reinterpret_cast<int8_t*>(out + 2);
    for (int j = 0; j < group; ++j) q[j] = scale > 0.0f ? int8_t(round_clamp(x[j] / scale, -127.0f, 127.0f)) : 0;
  }
}

void dequantize_q8(const void* src, float* dst, int64_t n, int group) {
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / group; ++b, in += group + 2) {
    const float d = fp16_to_fp32(load_u16(in));
    const auto* q = reinterpret_cast<const int8_t*>(in + 2);
    for (int j = 0; j < group; ++j) dst[b * group + j] = d * float(q[j]);
  }
}

namespace {

// sigma_j = -1 where bit j of kSigns is set (G = 64 only): the first 64 bits of the
// fraction of pi.
constexpr uint64_t kSigns = kRotationSigns64;

// In place, per group: v = H_G v / sqrt(G), the butterflies then one multiply.
void hadamard_groups(float* v, int64_t n, int group) {
  // f32(1 / sqrt(G)): 0x3e3504f3 for 32; 0.125 exactly for 64.
  const float norm = group == 64 ? 0.125f : 0.17677669529663688f;
  for (int64_t b = 0; b < n / group; ++b) {
    float* x = v + b * group;
    for (int h = 1; h < group; h *= 2)
      for (int i = 0; i < group; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = x[j], c = x[j + h];
          x[j] = a + c;
          x[j + h] = a - c;
        }
    for (int j = 0; j < group; ++j) x[j] *= norm;
  }
}

void flip_signs(float* v, int64_t n, int group) {
  for (int64_t i = 0; i < n; ++i)
    if ((kSigns >> (i % group)) & 1) v[i] = -v[i];
}

}  // namespace

void rotate_groups(float* v, int64_t n, int group) {
  if (group == 64) flip_signs(v, n, group);
  hadamard_groups(v, n, group);
}

void unrotate_groups(float* v, int64_t n, int group) {
  hadamard_groups(v, n, group);
  if (group == 64) flip_signs(v, n, group);
}

namespace {

// Codes of `y` for offset M and scale D, and their squared error.
float q4_codes(const float* y, int group, float offset, float scale, uint8_t* codes) {
  float err = 0.0f;
  for (int j = 0; j < group; ++j) {
    const int c = scale > 0.0f ? round_clamp((y[j] - offset) / scale, 0.0f, 15.0f) : 0;
    codes[j] = uint8_t(c);
    const float e = scale * float(c) + offset - y[j];
    err += e * e;
  }
  return err;
}

// Clipping candidates and refit rounds per candidate: about 3 % less squared error than a
// single fit on Gaussian groups (the stored values' distribution), at ~4x the work.
constexpr int kCandidates = 31;
constexpr int kRefits = 3;

}  // namespace

namespace {

// Four lanes of floats (GCC/Clang vector extension: SSE2 on x86-64, NEON on ARM64).
using Float4 = float __attribute__((vector_size(16)));

// round_clamp (above) lane by lane, the same operations, as a float (an integer value).
inline Float4 round_clamp4(Float4 v, float lo, float hi) {
  constexpr float kMagic = 12582912.0f, kBig = 4194304.0f;
  const Float4 big = Float4{} + kBig, magic = Float4{} + kMagic, lo4 = Float4{} + lo, hi4 = Float4{} + hi;
  Float4 c = v > big ? big : v;
  c = c < -big ? -big : c;
  const Float4 r = (c + magic) - magic;
  return r >= lo4 ? (r > hi4 ? hi4 : r) : lo4;
}

// One INT4 group: y = R_G x, then the scale, minimum and codes of the reference quantizer
// (kv_formats.hpp); d and m go to dm[0, 4), the packed codes to codes[0, G / 2).
void quantize_q4_group(const float* x, uint8_t* dm, uint8_t* packed, int group) {
  const int half = group / 2;
  float y[64];
  uint8_t best_codes[64];
  std::memcpy(y, x, sizeof(float) * size_t(group));
  rotate_groups(y, group, group);
  float lo = INFINITY, hi = -INFINITY;
  for (int j = 0; j < group; ++j) lo = y[j] < lo ? y[j] : lo, hi = y[j] > hi ? y[j] : hi;  // NaN ignored
  // The min/max choice: every value inside [M, M + 15 D].
  uint16_t m = fp16_round_down(lo);
  uint16_t d = fp16_round_up((hi - fp16_to_fp32(m)) / 15.0f);
  float best = q4_codes(y, group, fp16_to_fp32(m), fp16_to_fp32(d), best_codes);
  // Candidates that clip the tails a little: codes for a scale of (13 + 0.1 c) / range,
  // then up to kRefits rounds of (d, m) = the least-squares fit for the codes, rounded to
  // f16, and new codes for that (d, m) (a Lloyd iteration on the uniform grid; it stops
  // early once the codes no longer change). The best fit wins, the first in the order
  // (candidate, round) among equals.
  //
  // A candidate's chain of fits does not depend on the others, so four chains run at once,
  // one per lane, each lane doing the scalar operations of one chain in their order (the
  // sums are per lane, in j order: the same bits); the winner is then kept by (error,
  // order), which picks what the one-chain-at-a-time search picked (the same bytes for
  // 60,000 groups with NaN, infinities, subnormals, constants and f16 overflow among them,
  // in a one-off check). Its sums are chains of dependent adds, which four lanes share:
  // 1.4-2x faster on a Zen 3 VM (docs/long-context.md, 2026-12-08).
  const float range = hi - lo;
  if (range > 0.0f && best > 0.0f) {
    float sy = 0.0f;
    for (int j = 0; j < group; ++j) sy += y[j];
    int best_index = -1;  // (candidate, round) as candidate * (kRefits + 1) + round
    Float4 levels[64], codes[64];
    for (int c0 = 0; c0 < kCandidates; c0 += 4) {
      Float4 inv{};
      bool active[4];
      for (int l = 0; l < 4; ++l) {
        active[l] = c0 + l < kCandidates;
        inv[l] = (13.0f + 0.1f * float(c0 + l)) / range;
      }
      for (int j = 0; j < group; ++j) levels[j] = round_clamp4((y[j] - lo) * inv, 0.0f, 15.0f);
      for (int round = 0; round <= kRefits; ++round) {
        // Per lane, the least-squares (d, m) of y ~ d * l + m for its codes l, each rounded
        // to the nearest f16; the chain ends when the codes are all equal or d does not
        // come out > 0.
        Float4 sl{}, sll{}, sly{};
        for (int j = 0; j < group; ++j) {
          const Float4 v = levels[j];
          sl += v, sll += v * v, sly += v * y[j];
        }
        Float4 offset = Float4{} + 0.0f, scale = Float4{} + 1.0f;
        uint16_t cd[4] = {}, cm[4] = {};
        for (int l = 0; l < 4; ++l) {
          if (!active[l]) continue;
          const float det = float(group) * sll[l] - sl[l] * sl[l];
          if (!(det > 0.0f)) {
            active[l] = false;
            continue;
          }
          cd[l] = fp32_to_fp16((float(group) * sly[l] - sl[l] * sy) / det);
          cm[l] = fp32_to_fp16((sll[l] * sy - sl[l] * sly[l]) / det);
          if (!(fp16_to_fp32(cd[l]) > 0.0f)) {
            active[l] = false;
            continue;
          }
          offset[l] = fp16_to_fp32(cm[l]);
          scale[l] = fp16_to_fp32(cd[l]);
        }
        if (!(active[0] || active[1] || active[2] || active[3])) break;
        // Codes and squared errors (q4_codes' operations per lane).
        Float4 err{};
        for (int j = 0; j < group; ++j) {
          const Float4 cj = round_clamp4((y[j] - offset) / scale, 0.0f, 15.0f);
          codes[j] = cj;
          const Float4 e = scale * cj + offset - y[j];
          err += e * e;
        }
        for (int l = 0; l < 4; ++l) {
          if (!active[l]) continue;
          const int index = (c0 + l) * (kRefits + 1) + round;
          if (err[l] < best || (err[l] == best && index < best_index)) {
            best = err[l], best_index = index, d = cd[l], m = cm[l];
            for (int j = 0; j < group; ++j) best_codes[j] = uint8_t(codes[j][l]);
          }
          bool same = true;
          for (int j = 0; j < group && same; ++j) same = codes[j][l] == levels[j][l];
          if (same) active[l] = false;
        }
        for (int j = 0; j < group; ++j) levels[j] = codes[j];
      }
    }
  }
  store_u16(dm, d);
  store_u16(dm + 2, m);
  for (int j = 0; j < half; ++j) packed[j] = uint8_t(best_codes[j] | (best_codes[j + half] << 4));
}

}  // namespace

void quantize_q4(const float* src, void* dst, int64_t n, int group) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / group; ++b, out += group / 2 + 4) quantize_q4_group(src + b * group, out, out + 4, group);
}

void quantize_q4o(const float* src, void* dst, int64_t n, int group) {
  auto* out = static_cast<uint8_t*>(dst);
  float x[64];
  for (int64_t b = 0; b < n / group; ++b, out += q4o_block_bytes(group)) {
    std::memcpy(x, src + b * group, sizeof(float) * size_t(group));
    // The kOutliers largest |x[j]| (the first on ties), largest first.
    bool taken[64] = {};
    for (int k = 0; k < kOutliers; ++k) {
      int best = -1;
      for (int j = 0; j < group; ++j)
        if (!taken[j] && (best < 0 || std::fabs(x[j]) > std::fabs(x[best]))) best = j;
      taken[best] = true;
      const uint16_t v = fp32_to_fp16(x[best]);
      store_u16(out + 2 * k, v);
      out[2 * kOutliers + k] = uint8_t(best);
      x[best] -= fp16_to_fp32(v);  // the f16 rounding error stays with the codes
    }
    quantize_q4_group(x, out + 3 * kOutliers, out + 3 * kOutliers + 4, group);
  }
}

void add_q4o_outliers(const void* block, float* y, int group) {
  const auto* in = static_cast<const uint8_t*>(block);
  const float norm = group == 64 ? 0.125f : 0.17677669529663688f;
  for (int k = 0; k < kOutliers; ++k) {
    const int i = in[2 * kOutliers + k];
    float a = norm * fp16_to_fp32(load_u16(in + 2 * k));
    if (group == 64 && ((kSigns >> i) & 1)) a = -a;
    for (int j = 0; j < group; ++j) y[j] = (__builtin_popcount(unsigned(i & j)) & 1) ? y[j] - a : y[j] + a;
  }
}

void decode_q4o_stored(const void* src, float* dst, int64_t n, int group) {
  const auto* in = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / group; ++b, in += q4o_block_bytes(group)) {
    decode_q4_stored(in + 3 * kOutliers, dst + b * group, group, group);
    add_q4o_outliers(in, dst + b * group, group);
  }
}

void dequantize_q4o(const void* src, float* dst, int64_t n, int group) {
  decode_q4o_stored(src, dst, n, group);
  unrotate_groups(dst, n, group);
}

void decode_q4_stored(const void* src, float* dst, int64_t n, int group) {
  const auto* in = static_cast<const uint8_t*>(src);
  const int half = group / 2;
  for (int64_t b = 0; b < n / group; ++b, in += half + 4) {
    const float d = fp16_to_fp32(load_u16(in)), m = fp16_to_fp32(load_u16(in + 2));
    float* x = dst + b * group;
    for (int j = 0; j < half; ++j) {
      x[j] = d * float(in[4 + j] & 15) + m;
      x[j + half] = d * float(in[4 + j] >> 4) + m;
    }
  }
}

void dequantize_q4(const void* src, float* dst, int64_t n, int group) {
  decode_q4_stored(src, dst, n, group);
  unrotate_groups(dst, n, group);
}

// Per-channel key pages (kv_pages.hpp).
void quantize_key_page(const float* src, int n_rows, int page_tokens, int64_t width, void* page) {
  auto* out = static_cast<uint8_t*>(page);
  uint8_t* codes = out + 4 * width;
  std::memset(codes, 0, size_t(page_tokens) * size_t(width) / 2);
  for (int64_t c = 0; c < width; ++c) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n_rows; ++j) {
      const float x = src[j * width + c];
      lo = x < lo ? x : lo, hi = x > hi ? x : hi;  // NaN ignored
    }
    const uint16_t m = fp16_round_down(lo);
    const float mf = fp16_to_fp32(m);
    const uint16_t d = hi > mf ? fp16_round_up((hi - mf) / 15.0f) : uint16_t(0);
    const float df = fp16_to_fp32(d);
    store_u16(out + 2 * c, m);
    store_u16(out + 2 * (width + c), d);
    if (df == 0.0f) continue;
    const int shift = int(c & 1) * 4;
    for (int j = 0; j < n_rows; ++j) {
      const int q = round_clamp((src[j * width + c] - mf) / df, 0.0f, 15.0f);
      codes[size_t(j) * size_t(width / 2) + size_t(c / 2)] |= uint8_t(q << shift);
    }
  }
}

void dequantize_key_page_row(const void* page, int j, int64_t width, float* dst) {
  const auto* in = static_cast<const uint8_t*>(page);
  const uint8_t* row = in + 4 * width + size_t(j) * size_t(width / 2);
  for (int64_t c = 0; c < width; ++c) {
    const float m = fp16_to_fp32(load_u16(in + 2 * c)), d = fp16_to_fp32(load_u16(in + 2 * (width + c)));
    const int q = (row[c / 2] >> (int(c & 1) * 4)) & 15;
    dst[c] = d * float(q) + m;
  }
}

void key_page_scores(const float* q, int64_t c0, int64_t n, const void* page, int64_t width, int n_rows,
                     float scale, float* s) {
  const auto* in = static_cast<const uint8_t*>(page);
  // The per-page part: the query scaled by the steps, and its dot product with the minimums.
  std::vector<float> qs(static_cast<size_t>(n));
  float base = 0.0f;
  for (int64_t c = 0; c < n; ++c) {
    qs[size_t(c)] = q[c] * fp16_to_fp32(load_u16(in + 2 * (width + c0 + c)));
    base += q[c] * fp16_to_fp32(load_u16(in + 2 * (c0 + c)));
  }
  for (int j = 0; j < n_rows; ++j) {
    const uint8_t* row = in + 4 * width + size_t(j) * size_t(width / 2) + size_t(c0 / 2);
    float acc = 0.0f;
    for (int64_t c = 0; c < n; ++c) acc += qs[size_t(c)] * float((row[c / 2] >> (int(c & 1) * 4)) & 15);
    s[j] = scale * (acc + base);
  }
}

}  // namespace ember::quant::kv

namespace ember::quant::ref {
void quantize_kv_q8_g32(const float* src, void* dst, int64_t n) { kv::quantize_q8(src, dst, n, 32); }
void dequantize_kv_q8_g32(const void* src, float* dst, int64_t n) { kv::dequantize_q8(src, dst, n, 32); }
void quantize_kv_q8_g64(const float* src, void* dst, int64_t n) { kv::quantize_q8(src, dst, n, 64); }
void dequantize_kv_q8_g64(const void* src, float* dst, int64_t n) { kv::dequantize_q8(src, dst, n, 64); }
void quantize_kv_q4_g32(const float* src, void* dst, int64_t n) { kv::quantize_q4(src, dst, n, 32); }
void dequantize_kv_q4_g32(const void* src, float* dst, int64_t n) { kv::dequantize_q4(src, dst, n, 32); }
void quantize_kv_q4_g64(const float* src, void* dst, int64_t n) { kv::quantize_q4(src, dst, n, 64); }
void dequantize_kv_q4_g64(const void* src, float* dst, int64_t n) { kv::dequantize_q4(src, dst, n, 64); }
void quantize_kv_q4o_g32(const float* src, void* dst, int64_t n) { kv::quantize_q4o(src, dst, n, 32); }
void dequantize_kv_q4o_g32(const void* src, float* dst, int64_t n) { kv::dequantize_q4o(src, dst, n, 32); }
void quantize_kv_q4o_g64(const float* src, void* dst, int64_t n) { kv::quantize_q4o(src, dst, n, 64); }
void dequantize_kv_q4o_g64(const void* src, float* dst, int64_t n) { kv::dequantize_q4o(src, dst, n, 64); }
}  // namespace ember::quant::ref
