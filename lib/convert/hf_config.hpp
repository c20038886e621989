// Reading a Hugging Face checkpoint's config.json as llama.cpp's converter sees it, and
// the architectures ember converts (include/ember/convert.hpp, docs/convert.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/json.hpp"

namespace ember::convert {

// The architectures ember converts, by their GGUF names.
enum class Arch { llama, granite, gemma2, gemma3, qwen2, qwen3, qwen3moe, olmo2, phi3 };

// GGUF general.architecture of `a`.
const char* arch_name(Arch a);
// The Arch of config.json's architectures[0] (a Hugging Face class name); nullopt for others.
std::optional<Arch> find_arch(std::string_view hf_class);
// "LlamaForCausalLM, MistralForCausalLM, ..." for messages.
std::string supported_list();

// config.json with a text_config merged over the top level. find() returns the last
// non-null member of a name, nullptr when there is none.
class Config {
 public:
  explicit Config(const std::string& path);
  const json::Value* find(std::string_view key) const;
  std::string what(std::string_view key) const;       // "PATH: \"key\"", for messages
  int64_t get_int(std::string_view key) const;        // malformed_file when absent or not an integer
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_double(std::string_view key) const;
  const std::string& path() const { return path_; }
  // The converter reads transformers' parsed config, in which every attribute of the
  // model's config class is present: its defaults fill the keys config.json leaves out.
  void add_defaults(std::initializer_list<std::pair<const char*, json::Value>> defaults);

 private:
  std::string path_;
  json::Object members_;
};

// transformers' config class defaults for the keys the converter reads.
void add_class_defaults(Config& c, const std::string& hf_arch, Arch arch);

// `v` as u32 for a GGUF key; malformed_file naming `what` when out of range.
uint32_t to_u32(int64_t v, std::string_view what);

// A JSON file of the checkpoint, or nullopt when it does not exist.
std::optional<json::Value> read_json_if(const std::filesystem::path& path);

}  // namespace ember::convert
