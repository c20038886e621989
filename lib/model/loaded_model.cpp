#include "model/loaded_model.hpp"

namespace ember::model {

std::shared_ptr<LoadedModel> LoadedModel::open(const std::filesystem::path& path, backend::Backend& backend) {
  return from_file(std::make_shared<const gguf::File>(gguf::File::open(path)), backend);
}

std::shared_ptr<LoadedModel> LoadedModel::from_file(std::shared_ptr<const gguf::File> file,
                                                    backend::Backend& backend) {
  auto model = std::make_shared<LoadedModel>();
  model->hparams = HParams::from_gguf(*file);
  model->weights = Weights::load(*file, model->hparams, backend, file);
  model->file = std::move(file);
  return model;
}

}  // namespace ember::model
