// Hugging Face checkpoint -> GGUF (include/ember/convert.hpp).
//
// What is written follows llama.cpp's convert_hf_to_gguf.py (its Gemma3Model and
// LlamaModel classes, the SentencePiece vocabulary and gguf-py's SpecialVocab); the rules
// are restated in docs/convert.md. The order of work:
//   1. config.json (a "text_config" member is merged over the top level, as the converter does);
//   2. the tokenizer: tokenizer.model's pieces, then added_tokens.json and
//      tokenizer_config.json's added_tokens_decoder over them, padding to the config's
//      vocab_size; special token ids and add_* flags from tokenizer_config.json (names
//      resolved through tokenizer.json's added_tokens) and config.json's *_token_id;
//   3. the architecture's metadata;
//   4. the tensors, file by file and name by name, renamed, transformed in F32 and stored
//      in the chosen type.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "common/json.hpp"
#include "common/temp_file.hpp"
#include "convert/hf_config.hpp"
#include "convert/hf_tokenizer.hpp"
#include "convert/safetensors.hpp"
#include "ember/convert.hpp"
#include "gguf/gguf.hpp"

namespace ember {

namespace fs = std::filesystem;
using quant::DType;
using convert::Arch;
using convert::Config;
using convert::read_json_if;
using convert::to_u32;
using convert::Vocab;
using convert::SpecialTokens;
using convert::special_tokens;
using convert::add_tokenizer;

namespace {

// ---- Tensors ------------------------------------------------------------------------

// HF name (after the language_model. prefix is dropped) -> GGUF name; empty when unknown.
std::string gguf_name(Arch arch, const std::string& name) {
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (const auto t = kTop.find(name); t != kTop.end()) return t->second;
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return {};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(prefix.size(), dot - prefix.size());
  if (layer.empty() || !std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return {};
  std::string rest = name.substr(dot + 1);
  std::string suffix;
  for (const char* s : {".weight", ".bias"})
    if (rest.size() > std::strlen(s) && rest.compare(rest.size() - std::strlen(s), std::string::npos, s) == 0) {
      suffix = s;
      rest.resize(rest.size() - suffix.size());
    }
  if (suffix.empty()) return {};
  static const std::map<std::string, std::string> kCommon = {
      {"input_layernorm", "attn_norm"},      {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},        {"mlp.down_proj", "ffn_down"},
  };
  static const std::map<std::string, std::string> kLlama = {{"post_attention_layernorm", "ffn_norm"}};
  static const std::map<std::string, std::string> kQwen = {{"post_attention_layernorm", "ffn_norm"},
                                                           {"self_attn.q_norm", "attn_q_norm"},
                                                           {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kGemma3 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},     {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kGemma2 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"}};
  static const std::map<std::string, std::string> kOlmo2 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"post_feedforward_layernorm", "post_ffw_norm"},
      {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kQwenMoe = {
      {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}, {"mlp.gate", "ffn_gate_inp"}, {"mlp.experts.down_proj", "ffn_down_exps"},
      {"mlp.experts.gate_proj", "ffn_gate_exps"}, {"mlp.experts.up_proj", "ffn_up_exps"}};
  static const std::map<std::string, std::string> kPhi3 = {{"post_attention_layernorm", "ffn_norm"},
                                                           {"self_attn.qkv_proj", "attn_qkv"},
                                                           {"mlp.gate_up_proj", "ffn_up"}};
  const std::map<std::string, std::string>* own = &kQwen;
  switch (arch) {
    case Arch::llama: case Arch::granite: own = &kLlama; break;
    case Arch::gemma2: own = &kGemma2; break;
    case Arch::gemma3: own = &kGemma3; break;
    case Arch::olmo2: own = &kOlmo2; break;
    case Arch::qwen3moe: own = &kQwenMoe; break;
    case Arch::qwen2: case Arch::qwen3: own = &kQwen; break;
    case Arch::phi3: own = &kPhi3; break;
  }
  std::string base;
  if (const auto c = kCommon.find(rest); c != kCommon.end()) base = c->second;
  else if (const auto o = own->find(rest); o != own->end()) base = o->second;
  else return {};
  return "blk." + layer + "." + base + suffix;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<float> to_f32(const convert::StTensor& t) {
  std::vector<float> out(size_t(t.n_elements));
  const std::byte* p = t.data;
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case convert::StDType::f32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case convert::StDType::f16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
        break;
      }
      case convert::StDType::bf16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
        break;
      }
      case convert::StDType::f64: {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = float(d);
        break;
      }
      default:
        fail(ErrorCode::unsupported, "convert: tensor '{}' is {}; ember converts F32, F16, BF16 and F64 tensors", t.name,
             t.dtype_name);
    }
  }
  return out;
}

// llama.cpp's LlamaModel.permute: within each head, rows (j * half + i) move to (2 i + j),
// so that rope's pairs (i, i + half) of the checkpoint become adjacent.
std::vector<float> permute_heads(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head,
                                 const std::string& name) {
  if (n_head <= 0 || rows % (2 * n_head) != 0)
    fail(ErrorCode::malformed_file, "convert: tensor '{}' has {} rows, not a multiple of 2 x {} heads", name, rows, n_head);
  const int64_t head = rows / n_head, half = head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(&out[size_t((h * head + 2 * i + j) * cols)], &w[size_t((h * head + j * half + i) * cols)],
                    size_t(cols) * sizeof(float));
  return out;
}

// Stores `v` as `type` (F32, F16 or BF16) into `out`, which holds exactly its bytes.
void encode_into(const std::vector<float>& v, DType type, std::span<std::byte> out) {
  const size_t elem = type == DType::f32 ? 4 : 2;
  if (out.size() != v.size() * elem)
    fail(ErrorCode::internal, "convert: {} values for {} bytes of {}", v.size(), out.size(), quant::type_name(type));
  if (type == DType::f32) {
    std::memcpy(out.data(), v.data(), out.size());
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = type == DType::f16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
}

std::vector<std::byte> encode(const std::vector<float>& v, DType type) {
  std::vector<std::byte> out(v.size() * (type == DType::f32 ? 4 : 2));
  encode_into(v, type, out);
  return out;
}

// llama.cpp's Llama 3 rope factors (generate_extra_tensors), in float as the converter's torch code runs.
std::vector<float> llama3_rope_factors(const Config& c, const json::Value& scaling) {
  const double base = c.find_double("rope_theta").value_or(10000.0);
  const int64_t n_head = c.get_int("num_attention_heads");
  const int64_t dim = c.find_int("head_dim").value_or(c.get_int("hidden_size") / n_head);
  if (dim < 2 || dim > 65536) fail(ErrorCode::malformed_file, "{}: head dimension {} is outside 2 .. 65536", c.path(), dim);
  auto num = [&](const char* key, double fallback) {
    const json::Value* v = scaling.find(key);
    return v && v->is_number() ? v->as_double(key) : fallback;
  };
  const float factor = float(num("factor", 8.0));
  const float low = float(num("low_freq_factor", 1.0)), high = float(num("high_freq_factor", 4.0));
  // The converter reads original_max_position_embeddings from the top level of the config
  // only (8192 when absent there), not from rope_scaling where Llama 3.1's config has it.
  const float old_ctx = float(c.find_int("original_max_position_embeddings").value_or(8192));
  const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> factors;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(base), float(i) / float(dim));
    const float wavelen = float(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      factors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return factors;
}

std::vector<std::string> safetensors_files(const fs::path& dir) {
  std::vector<std::string> files;
  if (const auto index = read_json_if(dir / "model.safetensors.index.json")) {
    const json::Value* map = index->find("weight_map");
    if (!map) fail(ErrorCode::malformed_file, "'{}': no weight_map", (dir / "model.safetensors.index.json").string());
    std::set<std::string> names;
    for (const auto& [tensor, file] : map->as_object("model.safetensors.index.json: weight_map")) {
      const std::string& f = file.as_string("weight_map: " + tensor);
      if (f.find('/') != std::string::npos || f == "..")
        fail(ErrorCode::malformed_file, "model.safetensors.index.json: shard '{}' is not a file name in the folder", f);
      names.insert(f);
    }
    for (const std::string& n : names) files.push_back((dir / n).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) fail(ErrorCode::io, "convert: '{}' has no *.safetensors files", dir.string());
  return files;
}

}  // namespace


const char* to_string(ConvertType type) noexcept {
  switch (type) {
    case ConvertType::automatic: return "auto";
    case ConvertType::f32: return "F32";
    case ConvertType::f16: return "F16";
    case ConvertType::bf16: return "BF16";
  }
  return "?";
}

bool is_hf_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

ConvertReport convert_hf_checkpoint(const std::string& dir_name, const std::string& output,
                                    const ConvertOptions& options) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir)) fail(ErrorCode::io, "convert: '{}' is not a directory", dir_name);
  if (!fs::is_regular_file(dir / "config.json"))
    fail(ErrorCode::io, "convert: '{}' has no config.json (not a Hugging Face checkpoint)", dir_name);
  TempFile temp(output, "convert");   // an unwritable folder fails here, before any work
  Config config((dir / "config.json").string());
  ConvertReport report;

