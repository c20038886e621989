// The AVX-512 level's F16 attention row kernels (OpKernels::dot_f16, axpy_f16,
// pv_lanes_f16); its f32 ones are the AVX2 level's (tables.cpp).
#include <algorithm>
#include <vector>

#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {

float dot_f16(const float* q, const uint16_t* k, int n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i))), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i + 16))), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16(float* acc, float w, const uint16_t* v, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, x, _mm512_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}

}  // namespace ember::cpu::avx512

namespace ember::cpu::avx512 {
namespace {

// NC slices of 16 columns for G heads of one lane: the partial sums stay in registers
// while the lane's rows (`idx`, in row order) are added, each row's slices converted once.
template <int NC, int G>
void lane_block(const float* w, int ldw, const uint16_t* const* rows, const int* idx, int count, int col,
                float* const* acc_rows) {
  __m512 acc[G][NC];
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < NC; ++k) acc[g][k] = _mm512_loadu_ps(acc_rows[g] + 16 * k);
  for (int i = 0; i < count; ++i) {
    const int j = idx[i];
    const uint16_t* v = rows[j] + col;
    __m512 x[NC];
    for (int k = 0; k < NC; ++k) x[k] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 16 * k)));
    for (int g = 0; g < G; ++g) {
      const __m512 wv = _mm512_set1_ps(w[size_t(g) * size_t(ldw) + size_t(j)]);
      for (int k = 0; k < NC; ++k) acc[g][k] = _mm512_fmadd_ps(wv, x[k], acc[g][k]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int k = 0; k < NC; ++k) _mm512_storeu_ps(acc_rows[g] + 16 * k, acc[g][k]);
}

template <int G>
void lane_block_g(int nc, const float* w, int ldw, const uint16_t* const* rows, const int* idx, int count, int col,
                  float* const* acc_rows) {
  switch (nc) {
    case 1: lane_block<1, G>(w, ldw, rows, idx, count, col, acc_rows); break;
    case 2: lane_block<2, G>(w, ldw, rows, idx, count, col, acc_rows); break;
    case 3: lane_block<3, G>(w, ldw, rows, idx, count, col, acc_rows); break;
    default: lane_block<4, G>(w, ldw, rows, idx, count, col, acc_rows); break;
  }
}

}  // namespace

// Lane by lane: the rows of one lane in their order (a stable counting sort by lane), up
// to 4 heads x 64 columns of that lane's partial sums in registers. Each element gets
// axpy_f16's fmadd(w, v, acc) for the same rows in the same order, so the sums are the
// same bits as the AVX2 level's row-by-row loop; the partials are loaded and stored once
// per lane instead of once per row.
void pv_lanes_f16(const float* w, int ldw, int group, const uint16_t* const* rows, const int32_t* lane, int n,
                  int c0, int cols, int lanes, float* part) {
  const size_t head_stride = size_t(lanes) * size_t(cols);
  thread_local std::vector<int> start, order;
  start.assign(size_t(lanes) + 1, 0);
  for (int j = 0; j < n; ++j) ++start[size_t(lane[j]) + 1];
  for (int l = 0; l < lanes; ++l) start[size_t(l) + 1] += start[size_t(l)];
  order.resize(size_t(n));
  {
    thread_local std::vector<int> fill;
    fill.assign(start.begin(), start.end() - 1);
    for (int j = 0; j < n; ++j) order[size_t(fill[size_t(lane[j])]++)] = j;
  }
  for (int l = 0; l < lanes; ++l) {
    const int count = start[size_t(l) + 1] - start[size_t(l)];
    if (count == 0) continue;
    const int* idx = order.data() + start[size_t(l)];
    for (int c = 0; c < cols; c += 64) {
      const int nc = std::min(64, cols - c) / 16;
      for (int g0 = 0; g0 < group; g0 += 4) {
        const int gn = std::min(4, group - g0);
        float* acc_rows[4];
        for (int g = 0; g < gn; ++g) acc_rows[g] = part + size_t(g0 + g) * head_stride + size_t(l) * size_t(cols) + size_t(c);
        const float* wg = w + size_t(g0) * size_t(ldw);
        switch (gn) {
          case 1: lane_block_g<1>(nc, wg, ldw, rows, idx, count, c0 + c, acc_rows); break;
          case 2: lane_block_g<2>(nc, wg, ldw, rows, idx, count, c0 + c, acc_rows); break;
          case 3: lane_block_g<3>(nc, wg, ldw, rows, idx, count, c0 + c, acc_rows); break;
          default: lane_block_g<4>(nc, wg, ldw, rows, idx, count, c0 + c, acc_rows); break;
        }
      }
    }
  }
}

}  // namespace ember::cpu::avx512
