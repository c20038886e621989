// Model::inspect: every reason a GGUF file cannot run, without running it.
//
// It walks the same checks as Model::load (the tokenizer, then the architecture, its
// hyperparameters and tensors through model::LoadedModel on a one-thread CPU backend,
// which maps the weights in place and copies nothing), but records each stage's failure
// and goes on, and lists every unsupported tensor type with its count first: load()
// would stop at the first such tensor.
#include <map>
#include <string>

#include "common/fail.hpp"
#include "ember/model.hpp"
#include "gguf/gguf.hpp"
#include "model/loaded_model.hpp"
#include "quant/dtype.hpp"
#include "runtime/backend_factory.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember {

ModelSupport Model::inspect(const std::filesystem::path& path) {
  auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  ModelSupport support;
  support.architecture = std::string(file->find_string("general.architecture").value_or(""));
  support.tokenizer = std::string(file->find_string("tokenizer.ggml.model").value_or(""));
  support.pre_tokenizer = std::string(file->find_string("tokenizer.ggml.pre").value_or(""));

  // Tensor types ember cannot compute with: type -> (count, first tensor).
  std::map<std::string, std::pair<int64_t, std::string>> unsupported;
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (quant::type_info(t.type).weight_supported) continue;
    auto [it, fresh] = unsupported.try_emplace(std::string(quant::type_name(t.type)), 0, t.name);
    ++it->second.first;
  }
  for (const auto& [type, use] : unsupported)
    support.missing.push_back(fmt::format("tensor type {}: {} tensor(s), the first '{}'; ember has no kernels for it",
                                          type, use.first, use.second));

  if (file->find("tokenizer.ggml.tokens") != nullptr) {
    try {
      (void)tok::Tokenizer::from_gguf(*file);
    } catch (const Error& e) {
      support.missing.push_back(std::string("tokenizer: ") + e.what());
    }
  }

  try {
    const auto backend = runtime::make_backend(Device::cpu, 1);
    (void)model::LoadedModel::from_file(file, *backend);
  } catch (const Error& e) {
    // A tensor of a type listed above stops the load there: said already.
    const std::string message = e.what();
    const bool said = !unsupported.empty() && message.find("' has type ") != std::string::npos;
    if (!said) support.missing.push_back(std::string("model: ") + message);
  }
  return support;
}

}  // namespace ember
