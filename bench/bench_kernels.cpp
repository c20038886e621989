// Kernel benchmarks of the CPU backend: GB/s of data streamed and GFLOP/s.
//
//   mem_read/threads:T
//       plain read bandwidth of this machine (the roofline of decode)
//   matmul/<type>/<isa>/<in>x<out>/tokens:N/threads:T
//       cpu::matmul of an [out, in] weight matrix (GGUF shape {in, out}) with N
//       activation rows: 2048x2048 (attn_q, attn_output of a 1B llama) and
//       2048x5632 (ffn_gate, ffn_up); N = 1 (decode), 16 and 128 (prefill); T = 1
//       and 2; every weight format at every ISA level this CPU runs
//   matmul_order/<type>/<isa>/<in>x<out>/tokens:N/<order>/threads:T
//       the 32-value formats in the default order and in the batch-invariant one
//       (SumOrder::batch_invariant, speculative generation) at the best level: decode
//       (N = 1) and a verification step of 8 drafts (N = 9), at Gemma 3 270M's shapes: 640x262144 (the tied output matrix), 640x2048 (ffn_gate,
//       ffn_up), 2048x640 (ffn_down), 640x1024 (attn_q)
//   attention/<cache type>/ctx:C/tokens:N/threads:T
//       cpu::attention of N query tokens at the end of C cached tokens (32 query heads,
//       4 KV heads of 64 values, pages of 16 tokens: TinyLlama's shape), at the best
//       level; cache types F16, F32, INT8 and INT4 (g32); C = 512 to 32768; N = 1
//       (decode), 32 and C (a whole prompt)
//   attention_gemma/<cache type>/ctx:C/tokens:1/threads:T
//       the same at Gemma 3's shape (4 query heads, 1 KV head of 256 values): decode at
//       C = 4096 and 16384 (its global layers at depth)
//   attention_passes/<shape>/[KV_Q8_G32/|KV_Q4_G32/]<part>/threads:1
//       the two passes of a lone token's F16 (or INT8 / INT4 g32) attention alone
//       (OpKernels::scores_f16 then pv_f16, or the _q8 / _q4 pair, over chunks of 512
//       cells, 32 rows per call; shape "tinyllama" or "gemma" as above), one thread, to
//       tell compute from memory: part "kernels_hot" repeats one chunk
//       (from L2), "kernels_stream" walks a cache larger than L3 with the op's software
//       prefetch (rows 64 cells ahead into L2), "prefetch_only" issues that prefetch
//       and runs no kernel (docs/long-context.md)
//
// Each iteration of matmul uses the next of several copies of the matrix, together
// larger than the last-level cache, so that weights come from memory as in a real
// model. Bytes are the weight (matmul) or K and V (attention) bytes read per op;
// the "FLOPS" counter is 2 * out * in * N (matmul) or 4 * heads * head_dim * N *
// visible cells (attention: q.k and the weighted sum of v), shown as a rate.
// The whole program takes long; select with --benchmark_filter (docs/performance.md).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/host_buffer.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/ops/ops.hpp"
#include "quant/kv_formats.hpp"
#include "quant/quant.hpp"

namespace {

using ember::backend::HostBuffer;
using ember::backend::Tensor;
using ember::cpu::Isa;
using ember::quant::DType;

constexpr size_t kStreamBytes = size_t(160) << 20;  // > L3 (32 MiB) several times over

struct Shape {
  int64_t in, out;
};
constexpr Shape kShapes[] = {{2048, 2048}, {2048, 5632}};
constexpr int64_t kPrefillTokens[] = {16, 128};

// Copies of one [out, in] matrix of one type, together over kStreamBytes, with
// realistic contents: 64 distinct rows quantized from normal values, repeated.
struct Matrices {
  DType type{};
  Shape shape{};
  std::vector<std::unique_ptr<HostBuffer>> buffers;
  std::vector<Tensor> tensors;
  size_t bytes_each = 0;
};

// The matrices of the running benchmark; benchmarks are registered type by type and
// shape by shape, so keeping only the last set bounds memory without rebuilding often.
Matrices& matrices(DType type, Shape shape) {
  static std::unique_ptr<Matrices> cached;
  if (cached && cached->type == type && cached->shape.in == shape.in && cached->shape.out == shape.out) return *cached;
  cached.reset();
  cached = std::make_unique<Matrices>();
  Matrices& m = *cached;
  m.type = type;
  m.shape = shape;
  const size_t row_bytes = ember::quant::row_bytes(type, shape.in);
  m.bytes_each = row_bytes * size_t(shape.out);
  std::vector<std::byte> rows(64 * row_bytes);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(shape.in));
  for (int r = 0; r < 64; ++r) {
    for (float& v : values) v = normal(rng);
    ember::quant::quantize_row(type, values.data(), rows.data() + r * row_bytes, shape.in);
  }
  const size_t count = std::max<size_t>(2, (kStreamBytes + m.bytes_each - 1) / m.bytes_each);
  for (size_t i = 0; i < count; ++i) {
    auto buffer = std::make_unique<HostBuffer>(m.bytes_each);
    for (int64_t r = 0; r < shape.out; ++r)
      std::memcpy(buffer->host_data() + r * row_bytes, rows.data() + (r % 64) * row_bytes, row_bytes);
    m.tensors.push_back(ember::backend::make_tensor(*buffer, 0, type, shape.out, shape.in));
    m.buffers.push_back(std::move(buffer));
  }
  return m;
}

