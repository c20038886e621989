// Searched-scale Q4_K, Q5_K and Q6_K quantizers (see k_search.hpp).
//
// Byte identity with llama-quantize depends on every float operation below being done
// in the order written, each result rounded to float: products such as `w * l * x` are
// (w * l) * x, sums run from the first value to the last, divisions stay divisions.
#include "quantize/k_search.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fp16.hpp"
#include "quant/blocks.hpp"
#include "quant/dtype.hpp"

namespace ember::quantize {
namespace {

using quant::kQKK;

// Round to nearest, ties to even (the default rounding mode), as an int. Inputs are
// bounded by the callers (|v| < 2^22).
inline int round_even(float v) { return int(std::nearbyint(v)); }

// ---- Q4_K / Q5_K: one sub-block of 32 values, codes in [0, nmax] for x = scale * q - offset ----

struct SearchSteps {
  float first;   // the first trial adds this to nmax (in code units)
  float delta;   // each further trial adds this
  int count;     // trials after the first: count + 1 in all
};

// Finds scale and offset (offset >= 0: the sub-block's min, negated, clipped at 0) that
// minimise sum_i w_i (scale * q_i - offset - x_i)^2 over a grid of trial step sizes:
// each trial rounds x onto the grid (max - min) / (nmax + first + delta * t), then
// solves the weighted least-squares line through the resulting codes; the trial with the
// smallest error wins, starting from plain min/max rounding. Writes the codes to q.
float search_scale_offset(const float* x, const float* w, int nmax, const SearchSteps& steps, uint8_t* q,
                          float* offset) {
  constexpr int n = 32;
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(q, q + n, uint8_t(0));
    *offset = -lo;
    return 0.0f;
  }
  float inv_step = float(nmax) / (hi - lo);
  float scale = 1 / inv_step;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = uint8_t(std::clamp(round_even(inv_step * (x[i] - lo)), 0, nmax));
    const float diff = scale * q[i] + lo - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t trial[n];
  for (int t = 0; t <= steps.count; ++t) {
    inv_step = (steps.first + steps.delta * float(t) + float(nmax)) / (hi - lo);
    float sum_q = 0, sum_q2 = 0, sum_xq = 0;
    for (int i = 0; i < n; ++i) {
      const int code = std::clamp(round_even(inv_step * (x[i] - lo)), 0, nmax);
      trial[i] = uint8_t(code);
      const float wq = w[i] * float(code);
      sum_q += wq;
      sum_q2 += wq * float(code);
      sum_xq += wq * x[i];
    }
    const float det = sum_w * sum_q2 - sum_q * sum_q;
    if (!(det > 0)) continue;
    float trial_scale = (sum_w * sum_xq - sum_x * sum_q) / det;
    float trial_min = (sum_q2 * sum_x - sum_q * sum_xq) / det;
    if (trial_min > 0) {
      trial_min = 0;
      trial_scale = sum_xq / sum_q2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = trial_scale * trial[i] + trial_min - x[i];
      error += w[i] * (diff * diff);
    }
    if (error < best_error) {
      std::memcpy(q, trial, n);
      best_error = error;
      scale = trial_scale;
      lo = trial_min;
    }
  }
  *offset = -lo;
  return scale;
}

// The shared body of Q4_K and Q5_K: fills d, dmin, the packed 6-bit scales and the 256
// codes (each in [0, nmax]) of one super-block.
void quantize_k_offset_block(const float* x, int nmax, const SearchSteps& steps, uint16_t* d_out,
                             uint16_t* dmin_out, uint8_t* packed_scales, uint8_t* codes) {
  float scales[8], offsets[8], weights[32];
  float max_scale = 0, max_offset = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    // Weights: the sub-block's RMS plus each value's magnitude.
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[j] = search_scale_offset(xs, weights, nmax, steps, codes + 32 * j, &offsets[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (offsets[j] > max_offset) max_offset = offsets[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_offset = max_offset > 0 ? 63.f / max_offset : 0.f;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    // Codes are taken modulo 256 before the clip at 63, as an 8-bit store would.
    sc[j] = std::min<uint8_t>(63, uint8_t(round_even(inv_scale * scales[j])));
    mn[j] = std::min<uint8_t>(63, uint8_t(round_even(inv_offset * offsets[j])));
  }
  quant::pack_k_scales(sc, mn, packed_scales);
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_offset / 63.f);
  // Recode every value against the stored (6-bit, fp16) step and offset; a sub-block
  // whose step rounds to zero keeps the codes of the search.
  const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float step = d * float(sc[j]);
    if (step == 0) continue;
    const float offset = dmin * float(mn[j]);
    for (int l = 0; l < 32; ++l)
      codes[32 * j + l] = uint8_t(std::clamp(round_even((x[32 * j + l] + offset) / step), 0, nmax));
  }
}

// ---- Q6_K: 16 sub-blocks of 16 values, symmetric codes in [-32, 31] ----

// The scale s of x = s * c, c in [-32, 31], that maximises the fit (sum w x c)^2 / sum w c^2
// with w = x^2, over 19 trial grids around max|x| / 32 (the value of largest magnitude
// mapped to code -32). Writes c + 32 to q.
float search_scale_symmetric(const float* x, uint8_t* q) {
  constexpr int n = 16, nmax = 32;
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, max = x[i];
  }
  if (amax < 1e-15f) {
    std::fill(q, q + n, uint8_t(0));
    return 0.f;
  }
  auto code_of = [](float inv, float v) { return std::clamp(round_even(inv * v), -nmax, nmax - 1); };
  float inv = float(-nmax) / max;
  float sum_xc = 0, sum_c2 = 0;
  for (int i = 0; i < n; ++i) {
    const int c = code_of(inv, x[i]);
    q[i] = uint8_t(c + nmax);
    const float w = x[i] * x[i];
    sum_xc += w * x[i] * float(c);
    sum_c2 += w * float(c) * float(c);
  }
  float scale = sum_c2 != 0 ? sum_xc / sum_c2 : 0.0f;
  float best = scale * sum_xc;
  for (int t = -9; t <= 9; ++t) {
    if (t == 0) continue;
    inv = -(float(nmax) + 0.1f * float(t)) / max;
    sum_xc = sum_c2 = 0;
    for (int i = 0; i < n; ++i) {
      const int c = code_of(inv, x[i]);
      const float w = x[i] * x[i];
      sum_xc += w * x[i] * float(c);
      sum_c2 += w * float(c) * float(c);
    }
    if (sum_c2 > 0 && sum_xc * sum_xc > best * sum_c2) {
      for (int i = 0; i < n; ++i) q[i] = uint8_t(code_of(inv, x[i]) + nmax);
      scale = sum_xc / sum_c2;
      best = scale * sum_xc;
    }
  }
  return scale;
}

