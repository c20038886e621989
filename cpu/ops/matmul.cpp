// matmul on the CPU: out[t][o] = dot(weights[o], x[t]) (contract: lib/backend/ops/matmul.hpp).
//
// 1. Each row of x is converted once to the weights' activation format, into
//    ctx.scratch (F32/F16/BF16 weights read x in place); for prefill, levels with a
//    packed path (WeightKernels::packed) also repack it once.
// 2. Threads take chunks of consecutive output rows (weight rows) from a shared
//    counter, so each streams its own part of the matrix and a thread slowed down
//    by another process leaves its share to the others. Decode (one token) reads the
//    rows of a chunk one after another, a single sequential stream per thread (see
//    rows_sequential in cpu/kernels/tile.hpp). Prefill multiplies the chunk with tiles
//    of tokens (WeightKernels::dot_tile); the chunk is small enough to stay in L2
//    while every token tile passes over it, so the matrix is read from memory once
//    per op whatever the number of tokens. Packed kernels that set Packed::token_block
//    (AVX2 Q8_0) take the other order: blocks of up to that many tokens, whose packed
//    rows stay in L2, each passed over all chunks of weight rows (the matrix is read
//    once per block; at 2 threads prefill is bound by arithmetic, not by those reads).
//    Weights the backend repacked at load (Tensor::layout, cpu/kernels/repack.hpp) go
//    to WeightKernels::repacked for every token count and sum order (and, for Q4_K's
//    whole groups of 4 tokens unless sums must be batch-invariant, to its grouped tile);
//    for those of the symmetric formats (Repacked::activation_sums) step 1 also appends
//    each activation block's code sum to its row, once per op instead of once per call.
#include <algorithm>
#include <atomic>
#include <new>
#include <tuple>
#include <unistd.h>

#include "common/fail.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/ops/ops.hpp"
#include "quant/quant.hpp"

namespace ember::cpu {
namespace {

// Weight bytes per work chunk: for decode, large enough to amortize taking a chunk and
// small enough to balance threads; for prefill, what stays in L2 across token tiles.
constexpr size_t kDecodeChunkBytes = 256 * 1024;
constexpr size_t kPrefillChunkBytes = 256 * 1024;
// Token rows per dot_tile call in prefill (rounded down to a multiple of tile_x).
constexpr int kTokenBlock = 32;
// Packed kernels with Packed::token_block: the packed rows of a block of tokens, kept in
// L2 while the block passes over all weight rows, take at most about this many bytes
// (tuned on a 2 MiB L2), and at most 7/8 of the core's L2 where the OS reports it. On
// an AMD Zen 3 (512 KiB L2) 128 widened Q8_0 rows of 2048 values (557 KB) came from L3:
// bench_kernels Q8_0 avx2 2048 x 2048, 128 tokens, 1 thread 15.8 -> 14.0 ms with 448 KB
// (best of 12), 2 threads 8.5 -> 7.3.
constexpr size_t kPackedBlockBytes = 1024 * 1024;

size_t packed_block_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) return std::clamp(size_t(l2) / 8 * 7, size_t(128 * 1024), kPackedBlockBytes);
#endif
  return kPackedBlockBytes;
}

// Scratch offset alignment of the converted activations.
constexpr size_t kAlign = 64;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

