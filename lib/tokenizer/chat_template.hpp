// Chat templates: a conversation rendered as the prompt text a chat model was
// trained on. ember does not run Jinja; it recognises the template stored in
// the GGUF (tokenizer.chat_template) by substrings distinctive of each family
// and renders that family's format, as llama.cpp's built-in templates do:
//
//   gemma:  <start_of_turn>user\n{system\n\n}{content}<end_of_turn>\n ... <start_of_turn>model\n
//   chatml: <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   llama3: <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//
// The BOS token is not part of the text: Tokenizer::encode(add_bos = true) adds it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ember::gguf {
class File;
}

namespace ember::tok {

struct ChatMessage {
  std::string role;      // "system", "user", "assistant" (other roles are written as given)
  std::string content;
};

enum class ChatFormat {
  gemma,    // Gemma 1/2/3: user/model turns, system text folded into the first user turn
  chatml,   // Qwen and others: <|im_start|> / <|im_end|>
  llama3,   // Llama 3.x: header ids and <|eot_id|>
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatFormat format) : format_(format) {}

  // From tokenizer.chat_template when present, else from general.architecture
  // (gemma* -> gemma; qwen2*, qwen3* -> chatml; llama with <|start_header_id|> in
  // its vocabulary -> llama3). Throws unsupported naming what was found.
  static ChatTemplate from_gguf(const gguf::File& file);

  // Recognises a template: a format name ("gemma", "chatml", "llama3") or the
  // Jinja source of one of those families. Throws unsupported otherwise.
  static ChatTemplate from_template(std::string_view source);

  ChatFormat format() const { return format_; }
  std::string_view name() const;

  // The prompt for `messages`; `add_generation_prompt` appends the header of
  // the assistant's turn so that the model writes the reply next.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  ChatFormat format_;
};

// The format for a name ("gemma", "chatml", "llama3"), or nullopt.
std::optional<ChatFormat> chat_format_from_name(std::string_view name);

}  // namespace ember::tok
