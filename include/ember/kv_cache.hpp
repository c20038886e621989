// Configuration of a session's KV cache (the keys and values of past tokens).
#pragma once

#include <cstdint>

namespace ember {

// How cached keys and values are stored.
enum class KVStorage {
  f16,  // 2 bytes per value (the default, as llama.cpp)
  f32,  // 4 bytes per value: exact, twice the memory
};

struct KVCacheOptions {
  // Most tokens the session can hold (its context length). Default 4096; range
  // [1, 1 << 24]; also capped by the model's training context length.
  int32_t max_tokens = 4096;
  // Tokens per cache page: the unit of allocation and sharing. Default 16; range [1, 4096].
  int32_t page_tokens = 16;
  // Storage type of keys and values. Default f16.
  KVStorage storage = KVStorage::f16;
};

}  // namespace ember
