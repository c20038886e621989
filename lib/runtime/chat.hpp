// The chat format of a model, for ember::Model::apply_chat_template.
#pragma once

#include <span>
#include <string>

#include "ember/model.hpp"
#include "gguf/gguf.hpp"

namespace ember::runtime {

// "gemma", "chatml", "llama3", or "" when the model has no known chat format.
std::string detect_chat_format(const gguf::File& file);

// Renders `messages` in `format` (as returned by detect_chat_format). Throws
// unsupported for an empty/unknown format, invalid_argument for an unknown role.
std::string render_chat(const std::string& format, const gguf::File& file, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);

}  // namespace ember::runtime
