// The loops shared by every SIMD dot kernel, walking rows along in steps.
//
// A format plugs in a "step kernel" K (see avx2/*.cpp, avx512/*.cpp):
//   K::kStep                     values consumed per step
//   K::Act  K::load_act(a, s)    activation row `a`, step s: what every weight row reuses
//   K::Wt   K::load_w(w, s)      weight row `w`, step s: unpacked once, reused by every token
//   K::Acc  K::zero()
//   void K::madd(Acc&, const Wt&, const Act&)
//   float K::reduce(const Acc&)
//   float K::tail(w, a, first, n) dot of values [first, n) (n not a multiple of kStep)
//
// tile_fixed: a register tile of NW weight rows x NX activation rows; each loaded
// weight step serves NX tokens and each activation step NW rows (prefill).
// rows_sequential: one activation row, weight rows one after another (decode).
//
// Everything here has internal linkage: this header is compiled once per ISA level
// with different target flags, and instances must not be merged across levels.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ember::cpu {
namespace {

// Decode streams each weight row once, and the hardware prefetchers of the machines
// measured (docs/performance.md) do not run far enough ahead of it: a software prefetch
// this many bytes ahead of the step being multiplied doubled the AVX2 Q4_K decode
// kernel's speed. Rows are contiguous, so the address ahead is in the next rows.
constexpr size_t kPrefetchAhead = 4096;

// Prefetches the `bytes` (one step of a weight row) that lie kPrefetchAhead past p.
inline void prefetch_step(const std::byte* p, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(p + kPrefetchAhead + offset);
}

// Calls f(s) for the steps [s0, s1) of the weight row at `row` (`step` bytes each),
// prefetching as prefetch_step does. Steps of at most a line (the 32-value formats:
// 18-34 bytes) get one prefetch each and no inner loop, unrolled: their own work is a
// dozen instructions, and the loop bookkeeping cost as much (AVX2 Q4_0 decode 1.5x
// faster without it, docs/performance.md).
template <class F>
inline void for_row_steps(const std::byte* row, size_t step, int64_t s0, int64_t s1, F&& f) {
  if (step <= 64) {
#pragma GCC unroll 4
    for (int64_t s = s0; s < s1; ++s) {
      __builtin_prefetch(row + size_t(s) * step + kPrefetchAhead);
      f(s);
    }
  } else {
    for (int64_t s = s0; s < s1; ++s) {
      prefetch_step(row + size_t(s) * step, step);
      f(s);
    }
  }
}

// Bytes of one step of a row of n values (whole steps only; an estimate where rows are padded).
inline size_t step_bytes(size_t row_bytes, int64_t n, int64_t step) {
  return n >= step ? row_bytes / size_t(n / step) : 0;
}

template <class K, int NW, int NX>
void tile_fixed(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, float* out,
                size_t out_stride, int64_t n) {
  typename K::Acc acc[NW][NX];
  for (int r = 0; r < NW; ++r)
    for (int t = 0; t < NX; ++t) acc[r][t] = K::zero();
  const int64_t steps = n / K::kStep;
  for (int64_t s = 0; s < steps; ++s) {
    typename K::Act act[NX];
    for (int t = 0; t < NX; ++t) act[t] = K::load_act(a + size_t(t) * a_row_bytes, s);
    for (int r = 0; r < NW; ++r) {
      const typename K::Wt wt = K::load_w(w + size_t(r) * w_row_bytes, s);
      for (int t = 0; t < NX; ++t) K::madd(acc[r][t], wt, act[t]);
    }
  }
  const int64_t done = steps * K::kStep;
  for (int r = 0; r < NW; ++r)
    for (int t = 0; t < NX; ++t) {
      float v = K::reduce(acc[r][t]);
      if (done < n) v += K::tail(w + size_t(r) * w_row_bytes, a + size_t(t) * a_row_bytes, done, n);
      out[size_t(t) * out_stride + size_t(r)] = v;
    }
}

// Decode: weight rows one after another, each read once as a single sequential stream. Interleaving several rows (as tile_fixed does) makes the
// hardware prefetchers follow several short streams and loses a large part of the
// memory bandwidth that decode is bound by. The activation steps, which tile_fixed
// would redo per group of NW rows, are prepared once per segment of the row into a
// buffer on the stack and reused by every weight row.
// kSegmentSteps: steps per segment (0: as many as fit the buffer for NX rows).
template <class K, int NX, int64_t kSegmentSteps = 0>
void rows_sequential(const std::byte* w, size_t w_row_bytes, int n_w, const std::byte* a, size_t a_row_bytes,
                     float* out, size_t out_stride, int64_t n) {
  using Act = typename K::Act;
  constexpr size_t kBufferBytes = 32 * 1024;  // on the stack; about L1
  constexpr int64_t kFit = int64_t(kBufferBytes / (sizeof(Act) * NX)) > 0 ? kBufferBytes / (sizeof(Act) * NX) : 1;
  constexpr int64_t kSegment = kSegmentSteps > 0 ? kSegmentSteps : kFit;
  alignas(64) Act acts[kSegment * NX];
  const int64_t steps = n / K::kStep;
  const size_t step = step_bytes(w_row_bytes, n, K::kStep);
  for (int64_t s0 = 0; s0 == 0 || s0 < steps; s0 += kSegment) {
    const int64_t s1 = steps < s0 + kSegment ? steps : s0 + kSegment;
    for (int64_t s = s0; s < s1; ++s)
      for (int t = 0; t < NX; ++t) acts[(s - s0) * NX + t] = K::load_act(a + size_t(t) * a_row_bytes, s);
    for (int r = 0; r < n_w; ++r) {
      const std::byte* wr = w + size_t(r) * w_row_bytes;
      typename K::Acc acc[NX];
      for (int t = 0; t < NX; ++t) acc[t] = K::zero();
      for_row_steps(wr, step, s0, s1, [&](int64_t s) {
        const typename K::Wt wt = K::load_w(wr, s);
        for (int t = 0; t < NX; ++t) K::madd(acc[t], wt, acts[(s - s0) * NX + t]);
      });
      for (int t = 0; t < NX; ++t) {
        float& o = out[size_t(t) * out_stride + size_t(r)];
        o = (s0 == 0 ? 0.0f : o) + K::reduce(acc[t]);
      }
    }
  }
  const int64_t done = steps * K::kStep;
  if (done < n)
    for (int r = 0; r < n_w; ++r)
      for (int t = 0; t < NX; ++t)
        out[size_t(t) * out_stride + size_t(r)] +=
            K::tail(w + size_t(r) * w_row_bytes, a + size_t(t) * a_row_bytes, done, n);
}

using TileFn = void (*)(const std::byte*, size_t, const std::byte*, size_t, float*, size_t, int64_t);

// Tile shapes of one kind of kernel, as class templates with a static run<NW, NX>.
template <class K>
struct PlainTile {
  template <int NW, int NX>
  static void run(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, float* out,
                  size_t out_stride, int64_t n) {
    tile_fixed<K, NW, NX>(w, w_row_bytes, a, a_row_bytes, out, out_stride, n);
  }
};

// Packed rows: whole groups of KP::kStep values with the packed step kernel KP, the
// rest (kept in the activation format at the end of each packed row) with KT.
// KP::weight_bytes(v) and KP::packed_bytes(v) give the offsets of value v.
template <class KP, class KT>
struct PackedTile {
  template <int NW, int NX>
  static void run(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, float* out,
                  size_t out_stride, int64_t n) {
    const int64_t n_main = n / KP::kStep * KP::kStep;
    tile_fixed<KP, NW, NX>(w, w_row_bytes, a, a_row_bytes, out, out_stride, n_main);
    if (n_main == n) return;
    float rest[NW * NX];
    tile_fixed<KT, NW, NX>(w + KP::weight_bytes(n_main), w_row_bytes, a + KP::packed_bytes(n_main), a_row_bytes,
                           rest, NW, n - n_main);
    for (int t = 0; t < NX; ++t)
      for (int r = 0; r < NW; ++r) out[size_t(t) * out_stride + size_t(r)] += rest[t * NW + r];
  }
};

// Instances for every tile shape up to MW x MX, indexed [nw - 1][nx - 1].
template <class T, int MW, int MX>
struct TileTable {
  TileFn fn[MW][MX];
  constexpr TileTable() : fn{} { fill<1, 1>(); }
  template <int NW, int NX>
  constexpr void fill() {
    fn[NW - 1][NX - 1] = &T::template run<NW, NX>;
    if constexpr (NX < MX) {
      fill<NW, NX + 1>();
    } else if constexpr (NW < MW) {
      fill<NW + 1, 1>();
    }
  }
};

// WeightKernels::dot_tile for any n_w x n_x: covers it with tiles of at most MW x MX.
template <class T, int MW, int MX>
void dot_tile_with(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                   int n_x, float* out, size_t out_stride, int64_t n) {
  static constexpr TileTable<T, MW, MX> table;
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  for (int t = 0; t < n_x; t += MX) {
    const int nx = n_x - t < MX ? n_x - t : MX;
    for (int r = 0; r < n_w; r += MW) {
      const int nw = n_w - r < MW ? n_w - r : MW;
      table.fn[nw - 1][nx - 1](w + size_t(r) * w_row_bytes, w_row_bytes, a + size_t(t) * a_row_bytes, a_row_bytes,
                               out + size_t(t) * out_stride + size_t(r), out_stride, n);
    }
  }
}

// WeightKernels::dot_tile: one activation row (decode) with rows_sequential<KSeq>,
// several with register tiles of KTile. KSeq may keep more accumulators per row
// (KTile's live NW x NX times in registers).
template <class KSeq, class KTile, int MW, int MX>
void dot_tile_split(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                    int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1) {
    rows_sequential<KSeq, 1>(static_cast<const std::byte*>(weights), w_row_bytes, n_w,
                             static_cast<const std::byte*>(activations), a_row_bytes, out, out_stride, n);
    return;
  }
  dot_tile_with<PlainTile<KTile>, MW, MX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride,
                                          n);
}

