// What a Tokenizer shares between its copies and its StreamDecoders.
#pragma once

#include <string>

#include "tokenizer/special_tokens.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/vocab.hpp"

namespace ember::tok {

struct Tokenizer::Impl {
  Vocab vocab;
  SpecialTokenMatcher specials;

  // Throws invalid_argument naming `id` when it is not a token id.
  void check_id(int32_t id) const;
  // Appends the bytes token `id` stands for (decode's rules, no space removal).
  void append_piece(int32_t id, bool render_special, std::string& out) const;
};

}  // namespace ember::tok
