// Byte-level BPE (GPT-2 family): the byte <-> character map and the merge loop.
//
// Text is split into words by the pre-tokenizer rule; each byte of a word is
// replaced by one printable character (GPT-2's bytes_to_unicode table), and
// adjacent pieces are merged pairwise, lowest merge rank first (leftmost on
// ties), until no listed pair remains.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace ember::tok {

namespace byte_map {
// The character GPT-2 uses for byte `b`: printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 bytes map in order to
// U+0100, U+0101, ...
uint32_t char_of_byte(uint8_t b);
// The byte a character stands for, or -1 when it is not one of the 256.
int byte_of_char(uint32_t cp);
}  // namespace byte_map

// Encodes one fragment of plain text (no special tokens in it) and appends the
// ids to `out`.
void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace ember::tok
