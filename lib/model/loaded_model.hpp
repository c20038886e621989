// A model file opened and its weights placed on a backend: the immutable part of
// a model that any number of sessions share.
#pragma once

#include <filesystem>
#include <memory>

#include "backend/backend.hpp"
#include "gguf/gguf.hpp"
#include "model/hparams.hpp"
#include "model/weights.hpp"

namespace ember::model {

struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  HParams hparams;
  Weights weights;

  // Opens `path`, reads the hyper-parameters and places the weights on `backend`.
  static std::shared_ptr<LoadedModel> open(const std::filesystem::path& path, backend::Backend& backend);
  static std::shared_ptr<LoadedModel> from_file(std::shared_ptr<const gguf::File> file, backend::Backend& backend);
};

}  // namespace ember::model