void quantize_q6_k_block(const float* x, quant::BlockQ6_K& blk) {
  uint8_t codes[kQKK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = search_scale_symmetric(x + 16 * j, codes + 16 * j);
    const float abs_scale = std::fabs(scales[j]);
    if (abs_scale > max_abs_scale) max_abs_scale = abs_scale, max_scale = scales[j];
  }
  std::memset(&blk, 0, sizeof blk);
  if (max_abs_scale < 1e-15f) return;   // all zero: d = 0, every code 0
  // The sub-block scale of largest magnitude maps to int8 -128 (clipped to 127 when positive).
  const float inv = -128.f / max_scale;
  blk.d = fp32_to_fp16(1 / inv);
  for (int j = 0; j < 16; ++j) blk.scales[j] = int8_t(std::min(127, round_even(inv * scales[j])));
  const float d = fp16_to_fp32(blk.d);
  for (int j = 0; j < 16; ++j) {
    const float step = d * float(blk.scales[j]);
    if (step == 0) continue;
    for (int l = 0; l < 16; ++l)
      codes[16 * j + l] = uint8_t(std::clamp(round_even(x[16 * j + l] / step), -32, 31) + 32);
  }
  // Layout (blocks.hpp): per half h of 128 values, low nibbles of values r and r + 64 share
  // ql[64h + r] (r < 64), and the top two bits of values r, r + 32, r + 64, r + 96 share qh[32h + r].
  for (int h = 0; h < 2; ++h) {
    const uint8_t* c = codes + 128 * h;
    uint8_t* ql = blk.ql + 64 * h;
    uint8_t* qh = blk.qh + 32 * h;
    for (int r = 0; r < 32; ++r) {
      ql[r] = uint8_t((c[r] & 15) | ((c[r + 64] & 15) << 4));
      ql[r + 32] = uint8_t((c[r + 32] & 15) | ((c[r + 96] & 15) << 4));
      qh[r] = uint8_t((c[r] >> 4) | ((c[r + 32] >> 4) << 2) | ((c[r + 64] >> 4) << 4) | ((c[r + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_q4_k_searched(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    quant::BlockQ4_K& blk = blocks[b];
    uint8_t codes[kQKK];
    uint16_t d, dmin;
    quantize_k_offset_block(src + b * kQKK, 15, {-1.0f, 0.1f, 20}, &d, &dmin, blk.scales, codes);
    blk.d = d;
    blk.dmin = dmin;
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) blk.qs[32 * g + l] = uint8_t(codes[64 * g + l] | (codes[64 * g + 32 + l] << 4));
  }
}

void quantize_q5_k_searched(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ5_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    quant::BlockQ5_K& blk = blocks[b];
    uint8_t codes[kQKK];
    uint16_t d, dmin;
    quantize_k_offset_block(src + b * kQKK, 31, {-0.5f, 0.1f, 15}, &d, &dmin, blk.scales, codes);
    blk.d = d;
    blk.dmin = dmin;
    std::memset(blk.qh, 0, sizeof blk.qh);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l)
        blk.qs[32 * g + l] = uint8_t((codes[64 * g + l] & 15) | ((codes[64 * g + 32 + l] & 15) << 4));
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) blk.qh[l] = uint8_t(blk.qh[l] | ((codes[32 * j + l] >> 4) << j));
  }
}

void quantize_q6_k_searched(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) quantize_q6_k_block(src + b * kQKK, blocks[b]);
}

}  // namespace ember::quantize