void matmul(OpContext& ctx, const Tensor& weights, const Tensor& x, const Tensor& out) {
  const WeightKernels& kernels = weight_kernels(ctx.isa, weights.type);
  const bool repacked = weights.layout != 0;
  if (repacked && (weights.layout != kLayoutRows8 || kernels.repacked.dot_tile == nullptr ||
                   weights.rows % kLayoutRows8Group != 0 || !weights.contiguous()))
    fail(ErrorCode::invalid_argument, "matmul: {} weights [{}, {}] in layout {} have no {} kernel",
         quant::type_name(weights.type), weights.rows, weights.cols, weights.layout, isa_name(ctx.isa));
  const int64_t n_out = weights.rows, n_in = weights.cols, n_tok = x.rows;
  if (n_out == 0 || n_tok == 0) return;
  if (n_in == 0) {
    for (int64_t t = 0; t < n_tok; ++t) std::fill_n(out.row_ptr<float>(t), n_out, 0.0f);
    return;
  }
  if (out.row_stride % sizeof(float) != 0)
    fail(ErrorCode::invalid_argument, "matmul: out row stride {} is not a multiple of 4 bytes", out.row_stride);

  // ---- 1. activations ----
  const bool decode = n_tok <= (repacked ? kernels.repacked.tile_x : kernels.tile_x);
  // Batch-invariant sums: the kernel whose rows do not depend on the call's other tokens.
  const auto invariant = repacked ? kernels.repacked.dot_tile : ctx.batch_invariant ? kernels.dot_tile_invariant : nullptr;
  // The packed path: the batch-invariant one (every token count) or the prefill one.
  const WeightKernels::Packed* pk =
      repacked ? nullptr
      : ctx.batch_invariant && kernels.invariant_packed.dot_tile != nullptr ? &kernels.invariant_packed
      : !invariant && kernels.packed.dot_tile != nullptr && (!decode || kernels.packed.decode) ? &kernels.packed
                                                                                               : nullptr;
  const bool packed = pk != nullptr;
  const std::byte* act = nullptr;
  size_t act_row_bytes = 0;
  if (kernels.activation_type == quant::DType::f32) {
    if (x.row_stride % sizeof(float) != 0)
      fail(ErrorCode::invalid_argument, "matmul: x row stride {} is not a multiple of 4 bytes", x.row_stride);
    act = x.row_ptr(0);
    act_row_bytes = x.row_stride;
  } else {
    // Converted rows, then (prefill with a packed path) their packed form after them.
    // Repacked kernels of the symmetric formats read each block's code sums after the row.
    const int32_t sums = repacked ? kernels.repacked.activation_sums : 0;
    const size_t quant_row_bytes =
        sums != 0 ? activation_row_bytes_with_sums(n_in) : quant::row_bytes(kernels.activation_type, n_in);
    const size_t packed_row_bytes = packed ? pk->row_bytes(n_in) : 0;
    const size_t quant_bytes = round_up(int64_t(n_tok) * int64_t(quant_row_bytes), kAlign);
    const size_t needed = quant_bytes + size_t(n_tok) * packed_row_bytes + kAlign;
    if (ctx.scratch.size() < needed) {
      try {
        ctx.scratch.resize(needed);
      } catch (const std::bad_alloc&) {
        fail(ErrorCode::out_of_memory, "matmul: {} bytes of scratch for {} activation rows", needed, n_tok);
      }
    }
    std::byte* base = ctx.scratch.data();
    base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
    std::byte* packed_base = base + quant_bytes;
    const auto convert = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        std::byte* row = base + size_t(t) * quant_row_bytes;
        kernels.quantize_activations(x.row_ptr<const float>(t), row, n_in);
        if (sums != 0) append_activation_sums(row, n_in, sums);
        if (packed) pk->pack(row, packed_base + size_t(t) * packed_row_bytes, n_in);
      }
    };
    if (n_tok == 1) {
      convert(0, 1);
    } else {
      ctx.pool.parallel_for(n_tok, convert);
    }
    act = packed ? packed_base : base;
    act_row_bytes = packed ? packed_row_bytes : quant_row_bytes;
  }

  // ---- 2. dot products over chunks of weight rows ----
  const auto dot_tile = packed ? pk->dot_tile : invariant ? invariant : kernels.dot_tile;
  const int tile_w = repacked ? kLayoutRows8Group : std::max(1, packed ? pk->tile_w : kernels.tile_w);
  const int tile_x = std::max(1, repacked ? kernels.repacked.tile_x : packed ? pk->tile_x : kernels.tile_x);
  const std::byte* w = weights.row_ptr(0);
  const size_t w_row_bytes = weights.row_stride;
  float* dst = out.row_ptr<float>(0);
  const size_t out_stride = out.row_stride / sizeof(float);
  const size_t chunk_bytes = decode ? kDecodeChunkBytes : kPrefillChunkBytes;
  const int n_threads = ctx.pool.size();
  // Rows per chunk: a multiple of the tile height, at least ~4 chunks per thread.
  int64_t chunk_rows = std::max<int64_t>(1, int64_t(chunk_bytes / std::max<size_t>(1, w_row_bytes)));
  chunk_rows = std::min(chunk_rows, (n_out + 4 * n_threads - 1) / (4 * n_threads));
  chunk_rows = round_up(std::max<int64_t>(chunk_rows, 1), tile_w);
  const int64_t n_chunks = (n_out + chunk_rows - 1) / chunk_rows;
  const int token_block = decode ? int(n_tok) : std::max(tile_x, kTokenBlock / tile_x * tile_x);
  // Kernels whose reference sums whole groups of tokens in another order (WeightKernels::dot_tile_grouped);
  // not when every token must be summed alike whatever its batch.
  const auto grouped = packed || ctx.batch_invariant ? nullptr
                       : repacked                    ? kernels.repacked.dot_tile_grouped
                                                     : kernels.dot_tile_grouped;
  const int64_t grouped_end = grouped ? n_tok - n_tok % WeightKernels::kGroupTokens : 0;

  // Blocks of tokens outermost (Packed::token_block): work item i is token block
  // i / n_chunks with chunk i % n_chunks, so the threads share one block at a time.
  int64_t outer_block = 0;
  if (packed && pk->token_block > 0) {
    static const size_t block_bytes = packed_block_bytes();
    const int64_t fit = std::max<int64_t>(tile_x, int64_t(block_bytes / act_row_bytes) / tile_x * tile_x);
    const int64_t most = std::min<int64_t>(pk->token_block, fit);
    const int64_t n_blocks = (n_tok + most - 1) / most;
    outer_block = std::min(most, round_up((n_tok + n_blocks - 1) / n_blocks, tile_x));
  }

  std::atomic<int64_t> next{0};
  const auto outer_work = [&](int, int) {
    const int64_t n_items = (n_tok + outer_block - 1) / outer_block * n_chunks;
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n_items;
         item = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t r0 = item % n_chunks * chunk_rows, t0 = item / n_chunks * outer_block;
      const int rows = int(std::min(chunk_rows, n_out - r0));
      const int tokens = int(std::min(outer_block, n_tok - t0));
      dot_tile(w + size_t(r0) * w_row_bytes, w_row_bytes, rows, act + size_t(t0) * act_row_bytes, act_row_bytes,
               tokens, dst + size_t(t0) * out_stride + size_t(r0), out_stride, n_in);
    }
  };
  if (outer_block > 0) {
    if (n_threads == 1) {
      outer_work(0, 1);
    } else {
      ctx.pool.run(outer_work);
    }
    return;
  }
  const auto work = [&](int, int) {
    for (int64_t chunk = next.fetch_add(1, std::memory_order_relaxed); chunk < n_chunks;
         chunk = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t r0 = chunk * chunk_rows;
      const int rows = int(std::min(chunk_rows, n_out - r0));
      for (int64_t t0 = 0; t0 < n_tok; t0 += token_block) {
        const int64_t t1 = std::min<int64_t>(t0 + token_block, n_tok);
        // Tokens before `grouped_end` in the grouped order, the others in the plain one.
        const int64_t split = std::clamp(grouped_end, t0, t1);
        for (const auto& [a, b, fn] : {std::tuple{t0, split, grouped}, std::tuple{split, t1, dot_tile}})
          if (a < b)
            fn(w + size_t(r0) * w_row_bytes, w_row_bytes, rows, act + size_t(a) * act_row_bytes, act_row_bytes,
               int(b - a), dst + size_t(a) * out_stride + size_t(r0), out_stride, n_in);
      }
    }
  };
  if (n_threads == 1 || n_chunks == 1) {
    work(0, 1);
  } else {
    ctx.pool.run(work);
  }
}

}  // namespace ember::cpu
