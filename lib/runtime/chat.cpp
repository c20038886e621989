#include "runtime/chat.hpp"

#include <vector>

#include "common/fail.hpp"
#include "tokenizer/chat_template.hpp"

namespace ember::runtime {

std::string detect_chat_format(const gguf::File& file) {
  try {
    return std::string(tok::ChatTemplate::from_gguf(file).name());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unsupported) return {};
    throw;
  }
}

std::string render_chat(const std::string& format, const gguf::File& file, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  const auto chat_format = tok::chat_format_from_name(format);
  if (!chat_format)
    fail(ErrorCode::unsupported, "model '{}' has no chat template ember knows (gemma, chatml, llama3)", file.name());
  std::vector<tok::ChatMessage> converted;
  converted.reserve(messages.size());
  for (const ChatMessage& m : messages) converted.push_back({m.role, m.content});
  return tok::ChatTemplate(*chat_format).render(converted, add_generation_prompt);
}

}  // namespace ember::runtime
