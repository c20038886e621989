// The inside of ember::Model, shared with the session implementation.
#pragma once

#include <memory>
#include <optional>

#include "backend/backend.hpp"
#include "ember/model.hpp"
#include "model/loaded_model.hpp"
#include "runtime/logger.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember {

struct Model::Impl {
  ModelOptions options;
  ModelInfo info;
  int threads = 1;                                  // resolved thread count
  std::unique_ptr<backend::Backend> owner_backend;  // wrapped the weights; runs nothing
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<model::LoadedModel> loaded;       // null when loaded vocab_only
  std::optional<tok::Tokenizer> tokenizer;          // absent when the file has no vocabulary
  runtime::Logger logger;

  const tok::Tokenizer& require_tokenizer() const;
};

}  // namespace ember