  const json::Value* archs = config.find("architectures");
  if (!archs || !archs->is_array() || archs->as_array("architectures").empty())
    fail(ErrorCode::malformed_file, "{}: no \"architectures\" list", config.path());
  report.hf_architecture = archs->as_array("architectures")[0].as_string(config.what("architectures"));
  const std::optional<Arch> found = convert::find_arch(report.hf_architecture);
  if (!found)
    fail(ErrorCode::unsupported, "convert: '{}' is a {}; ember converts {}", dir_name, report.hf_architecture,
         convert::supported_list());
  const Arch arch = *found;
  const std::string a = convert::arch_name(arch);
  convert::add_class_defaults(config, report.hf_architecture, arch);
  report.architecture = a;

  // Tensors first (cheap: headers only), so that the output type is known.
  std::vector<convert::SafetensorsFile> files;
  for (const std::string& f : safetensors_files(dir)) files.emplace_back(f);
  struct Item {
    const convert::StTensor* t;                     // the source (the first expert of a merged stack)
    std::string name;                               // GGUF
    std::vector<const convert::StTensor*> experts;  // a stack of experts' matrices, in expert order
  };
  std::vector<Item> items;
  std::set<DType> matrix_types;
  std::set<std::string> seen;
  // Mixture of experts: per layer, each expert's down/gate/up matrices, merged into one
  // [experts, rows, cols] tensor per kind once the layer's last one has been read (the
  // converter's order).
  const int64_t n_experts = arch == Arch::qwen3moe ? config.get_int("num_experts") : 0;
  if (arch == Arch::qwen3moe && (n_experts < 1 || n_experts > 65536))
    fail(ErrorCode::malformed_file, "{}: num_experts {} is outside 1 .. 65536", config.path(), n_experts);
  std::map<std::string, std::map<std::string, std::map<int64_t, const convert::StTensor*>>> expert_parts;
  std::map<std::string, int64_t> expert_count;
  for (const convert::SafetensorsFile& f : files) {
    std::vector<const convert::StTensor*> sorted;
    for (const convert::StTensor& t : f.tensors()) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->name < y->name; });
    for (const convert::StTensor* t : sorted) {
      std::string name = t->name;
      if (ends_with(name, ".attention.masked_bias") || ends_with(name, ".attention.bias") ||
          ends_with(name, ".rotary_emb.inv_freq")) {
        ++report.skipped;
        continue;
      }
      if (arch == Arch::gemma2 && name == "lm_head.weight") {   // the converter skips it (tied)
        ++report.skipped;
        continue;
      }
      if (arch == Arch::qwen3moe && name.find(".mlp.experts.") != std::string::npos) {
        // model.layers.N.mlp.experts.E.KIND.weight
        const size_t e0 = name.find(".mlp.experts.") + std::strlen(".mlp.experts.");
        const size_t e1 = name.find('.', e0);
        const std::string layer_prefix = name.substr(0, e0 - std::strlen(".experts."));   // model.layers.N.mlp
        char* end = nullptr;
        const long long expert = e1 == std::string::npos ? -1 : std::strtoll(name.c_str() + e0, &end, 10);
        const std::string kind = e1 == std::string::npos ? "" : name.substr(e1 + 1);
        if (expert < 0 || expert >= n_experts || end != name.c_str() + e1 ||
            (kind != "down_proj.weight" && kind != "gate_proj.weight" && kind != "up_proj.weight"))
          fail(ErrorCode::malformed_file, "convert: expert tensor '{}' does not fit num_experts {}", name, n_experts);
        expert_parts[layer_prefix][kind][expert] = t;
        if (++expert_count[layer_prefix] == 3 * n_experts) {
          for (const char* k : {"down_proj.weight", "gate_proj.weight", "up_proj.weight"}) {
            const auto& parts = expert_parts[layer_prefix][k];
            if (int64_t(parts.size()) != n_experts)
              fail(ErrorCode::malformed_file, "convert: '{}' has {} of {} experts' {}", layer_prefix, parts.size(),
                   n_experts, k);
            Item item{parts.begin()->second, gguf_name(arch, layer_prefix + ".experts." + k), {}};
            for (const auto& [e, part] : parts) {
              if (part->shape != item.t->shape || part->dtype != item.t->dtype)
                fail(ErrorCode::malformed_file, "convert: the experts of '{}' differ in shape or type", layer_prefix);
              item.experts.push_back(part);
            }
            if (item.name.empty() || !seen.insert(item.name).second)
              fail(ErrorCode::malformed_file, "convert: cannot name the merged experts of '{}'", layer_prefix);
            matrix_types.insert(item.t->dtype == convert::StDType::f16    ? DType::f16
                                : item.t->dtype == convert::StDType::bf16 ? DType::bf16
                                                                          : DType::f32);
            items.push_back(std::move(item));
          }
        }
        continue;
      }
      if (arch == Arch::qwen2 || arch == Arch::qwen3 || arch == Arch::qwen3moe) {
        if (name.rfind("mlp", 0) == 0 || name.rfind("multi_modal_projector", 0) == 0 ||
            name.rfind("vision_model", 0) == 0 || name.rfind("audio_tower", 0) == 0) {
          ++report.skipped;
          continue;
        }
      }
      if (arch == Arch::gemma3) {
        if (name.rfind("language_model.", 0) == 0) {
          name = name.substr(std::strlen("language_model."));
        } else if (name.rfind("multi_modal_projector.", 0) == 0 || name.rfind("vision_tower.", 0) == 0 ||
                   name.rfind("multimodal_projector.", 0) == 0 || name.rfind("vision_model.", 0) == 0) {
          ++report.skipped;
          continue;
        }
      }
      std::string out = gguf_name(arch, name);
      if (out.empty())
        fail(ErrorCode::unsupported, "convert: tensor '{}' of '{}' has no GGUF name for {}", t->name, f.path(), a);
      if (!seen.insert(out).second) fail(ErrorCode::malformed_file, "convert: two source tensors map to '{}'", out);
      if (t->shape.size() >= 2) {
        if (t->dtype == convert::StDType::f16) matrix_types.insert(DType::f16);
        else if (t->dtype == convert::StDType::bf16) matrix_types.insert(DType::bf16);
        else matrix_types.insert(DType::f32);
      }
      items.push_back({t, std::move(out), {}});
    }
  }
  for (const auto& [layer, count] : expert_count)
    if (count != 3 * n_experts)
      fail(ErrorCode::malformed_file, "convert: '{}' has {} expert matrices, not 3 x {}", layer, count, n_experts);
  if (items.empty()) fail(ErrorCode::malformed_file, "convert: '{}' has no weights", dir_name);
  DType matrix_type = DType::f32;
  switch (options.type) {
    case ConvertType::automatic:
      matrix_type = matrix_types.size() == 1 ? *matrix_types.begin() : DType::f32;
      break;
    case ConvertType::f32: matrix_type = DType::f32; break;
    case ConvertType::f16: matrix_type = DType::f16; break;
    case ConvertType::bf16: matrix_type = DType::bf16; break;
    default: fail(ErrorCode::invalid_argument, "convert: unknown output type {}", int(options.type));
  }
  report.type = matrix_type == DType::f16 ? ConvertType::f16 : matrix_type == DType::bf16 ? ConvertType::bf16 : ConvertType::f32;
  const uint32_t file_type = matrix_type == DType::f32 ? 0 : matrix_type == DType::f16 ? 1 : 32;

  const Vocab vocab = read_vocabulary(dir, config, arch, report.warnings);
  // The BPE path's SpecialVocab is made without a vocabulary size: ids are not range-checked.
  const SpecialTokens special = special_tokens(
      dir, vocab.model == "gpt2" ? std::numeric_limits<int64_t>::max() : int64_t(vocab.tokens.size()), report.warnings);
  report.n_vocab = int64_t(vocab.tokens.size());

  gguf::Writer w;
  w.add_string("general.architecture", a);
  w.add_string("general.type", "model");
  w.add_string("general.name", dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string());
  const int64_t n_head_default = arch == Arch::gemma3 ? 8 : config.get_int("num_attention_heads");
  const int64_t n_head = config.find_int("num_attention_heads").value_or(n_head_default);
  const int64_t n_embd = config.get_int("hidden_size");
  const int64_t n_layer = config.get_int("num_hidden_layers");
  std::optional<int64_t> n_head_kv = config.find_int("num_key_value_heads");
  if (n_head < 1 || n_embd < 1 || n_layer < 1 || (n_head_kv && *n_head_kv < 1))
    fail(ErrorCode::malformed_file, "convert: {}: hidden_size {}, num_hidden_layers {} and the head counts must be positive",
         config.path(), n_embd, n_layer);
  double phi3_attn_factor = 0;
  if (arch == Arch::phi3) {   // Phi3MiniModel.set_gguf_parameters
    const double rot = config.find_double("partial_rotary_factor").value_or(1.0);
    if (!(rot > 0.0 && rot <= 1.0))
      fail(ErrorCode::malformed_file, "{}: partial_rotary_factor {} is outside (0, 1]", config.path(), rot);
    const int64_t rope_dims = int64_t(rot * double(n_embd)) / n_head;
    w.add_uint32(a + ".context_length", to_u32(config.get_int("max_position_embeddings"), "context"));
    w.add_uint32(a + ".rope.scaling.original_context_length",
                 to_u32(config.get_int("original_max_position_embeddings"), "original_max_position_embeddings"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(n_head), "num_key_value_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*config.find_double("rms_norm_eps")));
    w.add_uint32(a + ".rope.dimension_count", to_u32(rope_dims, "rope dimensions"));
    w.add_float32(a + ".rope.freq_base", float(*config.find_double("rope_theta")));
    w.add_uint32("general.file_type", file_type);
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.find_int("sliding_window").value_or(0), "sliding_window"));
    // generate_extra_tensors: LongRoPE's attention factor here, its factor tensors below.
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const double scale = double(config.get_int("max_position_embeddings")) /
                           double(config.get_int("original_max_position_embeddings"));
      const json::Value* type = scaling->find("rope_type");
      if (!type) type = scaling->find("type");
      std::string kind = type && type->is_string() ? type->as_string("rope_type") : "";
      for (char& ch : kind) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      const double orig = double(config.get_int("original_max_position_embeddings"));
      if (orig < 1 || scale <= 0)
        fail(ErrorCode::malformed_file, "{}: original_max_position_embeddings and max_position_embeddings must be positive",
             config.path());
      if (kind == "su" || kind == "longrope") phi3_attn_factor = scale > 1.0 ? std::sqrt(1 + std::log(scale) / std::log(orig)) : 1.0;
      else if (kind == "yarn") phi3_attn_factor = scale > 1.0 ? 0.1 * std::log(scale) + 1.0 : 1.0;
      else fail(ErrorCode::unsupported, "convert: Phi-3 rope_scaling '{}' is not converted (longrope, su, yarn are)", kind);
      w.add_float32(a + ".rope.scaling.attn_factor", float(phi3_attn_factor));
    }
  } else if (arch == Arch::gemma2) {
    const int64_t head_dim = config.get_int("head_dim");
    w.add_uint32(a + ".context_length", to_u32(config.get_int("max_position_embeddings"), "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(n_head), "num_key_value_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*config.find_double("rms_norm_eps")));
    w.add_uint32(a + ".attention.key_length", to_u32(head_dim, "head_dim"));
    w.add_uint32(a + ".attention.value_length", to_u32(head_dim, "head_dim"));
    w.add_uint32("general.file_type", file_type);
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      const auto cap = config.find_double(key);
      if (!cap) fail(ErrorCode::unsupported, "convert: {} has no {}, which the Gemma 2 converter requires", config.path(), key);
      w.add_float32(a + "." + key, float(*cap));
    }
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.get_int("sliding_window"), "sliding_window"));
  } else if (arch == Arch::gemma3) {
    const int64_t head_dim = config.find_int("head_dim").value_or(256);
    w.add_uint32(a + ".context_length", to_u32(config.find_int("max_position_embeddings").value_or(131072), "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(config.find_double("rms_norm_eps").value_or(1e-6)));
    w.add_uint32(a + ".attention.key_length", to_u32(head_dim, "head_dim"));
    w.add_uint32(a + ".attention.value_length", to_u32(head_dim, "head_dim"));
    w.add_uint32("general.file_type", file_type);
    w.add_float32(a + ".rope.freq_base", float(config.find_double("rope_theta").value_or(1000000.0)));
    if (config.find("attn_logit_softcapping") || config.find("final_logit_softcapping"))
      fail(ErrorCode::unsupported, "convert: {} sets logit soft-capping, which Gemma 3 does not have", config.path());
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.get_int("sliding_window"), "sliding_window"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(4), "num_key_value_heads"));
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const json::Value* type = scaling->find("rope_type");
      if (!type || !type->is_string() || type->as_string("rope_type") != "linear")
        fail(ErrorCode::unsupported, "convert: Gemma 3 rope_scaling other than linear is not converted");
      const json::Value* factor = scaling->find("factor");
      if (!factor) fail(ErrorCode::malformed_file, "{}: rope_scaling without a factor", config.path());
      w.add_string(a + ".rope.scaling.type", "linear");
      w.add_float32(a + ".rope.scaling.factor", float(factor->as_double("rope_scaling.factor")));
    }
  } else {
    // TextModel.set_gguf_parameters (with the config class's defaults filled in).
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    if (const auto ctx = config.find_int("max_position_embeddings")) w.add_uint32(a + ".context_length", to_u32(*ctx, "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    if (const auto ff = config.find_int("intermediate_size")) w.add_uint32(a + ".feed_forward_length", to_u32(*ff, "ff"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    if (n_head_kv) w.add_uint32(a + ".attention.head_count_kv", to_u32(*n_head_kv, "num_key_value_heads"));
    if (const auto theta = config.find_double("rope_theta")) w.add_float32(a + ".rope.freq_base", float(*theta));
    if (const auto eps = config.find_double("rms_norm_eps")) w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*eps));
    for (const char* key : {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"})
      if (const auto eps = config.find_double(key)) {
        w.add_float32(a + ".attention.layer_norm_epsilon", float(*eps));
        break;
      }
    if (const auto n = config.find_int("num_local_experts")) w.add_uint32(a + ".expert_count", to_u32(*n, "experts"));
    if (const auto n = config.find_int("num_experts_per_tok")) w.add_uint32(a + ".expert_used_count", to_u32(*n, "experts"));
    // Granite's converter drops head_dim before this point.
    const bool has_head_dim = arch != Arch::granite && config.find("head_dim");
    const int64_t head_dim_value = has_head_dim ? config.get_int("head_dim") : n_embd / std::max<int64_t>(n_head, 1);
    if (has_head_dim) {
      w.add_uint32(a + ".attention.key_length", to_u32(head_dim_value, "head_dim"));
      w.add_uint32(a + ".attention.value_length", to_u32(head_dim_value, "head_dim"));
    }
    w.add_uint32("general.file_type", file_type);
    const json::Value* scaling = config.find("rope_scaling");
    const json::Value* type = scaling ? scaling->find("rope_type") : nullptr;
    if (scaling && !type) type = scaling->find("type");
    const std::string kind = type && type->is_string() ? type->as_string("rope_type") : "";
    if (arch == Arch::llama || arch == Arch::granite) {   // LlamaModel's additions
      w.add_uint32(a + ".vocab_size", to_u32(config.get_int("vocab_size"), "vocab_size"));
      const int64_t rope_dim = head_dim_value;
      w.add_uint32(a + ".rope.dimension_count", to_u32(rope_dim, "head_dim"));
      if (kind == "linear" && scaling->find("factor")) {
        w.add_string(a + ".rope.scaling.type", "linear");
        w.add_float32(a + ".rope.scaling.factor", float(scaling->find("factor")->as_double("factor")));
      } else if (kind != "llama3" && !kind.empty() && kind != "default") {
        fail(ErrorCode::unsupported, "convert: Llama rope_scaling '{}' is not converted (linear and llama3 are)", kind);
      }
      if (arch == Arch::granite)   // GraniteModel's: the multipliers, each when nonzero
        for (const auto& [key, gguf_key] : {std::pair{"attention_multiplier", ".attention.scale"},
                                            std::pair{"embedding_multiplier", ".embedding_scale"},
                                            std::pair{"residual_multiplier", ".residual_scale"},
                                            std::pair{"logits_scaling", ".logit_scale"}})
          if (const auto v = config.find_double(key); v && *v != 0.0) w.add_float32(a + gguf_key, float(*v));
    } else if (arch == Arch::olmo2) {   // TextModel only
    } else {   // Qwen2Model's and Qwen2MoeModel's: experts, YaRN scaling
      if (arch == Arch::qwen3moe) {
        if (const auto n = config.find_int("num_experts")) w.add_uint32(a + ".expert_count", to_u32(*n, "experts"));
        if (const auto n = config.find_int("moe_intermediate_size"))
          w.add_uint32(a + ".expert_feed_forward_length", to_u32(*n, "moe_intermediate_size"));
        if (const auto n = config.find_int("shared_expert_intermediate_size"))
          w.add_uint32(a + ".expert_shared_feed_forward_length", to_u32(*n, "shared_expert_intermediate_size"));
      }
      if (kind == "yarn" && scaling->find("factor")) {
        const json::Value* orig = scaling->find("original_max_position_embeddings");
        if (!orig) fail(ErrorCode::malformed_file, "{}: YaRN rope_scaling without original_max_position_embeddings", config.path());
        w.add_string(a + ".rope.scaling.type", "yarn");
        w.add_float32(a + ".rope.scaling.factor", float(scaling->find("factor")->as_double("factor")));
        w.add_uint32(a + ".rope.scaling.original_context_length", to_u32(orig->as_int("original_max_position_embeddings"), "ctx"));
      } else if (!kind.empty() && kind != "default") {
        fail(ErrorCode::unsupported, "convert: Qwen rope_scaling '{}' is not converted (yarn is)", kind);
      }
    }
  }
  w.add_uint32("general.quantization_version", 2);
  add_tokenizer(w, vocab, special);
  if (arch == Arch::gemma2 || arch == Arch::gemma3) w.add_bool("tokenizer.ggml.add_space_prefix", false);
  if (arch == Arch::llama || arch == Arch::granite) {
    if (const auto cfg = read_json_if(dir / "tokenizer_config.json"))
      if (const json::Value* p = cfg->find("add_prefix_space"); p && p->is_bool())
        w.add_bool("tokenizer.ggml.add_space_prefix", p->as_bool("add_prefix_space"));
    // The converter's rule for Granite's small models (a 49152-token vocabulary): no BOS.
    // (It would stop with a duplicate key when tokenizer_config.json also sets add_bos_token.)
    if (config.get_int("vocab_size") == 49152 && std::none_of(special.add.begin(), special.add.end(),
                                                              [](const auto& x) { return x.first == "bos"; }))
      w.add_bool("tokenizer.ggml.add_bos_token", false);
  }

  // Tensors: Llama 3's rope factors first, as the converter's generate_extra_tensors.
  std::vector<float> rope_factors;
  if (arch == Arch::llama || arch == Arch::granite) {
    const json::Value* scaling = config.find("rope_scaling");
    const json::Value* type = scaling ? scaling->find("rope_type") : nullptr;
    if (type && type->is_string() && type->as_string("rope_type") == "llama3")
      rope_factors = llama3_rope_factors(config, *scaling);
  }
  std::vector<float> phi3_long, phi3_short;
  if (arch == Arch::phi3)
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const double rot = config.find_double("partial_rotary_factor").value_or(1.0);
      const size_t half = size_t(int64_t(rot * double(n_embd)) / n_head) / 2;
      const json::Value* lf = scaling->find("long_factor");
      const json::Value* sf = scaling->find("short_factor");
      if (!lf || !sf) fail(ErrorCode::malformed_file, "{}: rope_scaling needs long_factor and short_factor", config.path());
      for (const json::Value& x : lf->as_array("long_factor")) phi3_long.push_back(float(x.as_double("long_factor")));
      for (const json::Value& x : sf->as_array("short_factor")) phi3_short.push_back(float(x.as_double("short_factor")));
      if (phi3_long.size() != half || phi3_short.size() != half)
        fail(ErrorCode::malformed_file, "{}: rope long and short factors must have {} entries each (have {} and {})",
             config.path(), half, phi3_long.size(), phi3_short.size());
    }
  const int64_t total = int64_t(items.size()) + (rope_factors.empty() ? 0 : 1) + (phi3_long.empty() ? 0 : 2);
  int64_t done = 0;
  auto progress = [&](std::string_view name) {
    ++done;
    ++report.tensors;
    if (options.progress) options.progress(ConvertProgress{.tensor = done, .tensors = total, .name = name});
  };
  if (!rope_factors.empty()) {
    w.add_tensor("rope_freqs.weight", DType::f32, {int64_t(rope_factors.size())}, encode(rope_factors, DType::f32));
    progress("rope_freqs.weight");
  }
  if (!phi3_long.empty()) {
    w.add_tensor("rope_factors_long.weight", DType::f32, {int64_t(phi3_long.size())}, encode(phi3_long, DType::f32));
    progress("rope_factors_long.weight");
    w.add_tensor("rope_factors_short.weight", DType::f32, {int64_t(phi3_short.size())}, encode(phi3_short, DType::f32));
    progress("rope_factors_short.weight");
  }
  // The tensors' bytes are made while the file is written, one tensor at a time (the
  // Writer's fill functions), so that only one tensor is in memory; everything that can
  // fail is checked here first.
  const int64_t n_vocab_out = int64_t(vocab.tokens.size());
  for (const Item& item : items) {
    const convert::StTensor& t = *item.t;
    if (t.shape.empty() || t.shape.size() > 4)
      fail(ErrorCode::unsupported, "convert: tensor '{}' has {} dimensions", t.name, t.shape.size());
    for (const convert::StTensor* part : item.experts.empty() ? std::vector<const convert::StTensor*>{&t} : item.experts)
      if (part->dtype != convert::StDType::f32 && part->dtype != convert::StDType::f16 &&
          part->dtype != convert::StDType::bf16 && part->dtype != convert::StDType::f64)
        fail(ErrorCode::unsupported, "convert: tensor '{}' is {}; ember converts F32, F16, BF16 and F64 tensors",
             part->name, part->dtype_name);
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    const int64_t cols = t.shape.back();
    std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());   // GGUF: innermost first
    if (!item.experts.empty()) {   // a stack: [experts, rows, cols]
      if (t.shape.size() != 2) fail(ErrorCode::malformed_file, "convert: expert tensor '{}' is not a matrix", t.name);
      shape.push_back(int64_t(item.experts.size()));
    }
    const std::string& name = item.name;
    const bool permute_q = (arch == Arch::llama || arch == Arch::granite) &&
                           (ends_with(name, "attn_q.weight") || ends_with(name, "attn_q.bias"));
    const bool permute_k = (arch == Arch::llama || arch == Arch::granite) &&
                           (ends_with(name, "attn_k.weight") || ends_with(name, "attn_k.bias"));
    const int64_t permute_rows = t.shape.size() == 1 ? cols : rows, permute_cols = t.shape.size() == 1 ? 1 : cols;
    const int64_t q_heads = n_head, k_heads = n_head_kv.value_or(n_head);
    if ((permute_q && (q_heads <= 0 || permute_rows % (2 * q_heads) != 0)) ||
        (permute_k && (k_heads <= 0 || permute_rows % (2 * k_heads) != 0)))
      fail(ErrorCode::malformed_file, "convert: tensor '{}' has {} rows, not a multiple of 2 x its heads", t.name,
           permute_rows);
    const bool cut_embedding = arch == Arch::gemma3 && name == "token_embd.weight";
    if (cut_embedding) {
      if (t.shape.size() != 2 || rows < n_vocab_out)
        fail(ErrorCode::malformed_file, "convert: '{}' has {} rows for a vocabulary of {}", t.name, rows, n_vocab_out);
      shape[1] = n_vocab_out;
    }
    // Gemma's RMSNorm scales by (1 + w).
    const bool plus_one = (arch == Arch::gemma2 || arch == Arch::gemma3) && ends_with(t.name, "norm.weight");
    // 1-D tensors, norms, biases and the expert router are F32 whatever the type.
    const bool f32 = shape.size() <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
                     ends_with(name, "ffn_gate_inp.weight");
    const DType type = f32 ? DType::f32 : matrix_type;
    w.add_deferred_tensor(name, type, shape, [&, item_ptr = &item, type, permute_q, permute_k, permute_rows, permute_cols,
                                     q_heads, k_heads, cut_embedding, plus_one, cols](std::span<std::byte> out) {
      const Item& it = *item_ptr;
      std::vector<float> values;
      if (it.experts.empty()) {
        values = to_f32(*it.t);
      } else {
        for (const convert::StTensor* e : it.experts) {
          const std::vector<float> part = to_f32(*e);
          values.insert(values.end(), part.begin(), part.end());
        }
      }
      if (permute_q) values = permute_heads(values, permute_rows, permute_cols, q_heads, it.t->name);
      if (permute_k) values = permute_heads(values, permute_rows, permute_cols, k_heads, it.t->name);
      if (cut_embedding) values.resize(size_t(n_vocab_out * cols));
      if (plus_one)
        for (float& x : values) x += 1.0f;
      encode_into(values, type, out);
      progress(it.name);
    });
  }

  w.write(temp.path());
  report.file_bytes = fs::file_size(temp.path());
  temp.commit();
  return report;
}

}  // namespace ember
