// SentencePiece-style encoding ("llama" tokenizer model), as llama.cpp does it:
// spaces become U+2581, the text is cut into UTF-8 characters, and the adjacent
// pair whose concatenation is the highest-scoring piece is merged first
// (leftmost on ties), until no pair forms a piece. Characters that are not
// pieces fall back to their bytes (<0xNN>).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace ember::tok {

// Encodes one fragment of plain text (no special tokens in it) and appends the
// ids to `out`. `prefix_space` adds the dummy-prefix space first. Throws
// invalid_argument for a byte the vocabulary cannot represent at all (no
// <0xNN> piece, no one-byte piece and no <unk>).
void spm_encode(const Vocab& vocab, std::string_view text, bool prefix_space, std::vector<int32_t>& out);

// The SentencePiece whitespace marker U+2581 "▁".
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

}  // namespace ember::tok
