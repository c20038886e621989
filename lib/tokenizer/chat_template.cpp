#include "tokenizer/chat_template.hpp"

#include <algorithm>

#include "common/fail.hpp"
#include "gguf/gguf.hpp"

namespace ember::tok {

namespace {

constexpr std::string_view kTemplateKey = "tokenizer.chat_template";

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool is_ascii_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

// Surrounding whitespace removed, as Jinja's `trim` filter does in these templates.
std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<ChatFormat> detect(std::string_view source) {
  if (const auto by_name = chat_format_from_name(source)) return by_name;
  if (contains(source, "<|im_start|>")) {
    // Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) use the same marker
    // with a different layout.
    if (contains(source, "<|im_sep|>") || contains(source, "<end_of_utterance>")) return std::nullopt;
    return ChatFormat::chatml;
  }
  if (contains(source, "<start_of_turn>")) return ChatFormat::gemma;
  if (contains(source, "<|start_header_id|>") && contains(source, "<|end_header_id|>")) return ChatFormat::llama3;
  return std::nullopt;
}

bool vocabulary_has(const gguf::File& file, std::string_view text) {
  const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array()) return false;
  const gguf::Array& array = tokens->as_array();
  if (array.element_type != gguf::ValueType::string) return false;
  return std::any_of(array.items.begin(), array.items.end(),
                     [&](const gguf::Value& v) { return v.as_string() == text; });
}

void render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
  // Gemma has no system turn: the system text opens the next user turn.
  std::string_view system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system = trim(m.content);
      continue;
    }
    const std::string_view role = m.role == "assistant" ? std::string_view("model") : std::string_view(m.role);
    out.append("<start_of_turn>").append(role).append("\n");
    if (!system.empty() && role != "model") {
      out.append(system).append("\n\n");
      system = {};
    }
    out.append(trim(m.content)).append("<end_of_turn>\n");
  }
  if (add_generation_prompt) out.append("<start_of_turn>model\n");
}

void render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
  for (const ChatMessage& m : messages) {
    out.append("<|im_start|>").append(m.role).append("\n").append(m.content).append("<|im_end|>\n");
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
}

void render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt, std::string& out) {
  for (const ChatMessage& m : messages) {
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
    out.append(trim(m.content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) out.append("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

}  // namespace

std::optional<ChatFormat> chat_format_from_name(std::string_view name) {
  if (name == "gemma") return ChatFormat::gemma;
  if (name == "chatml") return ChatFormat::chatml;
  if (name == "llama3") return ChatFormat::llama3;
  return std::nullopt;
}

ChatTemplate ChatTemplate::from_template(std::string_view source) {
  if (const auto format = detect(source)) return ChatTemplate(*format);
  fail(ErrorCode::unsupported, "chat template not recognised (ember renders gemma, chatml and llama3): '{}'",
       source.substr(0, 120));
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& file) {
  if (const auto source = file.find_string(kTemplateKey)) {
    if (const auto format = detect(*source)) return ChatTemplate(*format);
    fail(ErrorCode::unsupported, "{}: the chat template in '{}' is not one ember renders (gemma, chatml, llama3)",
         file.name(), kTemplateKey);
  }
  const std::string_view arch = file.find_string("general.architecture").value_or("");
  if (arch.starts_with("gemma")) return ChatTemplate(ChatFormat::gemma);
  if (arch.starts_with("qwen2") || arch.starts_with("qwen3")) return ChatTemplate(ChatFormat::chatml);
  if (arch == "llama" && vocabulary_has(file, "<|start_header_id|>")) return ChatTemplate(ChatFormat::llama3);
  fail(ErrorCode::unsupported, "{}: no '{}' and no built-in chat format for architecture '{}'", file.name(),
       kTemplateKey, arch);
}

std::string_view ChatTemplate::name() const {
  switch (format_) {
    case ChatFormat::gemma: return "gemma";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::llama3: return "llama3";
  }
  return "unknown";
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  switch (format_) {
    case ChatFormat::gemma: render_gemma(messages, add_generation_prompt, out); break;
    case ChatFormat::chatml: render_chatml(messages, add_generation_prompt, out); break;
    case ChatFormat::llama3: render_llama3(messages, add_generation_prompt, out); break;
  }
  return out;
}

}  // namespace ember::tok