// The same matrices in the CPU's rows8 layout (cpu/kernels/repack.hpp), as the CPU
// backend repacks them at load.
Matrices& repacked_matrices(DType type, Shape shape) {
  static std::unique_ptr<Matrices> cached;
  if (cached && cached->type == type && cached->shape.in == shape.in && cached->shape.out == shape.out) return *cached;
  cached.reset();
  const Matrices& plain = matrices(type, shape);
  cached = std::make_unique<Matrices>();
  Matrices& m = *cached;
  m.type = type;
  m.shape = shape;
  m.bytes_each = plain.bytes_each;
  for (const Tensor& t : plain.tensors) {
    auto buffer = std::make_unique<HostBuffer>(m.bytes_each);
    ember::cpu::repack_rows8(type, t.row_ptr(0), t.row_stride, buffer->host_data(), t.rows, t.cols);
    Tensor r = ember::backend::make_tensor(*buffer, 0, type, shape.out, shape.in);
    r.layout = ember::cpu::kLayoutRows8;
    m.tensors.push_back(r);
    m.buffers.push_back(std::move(buffer));
  }
  return m;
}

// A host tensor of normal f32 values.
struct HostTensor {
  std::unique_ptr<HostBuffer> buffer;
  Tensor tensor;
};
HostTensor random_f32(int64_t rows, int64_t cols, uint32_t seed) {
  HostTensor a;
  a.buffer = std::make_unique<HostBuffer>(size_t(rows * cols) * 4);
  a.tensor = ember::backend::make_tensor(*a.buffer, 0, DType::f32, rows, cols);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) a.tensor.row_ptr<float>(0)[i] = normal(rng);
  return a;
}
HostTensor i32_tensor(const std::vector<int32_t>& values, int64_t rows, int64_t cols) {
  HostTensor a;
  a.buffer = std::make_unique<HostBuffer>(values.size() * 4);
  a.tensor = ember::backend::make_tensor(*a.buffer, 0, DType::i32, rows, cols);
  std::memcpy(a.buffer->host_data(), values.data(), values.size() * 4);
  return a;
}

void report(benchmark::State& state, double bytes_per_op, double flops_per_op) {
  state.SetBytesProcessed(int64_t(double(state.iterations()) * bytes_per_op));
  state.counters["FLOPS"] = benchmark::Counter(flops_per_op * double(state.iterations()), benchmark::Counter::kIsRate);
}