// WeightKernels::dot_tile_invariant for step kernels with one accumulator per (row,
// token): rows_sequential over blocks of up to MX tokens with segments of the same
// number of steps for every block width, so that a token's sum is the same sequence
// of operations alone or among MX tokens. Each weight row is read once per block as
// one sequential stream: a verification step of a few tokens is then bound by the
// weight bytes like a decode step (tile_fixed's interleaved rows starve the hardware
// prefetchers and left a 5-token step of an F16 model at twice a decode step).
template <class K, int MX = 8>
void dot_tile_invariant(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                        size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  using Fn = void (*)(const std::byte*, size_t, int, const std::byte*, size_t, float*, size_t, int64_t);
  constexpr int64_t kSegment = int64_t(32 * 1024 / (sizeof(typename K::Act) * MX));
  static constexpr auto table = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<Fn, MX>{&rows_sequential<K, I + 1, kSegment>...};
  }(std::make_integer_sequence<int, MX>{});
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  for (int t = 0; t < n_x; t += MX) {
    const int nx = n_x - t < MX ? n_x - t : MX;
    table[size_t(nx - 1)](w, w_row_bytes, n_w, a + size_t(t) * a_row_bytes, a_row_bytes, out + size_t(t) * out_stride,
                          out_stride, n);
  }
}

