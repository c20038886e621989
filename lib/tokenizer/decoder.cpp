// Ids back to text: token pieces, Tokenizer::decode and StreamDecoder.
#include <string>

#include "common/fail.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/spm.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "tokenizer/unicode.hpp"

namespace ember::tok {

namespace {

int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return ch - 'A' + 10;   // validated as a hex digit when the vocabulary was loaded
}

void append_unescaped_spaces(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
}

// Byte-level BPE: each character of the piece stands for one byte. A character
// outside the map (not written by a GPT-2-style converter) is kept as UTF-8.
void append_unmapped_bytes(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Decoded d = unicode::decode(text, pos);
    const int byte = byte_map::byte_of_char(d.cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.substr(pos, d.size));
    }
    pos += d.size;
  }
}

}  // namespace

void Tokenizer::Impl::check_id(int32_t id) const {
  if (id < 0 || id >= vocab.n_tokens()) {
    fail(ErrorCode::invalid_argument, "tokenizer: token id {} is outside the vocabulary [0, {})", id, vocab.n_tokens());
  }
}

void Tokenizer::Impl::append_piece(int32_t id, bool render_special, std::string& out) const {
  const std::string_view text = vocab.text(id);
  switch (vocab.types[id]) {
    case TokenType::control:
    case TokenType::unknown:
      if (render_special) out.append(text);
      return;
    case TokenType::user_defined:
      out.append(text);   // stored as written, without escaping
      return;
    case TokenType::normal:
      if (vocab.model == TokenizerModel::spm) {
        append_unescaped_spaces(text, out);
      } else {
        append_unmapped_bytes(text, out);
      }
      return;
    case TokenType::byte:
      if (vocab.model == TokenizerModel::spm) out.push_back(static_cast<char>(hex_digit(text[3]) * 16 + hex_digit(text[4])));
      return;
    case TokenType::unused:
    case TokenType::undefined:
      return;   // no text, as in llama.cpp
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  for (const int32_t id : ids) impl_->check_id(id);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t before = out.size();
    impl_->append_piece(ids[i], render_special, out);
    // The dummy prefix added when encoding: drop it from the first token.
    if (i == 0 && impl_->vocab.add_space_prefix && out.size() > before && out[before] == ' ') out.erase(before, 1);
  }
  return out;
}

std::string Tokenizer::token_piece(int32_t id, bool render_special) const {
  impl_->check_id(id);
  std::string out;
  impl_->append_piece(id, render_special, out);
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : impl_(tokenizer.impl_), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
  impl_->check_id(id);
  impl_->append_piece(id, render_special_, pending_);
  const size_t hold = unicode::incomplete_suffix_length(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace ember::tok
