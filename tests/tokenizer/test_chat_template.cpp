// Chat templates. The expected strings are what llama.cpp's built-in templates
// render for the same conversation (its tests/test-chat-template.cpp uses this
// conversation and these outputs).
#include <functional>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "ember/error.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/chat_template.hpp"

using ember::tok::ChatFormat;
using ember::tok::ChatMessage;
using ember::tok::ChatTemplate;

namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

ember::gguf::File metadata(const std::string& arch, const std::string& chat_template = "",
                           const std::vector<std::string>& tokens = {}) {
  ember::gguf::Writer w;
  w.add_string("general.architecture", arch);
  if (!chat_template.empty()) w.add_string("tokenizer.chat_template", chat_template);
  if (!tokens.empty()) w.add_string_array("tokenizer.ggml.tokens", tokens);
  return ember::gguf::File::from_bytes(w.to_bytes(), "chat-test");
}

void expect_unsupported(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    FAIL("no error thrown");
  } catch (const ember::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == ember::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("chat template: gemma", "[chat]") {
  const ChatTemplate t(ChatFormat::gemma);
  CHECK(t.name() == "gemma");
  CHECK(t.render(kConversation, true) ==
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
        "<start_of_turn>model\nHi there<end_of_turn>\n"
        "<start_of_turn>user\nWho are you<end_of_turn>\n"
        "<start_of_turn>model\nI am an assistant<end_of_turn>\n"
        "<start_of_turn>user\nAnother question<end_of_turn>\n"
        "<start_of_turn>model\n");
  const std::vector<ChatMessage> single = {{"user", "How are you"}};
  CHECK(t.render(single, true) == "<start_of_turn>user\nHow are you<end_of_turn>\n<start_of_turn>model\n");
  CHECK(t.render(single, false) == "<start_of_turn>user\nHow are you<end_of_turn>\n");
  const std::vector<ChatMessage> system_only = {{"system", "You are a helpful assistant"}};
  CHECK(t.render(system_only, false).empty());   // no user turn to fold it into
}

TEST_CASE("chat template: chatml", "[chat]") {
  const ChatTemplate t(ChatFormat::chatml);
  CHECK(t.render(kConversation, true) ==
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n"
        "<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
        "<|im_start|>user\nAnother question<|im_end|>\n"
        "<|im_start|>assistant\n");
  const std::vector<ChatMessage> system = {{"system", "You are a helpful assistant"}};
  CHECK(t.render(system, false) == "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n");
}

TEST_CASE("chat template: llama3", "[chat]") {
  const ChatTemplate t(ChatFormat::llama3);
  CHECK(t.render(kConversation, true) ==
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::vector<ChatMessage> none;
  CHECK(t.render(none, true) == "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("chat template: detection from Jinja source and names", "[chat]") {
  // Abridged from the templates shipped with the models.
  const std::string gemma =
      "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
      "+ '<end_of_turn>\\n' }}{% endfor %}";
  const std::string qwen =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}";
  const std::string llama3 =
      "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
      "message['content'] | trim + '<|eot_id|>' %}";
  CHECK(ChatTemplate::from_template(gemma).format() == ChatFormat::gemma);
  CHECK(ChatTemplate::from_template(qwen).format() == ChatFormat::chatml);
  CHECK(ChatTemplate::from_template(llama3).format() == ChatFormat::llama3);
  CHECK(ChatTemplate::from_template("chatml").format() == ChatFormat::chatml);
  CHECK(ChatTemplate::from_template("llama3").format() == ChatFormat::llama3);
  expect_unsupported([] { (void)ChatTemplate::from_template("{{ '[INST] ' + content + ' [/INST]' }}"); },
                     "not recognised");
  expect_unsupported([] { (void)ChatTemplate::from_template("<|im_start|>user<|im_sep|>"); }, "not recognised");

  CHECK(ChatTemplate::from_gguf(metadata("qwen2", gemma)).format() == ChatFormat::gemma);   // the template wins
  expect_unsupported([] { (void)ChatTemplate::from_gguf(metadata("gemma3", "[INST]")); }, "tokenizer.chat_template");
}

TEST_CASE("chat template: fallback by architecture", "[chat]") {
  CHECK(ChatTemplate::from_gguf(metadata("gemma3")).format() == ChatFormat::gemma);
  CHECK(ChatTemplate::from_gguf(metadata("gemma2")).format() == ChatFormat::gemma);
  CHECK(ChatTemplate::from_gguf(metadata("qwen2")).format() == ChatFormat::chatml);
  CHECK(ChatTemplate::from_gguf(metadata("qwen3")).format() == ChatFormat::chatml);
  CHECK(ChatTemplate::from_gguf(metadata("llama", "", {"<|begin_of_text|>", "<|start_header_id|>"})).format() ==
        ChatFormat::llama3);
  expect_unsupported([] { (void)ChatTemplate::from_gguf(metadata("llama", "", {"<s>", "</s>"})); }, "'llama'");
  expect_unsupported([] { (void)ChatTemplate::from_gguf(metadata("gpt2")); }, "'gpt2'");
}