void bench_mem_read(benchmark::State& state) {
  const int threads = int(state.range(0));
  const size_t bytes = kStreamBytes;
  auto buffer = std::make_unique<HostBuffer>(bytes);
  std::memset(buffer->host_data(), 1, bytes);
  ember::cpu::ThreadPool pool(threads);
  std::atomic<uint64_t> sink{0};
  for (auto _ : state) {
    pool.run([&](int index, int n) {
      const auto* p = reinterpret_cast<const uint64_t*>(buffer->host_data());
      const size_t words = bytes / 8, begin = words * index / n, end = words * (index + 1) / n;
      // A plain sum: the compiler vectorizes it with the baseline ISA's widest loads.
      uint64_t sum = 0;
      for (size_t i = begin; i < end; ++i) sum += p[i];
      sink += sum;
    });
  }
  benchmark::DoNotOptimize(sink.load());
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

void bench_matmul(benchmark::State& state, DType type, Isa isa, Shape shape, int64_t n_tok,
                  bool batch_invariant, bool repacked) {
  const int threads = int(state.range(0));
  Matrices& m = repacked ? repacked_matrices(type, shape) : matrices(type, shape);
  const HostTensor x = random_f32(n_tok, shape.in, 7);
  auto out_buffer = std::make_unique<HostBuffer>(size_t(n_tok * shape.out) * 4);
  const Tensor out = ember::backend::make_tensor(*out_buffer, 0, DType::f32, n_tok, shape.out);
  ember::cpu::ThreadPool pool(threads);
  std::vector<std::byte> scratch;
  ember::cpu::OpContext ctx{pool, isa, scratch, {}};
  ctx.batch_invariant = batch_invariant;
  size_t which = 0;
  for (auto _ : state) {
    ember::cpu::matmul(ctx, m.tensors[which], x.tensor, out);
    which = (which + 1) % m.tensors.size();
  }
  report(state, double(m.bytes_each), 2.0 * double(shape.out) * double(shape.in) * double(n_tok));
}

// N query tokens at positions [ctx - N, ctx) of one sequence, over ctx cached cells.
// Like a model's layers, each iteration reads the next of several K/V cache copies,
// together over kStreamBytes, so that the cache comes from memory. EMBER_BENCH_HOT=1
// keeps one copy (from the caches when it fits): the kernels' compute speed alone.
struct AttentionShape {
  int heads, heads_kv, head_dim;
};
constexpr AttentionShape kTinyLlamaAttention{32, 4, 64};
constexpr AttentionShape kGemmaAttention{4, 1, 256};

void bench_attention(benchmark::State& state, DType cache_type, int64_t n_ctx, int64_t n_tok, AttentionShape shape) {
  const int threads = int(state.range(0));
  const int n_head = shape.heads, n_head_kv = shape.heads_kv, head_dim = shape.head_dim;
  constexpr int kPage = 16;
  const int64_t kv_width = int64_t(n_head_kv) * head_dim;
  const int64_t n_slots = (n_ctx + kPage - 1) / kPage * kPage;
  const size_t row_bytes = ember::quant::row_bytes(cache_type, kv_width);
  const size_t cache_bytes = row_bytes * size_t(n_slots);
  const size_t copies = std::getenv("EMBER_BENCH_HOT") != nullptr
                            ? 1
                            : std::max<size_t>(1, (kStreamBytes + 2 * cache_bytes - 1) / (2 * cache_bytes));

  // K and V caches of normal values (scaled so that softmax is not one-hot).
  std::vector<std::unique_ptr<HostBuffer>> caches;
  std::vector<Tensor> kv;  // K, V of copy 0, K, V of copy 1, ...
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> row(static_cast<size_t>(kv_width));
  for (size_t i = 0; i < 2 * copies; ++i) {
    caches.push_back(std::make_unique<HostBuffer>(cache_bytes));
    kv.push_back(ember::backend::make_tensor(*caches.back(), 0, cache_type, n_slots, kv_width));
    if (i >= 2) {
      std::memcpy(caches.back()->host_data(), caches[i % 2]->host_data(), cache_bytes);
      continue;
    }
    for (int64_t s = 0; s < n_slots; ++s) {
      for (float& v : row) v = normal(rng);
      ember::quant::quantize_row(cache_type, row.data(), kv.back().row_ptr(s), kv_width);
    }
  }
  const HostTensor q = random_f32(n_tok, int64_t(n_head) * head_dim, 5);
  auto out_buffer = std::make_unique<HostBuffer>(size_t(n_tok * n_head * head_dim) * 4);
  const Tensor out = ember::backend::make_tensor(*out_buffer, 0, DType::f32, n_tok, int64_t(n_head) * head_dim);

  std::vector<int32_t> token_pos(static_cast<size_t>(n_tok)), token_seq(static_cast<size_t>(n_tok), 0),
      pages(static_cast<size_t>(n_slots / kPage)), cell_pos(static_cast<size_t>(n_ctx));
  for (int64_t t = 0; t < n_tok; ++t) token_pos[size_t(t)] = int32_t(n_ctx - n_tok + t);
  for (size_t p = 0; p < pages.size(); ++p) pages[p] = int32_t(p);
  for (int64_t c = 0; c < n_ctx; ++c) cell_pos[size_t(c)] = int32_t(c);
  const HostTensor pos_t = i32_tensor(token_pos, n_tok, 1), seq_t = i32_tensor(token_seq, n_tok, 1),
                   pages_t = i32_tensor(pages, 1, int64_t(pages.size())),
                   cells_t = i32_tensor({int32_t(n_ctx)}, 1, 1), cell_pos_t = i32_tensor(cell_pos, 1, n_ctx);
  ember::backend::AttentionParams params;
  params.n_head = n_head;
  params.n_head_kv = n_head_kv;
  params.head_dim = head_dim;
  params.scale = 1.0f / std::sqrt(float(head_dim));
  params.page_tokens = kPage;
  params.token_pos = pos_t.tensor;
  params.token_seq = seq_t.tensor;
  params.page_table = pages_t.tensor;
  params.seq_cells = cells_t.tensor;
  params.cell_pos = cell_pos_t.tensor;

  ember::cpu::ThreadPool pool(threads);
  std::vector<std::byte> scratch;
  ember::cpu::OpContext ctx{pool, ember::cpu::best_isa(), scratch, {}};
  size_t which = 0;
  for (auto _ : state) {
    ember::cpu::attention(ctx, q.tensor, kv[2 * which], kv[2 * which + 1], params, out);
    which = (which + 1) % copies;
  }

  // Causal: query t sees n_ctx - n_tok + t + 1 cells.
  double visible = 0;
  for (int64_t t = 0; t < n_tok; ++t) visible += double(n_ctx - n_tok + t + 1);
  report(state, 2.0 * double(cache_bytes), 4.0 * n_head * head_dim * visible);
}

// The passes of the lone-token path (attention_flash.cpp's run_lone) over F16, INT8 or
// INT4 rows without the softmax, merge and tables: part 0 kernels on one L2-resident
// chunk, 1 kernels over a streamed cache with the op's prefetch, 2 the prefetch alone.
void bench_attention_passes(benchmark::State& state, AttentionShape shape, int part, DType type) {
  const int group = shape.heads / shape.heads_kv, hd = shape.head_dim, n_kv = shape.heads_kv;
  constexpr int kChunk = 512, kRows = 32, kAhead = 64;
  const auto& ops = ember::cpu::op_kernels(ember::cpu::best_isa());
  const bool f16 = type == DType::f16;
  if (f16 ? ops.scores_f16 == nullptr : (type == DType::kv_q8_g32 ? ops.scores_q8 : ops.scores_q4) == nullptr) {
    state.SkipWithError("this level has no fused kernel for the type");
    return;
  }
  const size_t head_bytes = ember::quant::row_bytes(type, hd), cell_bytes = size_t(n_kv) * head_bytes;
  const size_t cells = part == 0 ? size_t(kChunk) : kStreamBytes / 2 / cell_bytes / kChunk * kChunk;
  // Host buffers like the KV pool's (huge pages where the system gives them).
  HostBuffer k_buffer(cells * cell_bytes), v_buffer(cells * cell_bytes);
  auto* k = static_cast<std::byte*>(k_buffer.host_data());
  auto* v = static_cast<std::byte*>(v_buffer.host_data());
  if (f16) {
    std::fill_n(reinterpret_cast<uint16_t*>(k), cells * cell_bytes / 2, uint16_t(0x3c00));  // 1.0
    std::fill_n(reinterpret_cast<uint16_t*>(v), cells * cell_bytes / 2, uint16_t(0x3800));  // 0.5
  } else {  // one chunk of quantized normal values, repeated
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> values(size_t(n_kv) * hd);
    for (std::byte* cache : {k, v}) {
      for (size_t c = 0; c < size_t(kChunk); ++c) {
        for (float& x : values) x = normal(rng);
        ember::quant::quantize_row(type, values.data(), cache + c * cell_bytes, int64_t(values.size()));
      }
      for (size_t c = kChunk; c < cells; c += kChunk) std::memcpy(cache + c * cell_bytes, cache, kChunk * cell_bytes);
    }
  }
  std::vector<float> q(size_t(shape.heads) * hd, 0.01f), s(size_t(shape.heads) * kChunk, 1.0f / kChunk),
      acc(size_t(shape.heads) * hd);
  const int gsize = ember::quant::kv::group_size(type);
  const auto prefetch = [&](const std::byte* cache, size_t cell) {
    const auto* p = reinterpret_cast<const char*>(cache + cell * cell_bytes);
    for (size_t off = 0; off < cell_bytes; off += 64) __builtin_prefetch(p + off, 0, 1);
  };
  const bool run_kernels = part != 2, stream = part != 0;
  const uint8_t* rows[kRows];
  const auto* rows16 = reinterpret_cast<const uint16_t* const*>(rows);
  for (auto _ : state) {
    for (size_t c0 = 0; c0 < cells; c0 += kChunk) {
      for (int pass = 0; pass < 2; ++pass) {
        const std::byte* cache = pass == 0 ? k : v;
        for (int j0 = 0; j0 < kChunk; j0 += kRows)
          for (int h = 0; h < n_kv; ++h) {
            if (stream) {  // the op's schedule: rows kAhead cells on, the key pass running into the values
              for (int j = j0 + kAhead + h * kRows / n_kv; j < j0 + kAhead + (h + 1) * kRows / n_kv; ++j) {
                if (j < kChunk) prefetch(cache, c0 + size_t(j));
                else if (pass == 0) prefetch(v, c0 + size_t(j - kChunk));
              }
            }
            if (!run_kernels) continue;
            for (int j = 0; j < kRows; ++j)
              rows[j] = reinterpret_cast<const uint8_t*>(cache + (c0 + size_t(j0 + j)) * cell_bytes + size_t(h) * head_bytes);
            const float* qh = q.data() + size_t(h) * group * hd;
            float* sh = s.data() + size_t(h) * group * kChunk + j0;
            float* acc_h = acc.data() + size_t(h) * group * hd;
            if (pass == 0) {
              if (f16) ops.scores_f16(qh, group, hd, rows16, kRows, 0.125f, sh, kChunk);
              else if (type == DType::kv_q8_g32) ops.scores_q8(qh, group, hd, gsize, rows, kRows, 0.125f, sh, kChunk);
              else ops.scores_q4(qh, group, hd, gsize, rows, kRows, 0.125f, sh, kChunk);
            } else {
              if (f16) ops.pv_f16(sh, kChunk, group, hd, rows16, kRows, acc_h);
              else if (type == DType::kv_q8_g32) ops.pv_q8(sh, kChunk, group, hd, gsize, rows, kRows, acc_h);
              else ops.pv_q4(sh, kChunk, group, hd, gsize, rows, kRows, acc_h);
            }
          }
      }
    }
    benchmark::DoNotOptimize(acc.data());
  }
  report(state, double(cells * cell_bytes * 2), run_kernels ? 4.0 * shape.heads * hd * double(cells) : 0.0);
}

void register_all() {
  benchmark::RegisterBenchmark("mem_read", bench_mem_read)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();
  if (ember::cpu::op_kernels(ember::cpu::best_isa()).scores_f16 != nullptr) {
    const char* parts[] = {"kernels_hot", "kernels_stream", "prefetch_only"};
    // F16 as attention_passes/<shape>/<part>; INT8 and INT4 with their type after the shape.
    for (const auto& [shape_name, shape] : {std::pair{"tinyllama", kTinyLlamaAttention}, std::pair{"gemma", kGemmaAttention}})
      for (const DType type : {DType::f16, DType::kv_q8_g32, DType::kv_q4_g32})
        for (int part = 0; part < 3; ++part) {
          if (type != DType::f16 && part == 2) continue;  // the prefetch alone is F16's
          const std::string type_part = type == DType::f16 ? "" : std::string(ember::quant::type_name(type)) + "/";
          benchmark::RegisterBenchmark(("attention_passes/" + std::string(shape_name) + "/" + type_part + parts[part]).c_str(),
                                       bench_attention_passes, shape, part, type)
              ->Arg(1)
              ->ArgName("threads")
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
  }
  for (DType type : ember::quant::weight_types()) {
    for (const Shape shape : kShapes) {
      for (Isa isa : ember::cpu::available_isas()) {
        const std::string name = "matmul/" + std::string(ember::quant::type_name(type)) + "/" +
                                 std::string(ember::cpu::isa_name(isa)) + "/" + std::to_string(shape.in) + "x" +
                                 std::to_string(shape.out) + "/tokens:";
        benchmark::RegisterBenchmark((name + "1").c_str(), bench_matmul, type, isa, shape, int64_t(1), false, false)
            ->Arg(1)
            ->Arg(2)
            ->ArgName("threads")
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        for (const int64_t n_tok : kPrefillTokens) {
          benchmark::RegisterBenchmark((name + std::to_string(n_tok)).c_str(), bench_matmul, type, isa, shape, n_tok,
                                       false, false)
              ->Arg(1)
              ->Arg(2)
              ->ArgName("threads")
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime();
        }
      }
    }
  }
  // Weights in the rows8 layout, where a level reads it (the CPU backend repacks them at load).
  for (DType type : ember::quant::weight_types()) {
    for (const Shape shape : kShapes) {
      for (Isa isa : ember::cpu::available_isas()) {
        if (ember::cpu::weight_kernels(isa, type).repacked.dot_tile == nullptr) continue;
        const std::string name = "matmul_repacked/" + std::string(ember::quant::type_name(type)) + "/" +
                                 std::string(ember::cpu::isa_name(isa)) + "/" + std::to_string(shape.in) + "x" +
                                 std::to_string(shape.out) + "/tokens:";
        for (const int64_t n_tok : {int64_t(1), int64_t(16), int64_t(32), int64_t(128)})
          benchmark::RegisterBenchmark((name + std::to_string(n_tok)).c_str(), bench_matmul, type, isa, shape, n_tok,
                                       false, true)
              ->Arg(1)
              ->Arg(2)
              ->ArgName("threads")
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
      }
    }
  }
  constexpr Shape kGemmaShapes[] = {{640, 262144}, {640, 2048}, {2048, 640}, {640, 1024}};
  for (DType type : {DType::q8_0, DType::q5_0, DType::q4_0}) {
    for (const Shape shape : kGemmaShapes) {
      for (const int64_t n_tok : {1, 9}) {
        for (const bool invariant : {false, true}) {
          const std::string name = "matmul_order/" + std::string(ember::quant::type_name(type)) + "/" +
                                   std::string(ember::cpu::isa_name(ember::cpu::best_isa())) + "/" +
                                   std::to_string(shape.in) + "x" + std::to_string(shape.out) + "/tokens:" +
                                   std::to_string(n_tok) + "/" + (invariant ? "invariant" : "default");
          benchmark::RegisterBenchmark(name.c_str(), bench_matmul, type, ember::cpu::best_isa(), shape, n_tok,
                                       invariant, false)
              ->Arg(1)
              ->Arg(2)
              ->ArgName("threads")
              ->Unit(benchmark::kMicrosecond)
              ->UseRealTime();
        }
      }
    }
  }
  // Decode (tokens:1) and a block of 32 tokens at depth; a whole prompt (tokens = ctx,
  // the prefill of point 2 of issue 18: its FLOPS at 4096 against 512).
  const DType kv_types[] = {DType::f16, DType::f32, DType::kv_q8_g32, DType::kv_q4_g32};
  for (const DType cache_type : kv_types) {
    for (const int64_t n_ctx : {512, 4096, 16384, 32768}) {
      for (const int64_t n_tok : {int64_t(1), int64_t(32), n_ctx}) {
        if (n_tok == n_ctx && n_ctx > 4096) continue;
        const std::string name = "attention/" + std::string(ember::quant::type_name(cache_type)) +
                                 "/ctx:" + std::to_string(n_ctx) + "/tokens:" + std::to_string(n_tok);
        benchmark::RegisterBenchmark(name.c_str(), bench_attention, cache_type, n_ctx, n_tok, kTinyLlamaAttention)
            ->Arg(1)
            ->Arg(2)
            ->ArgName("threads")
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
  for (const DType cache_type : {DType::f16, DType::kv_q8_g32, DType::kv_q4_g32}) {
    for (const int64_t n_ctx : {4096, 16384}) {
      const std::string name = "attention_gemma/" + std::string(ember::quant::type_name(cache_type)) +
                               "/ctx:" + std::to_string(n_ctx) + "/tokens:1";
      benchmark::RegisterBenchmark(name.c_str(), bench_attention, cache_type, n_ctx, int64_t(1), kGemmaAttention)
          ->Arg(1)
          ->Arg(2)
          ->ArgName("threads")
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