template <class K, int MW, int MX>
void dot_tile(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
              int n_x, float* out, size_t out_stride, int64_t n) {
  dot_tile_split<K, K, MW, MX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
}

// WeightKernels::packed.dot_tile.
// - One activation row (decode, WeightKernels::Packed::decode): the weight rows one after
//   another, a single sequential stream (see rows_sequential).
// - Short rows, whose packed activations for 16 tokens stay in L1 (Gemma 3 270M's 640
//   values): tiles of 1 weight row x 16 tokens, so that each weight step is unpacked
//   once for 16 tokens (the unpacking costs about as much as the dot products).
// - Longer rows: tiles of MW x MX, whose MX activation rows stay in L1.
template <class KP, class KT, int MW, int MX>
void dot_tile_packed(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes,
                     int n_x, float* out, size_t out_stride, int64_t n) {
  constexpr int kWideX = 16;
  constexpr size_t kL1Budget = 20 * 1024;  // of the 32 KiB L1D, the rest for weights and stack
  if (n_x == 1) {
    dot_tile_with<PackedTile<KP, KT>, 1, 1>(weights, w_row_bytes, n_w, packed, p_row_bytes, 1, out, out_stride, n);
  } else if (n_x > MX && p_row_bytes * kWideX <= kL1Budget) {
    dot_tile_with<PackedTile<KP, KT>, 1, kWideX>(weights, w_row_bytes, n_w, packed, p_row_bytes, n_x, out,
                                                 out_stride, n);
  } else {
    dot_tile_with<PackedTile<KP, KT>, MW, MX>(weights, w_row_bytes, n_w, packed, p_row_bytes, n_x, out, out_stride,
                                              n);
  }
}

// Decode for step kernels whose accumulators must run over the whole row (the
// llama.cpp order, quant/lanes.hpp: one reduction per dot product, never partial
// sums added): rows_sequential with the activation steps of the whole row prepared
// once per call, in a per-thread buffer.
template <class K>
void rows_whole(const std::byte* w, size_t w_row_bytes, int n_w, const std::byte* a, float* out, int64_t n) {
  thread_local std::vector<typename K::Act> acts;
  const int64_t steps = n / K::kStep;
  if (acts.size() < size_t(steps)) acts.resize(size_t(steps));
  for (int64_t s = 0; s < steps; ++s) acts[size_t(s)] = K::load_act(a, s);
  const int64_t done = steps * K::kStep;
  const size_t step = step_bytes(w_row_bytes, n, K::kStep);
  for (int r = 0; r < n_w; ++r) {
    const std::byte* wr = w + size_t(r) * w_row_bytes;
    typename K::Acc acc = K::zero();
    for_row_steps(wr, step, 0, steps, [&](int64_t s) { K::madd(acc, K::load_w(wr, s), acts[size_t(s)]); });
    out[r] = K::reduce(acc) + (done < n ? K::tail(wr, a, done, n) : 0.0f);
  }
}

// WeightKernels::dot_tile for such kernels: rows_whole for one activation row, register
// tiles of at most MW x MX (each reduced once) for several.
template <class K, int MW, int MX>
void dot_tile_lanes(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                    int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1) {
    rows_whole<K>(static_cast<const std::byte*>(weights), w_row_bytes, n_w,
                  static_cast<const std::byte*>(activations), out, n);
    return;
  }
  dot_tile_with<PlainTile<K>, MW, MX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
}

// WeightKernels::dot: a 1 x 1 tile.
template <class K>
float dot(const void* weights, const void* activations, int64_t n) {
  float out;
  tile_fixed<K, 1, 1>(static_cast<const std::byte*>(weights), 0, static_cast<const std::byte*>(activations), 0,
                      &out, 1, n);
  return out;
}

}  // namespace
}  // namespace ember::cpu
