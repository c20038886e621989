// The inside of ember::Model, shared with the session implementation.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "ember/model.hpp"
#include "kv/page_pool.hpp"
#include "model/loaded_model.hpp"
#include "runtime/executor.hpp"
#include "runtime/logger.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember {

namespace runtime {
struct SelfDraftWeights;
}

struct Model::Impl {
  ModelOptions options;
  ModelInfo info;
  int threads = 1;                                  // resolved thread count
  // Holds the weights and the KV pools. On a device it also runs every op (the
  // executor shares it: one backend, one stream per model); the CPU's runs nothing
  // (one thread, no workers) and the executor has its own with the model's threads.
  std::shared_ptr<backend::Backend> owner_backend;
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<model::LoadedModel> loaded;       // null when loaded vocab_only
  std::optional<tok::Tokenizer> tokenizer;          // absent when the file has no vocabulary
  runtime::Logger logger;

  // KV page pools, one per storage type, made when a session first needs one.
  mutable std::mutex kv_mutex;
  mutable std::map<kv::KVTypes, std::shared_ptr<kv::Pool>> kv_pools;
  std::shared_ptr<kv::Pool> kv_pool(kv::KVTypes types) const;
  // The configuration of a new pool of `storage` when `reserved` bytes are reserved
  // by the others (ModelOptions::kv_pool_tokens, kv_memory_budget). Throws
  // invalid_argument when the budget has no room left. Call with kv_mutex held.
  kv::PoolConfig pool_config(kv::KVTypes types, size_t reserved) const;
  size_t reserved_kv_bytes() const;  // kv_mutex held

  const tok::Tokenizer& require_tokenizer() const;

  // The executor every session and engine of this model runs on, made on first use
  // (its thread pool starts then, not at load).
  runtime::Executor& executor() const;
  mutable std::mutex executor_mutex;
  mutable std::unique_ptr<runtime::Executor> executor_;

  // Self drafts (speculative decoding) derived from the weights, by option set.
  mutable std::mutex self_draft_mutex;
  mutable std::map<std::string, std::shared_ptr<const runtime::SelfDraftWeights>> self_drafts;
};

namespace runtime {
// The cache row type of a storage choice; throws invalid_argument for a bad group size.
// The key and value row types of a storage choice (throws invalid_argument for a bad one).
kv::KVTypes kv_types(KVStorage storage, int32_t group_size);
}  // namespace runtime

}  // namespace ember
