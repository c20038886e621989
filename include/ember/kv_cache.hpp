// Configuration and memory figures of the KV cache (the keys and values of past tokens).
//
// All sessions of a Model draw fixed-size pages from one pool per storage type
// (ModelOptions::kv_page_tokens, kv_pool_tokens). Each session has its own page
// tables per layer, a token budget, a storage type and an eviction policy. See
// docs/kv-cache.md for the design and measured figures.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember {

// How cached keys and values are stored.
enum class KVStorage {
  f16,   // 2 bytes per value (the default, as llama.cpp)
  f32,   // 4 bytes per value: exact, twice the memory
  int8,  // 8-bit codes with one f16 scale per group (KVCacheOptions::group_size)
  int4,   // 4-bit codes with an f16 scale and minimum per group
  int4o,  // int4 plus the 2 largest values of each group kept as f16 (outliers)
  k8v4,   // keys as int8, values as int4 (keys carry most of the quantization error)
};

// What happens when a session's cache reaches its budget.
enum class KVEviction {
  none,       // a batch that does not fit fails with ErrorCode::cache_full; nothing is lost
  streaming,  // StreamingLLM: keep the first `sinks` tokens and the most recent `window`
  h2o,        // H2O: keep the `heavy` tokens with the most accumulated attention + `recent` ones
};

struct KVCacheOptions {
  // Budget with eviction none: most tokens the session holds (its context length).
  // Default 4096; range [1, 1 << 24]; also capped by the model's training context.
  int32_t max_tokens = 4096;
  KVStorage storage = KVStorage::f16;
  // Values per scale for int8/int4/int4o/k8v4: 32 or 64 (the head size must be a multiple).
  int32_t group_size = 32;
  KVEviction eviction = KVEviction::none;
  // streaming: the budget is sinks + window (window > 0, sinks >= 0).
  int32_t sinks = 4;
  int32_t window = 1020;
  // h2o: the budget is heavy + recent (heavy >= 0, recent >= 1).
  int32_t heavy = 0;
  int32_t recent = 0;
  // Quantized storage (int8, int4, int4o, k8v4): the newest `exact_recent` tokens are
  // also kept in F16, and attention reads them from there, so that every query sees its
  // nearest predecessors exactly (they get most of the attention; quantizing them is
  // what costs INT4 most of its perplexity, see docs/kv-cache.md). Costs exact_recent
  // F16 tokens per session (plus up to a page), and a second attention pass over them.
  // 0 (the default): off. 16 is the measured recommendation for int4. Range [0, 4096];
  // needs eviction none; ignored for f16 and f32 storage; CPU backend only
  // (ErrorCode::unsupported on CUDA).
  int32_t exact_recent = 0;
};

// Memory of one session's cache.
struct KVSessionMemory {
  int32_t tokens = 0;         // tokens held (in the layer holding most)
  int32_t pages = 0;          // pages referenced, summed over layers
  int32_t shared_pages = 0;   // of these, pages shared with a fork
  size_t bytes = 0;           // pages * bytes per page
  size_t page_bytes = 0;      // keys and values of one page of one layer
  // The exact window's F16 pages (KVCacheOptions::exact_recent), not counted above.
  int32_t exact_pages = 0;
  size_t exact_bytes = 0;
};

// Memory of all KV pools of a Model.
struct KVPoolMemory {
  int32_t page_tokens = 0;    // tokens per page
  int64_t pages_total = 0;    // pages reserved in all pools
  int64_t pages_used = 0;
  int64_t pages_free = 0;
  size_t bytes_total = 0;     // reserved (address space; memory is committed when first written)
  size_t bytes_used = 0;      // in pages held by sessions
};

}  // namespace ember
