#include <string>

#include "common/catch.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/unicode.hpp"

namespace u = ember::tok::unicode;
using u::Category;

TEST_CASE("unicode: class table is Unicode 15.1 with White_Space", "[unicode]") {
  CHECK(u::unicode_version() == "15.1.0");

  CHECK(u::category(u::class_of('a')) == Category::letter);
  CHECK(u::category(u::class_of('Z')) == Category::letter);
  CHECK(u::category(u::class_of('7')) == Category::number);
  CHECK(u::category(u::class_of('!')) == Category::punctuation);
  CHECK(u::category(u::class_of('$')) == Category::symbol);
  CHECK(u::category(u::class_of(0x00E9)) == Category::letter);        // é
  CHECK(u::category(u::class_of(0x0301)) == Category::mark);          // combining acute
  CHECK(u::category(u::class_of(0x4E00)) == Category::letter);        // 一
  CHECK(u::category(u::class_of(0x0660)) == Category::number);        // Arabic-Indic zero (Nd)
  CHECK(u::category(u::class_of(0x2163)) == Category::number);        // Ⅳ (Nl)
  CHECK(u::category(u::class_of(0x00BD)) == Category::number);        // ½ (No)
  CHECK(u::category(u::class_of(0xE000)) == Category::other);         // private use
  CHECK(u::category(u::class_of(0x200B)) == Category::other);         // zero width space (Cf)
  CHECK(u::category(u::class_of(0x0378)) == Category::undefined);     // unassigned
  CHECK(u::category(u::class_of(0x31350)) == Category::letter);       // CJK Extension H (Unicode 15.0)
  CHECK(u::category(u::class_of(0x2EBF0)) == Category::letter);       // CJK Extension I (Unicode 15.1)
  CHECK(u::category(u::class_of(0x1C89)) == Category::undefined);     // assigned only in Unicode 16
  CHECK(u::category(u::class_of(0x10FFFF)) == Category::undefined);   // noncharacter
  CHECK(u::category(u::class_of(0x110000)) == Category::undefined);   // past the end

  for (const uint32_t ws : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au,
                            0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    INFO("U+" << std::hex << ws);
    CHECK(u::is_whitespace(u::class_of(ws)));
  }
  for (const uint32_t not_ws : {0x1Cu, 0x1Fu, 0x200Bu, 0x180Eu, 0xFEFFu, 0x61u}) {
    INFO("U+" << std::hex << not_ws);
    CHECK_FALSE(u::is_whitespace(u::class_of(not_ws)));
  }
  CHECK(u::category(u::class_of(0x3000)) == Category::separator);
  CHECK(u::category(u::class_of('\n')) == Category::other);
}

TEST_CASE("unicode: decode treats bad bytes one at a time", "[unicode]") {
  const auto at = [](std::string_view s, size_t pos = 0) { return u::decode(s, pos); };
  CHECK(at("A").cp == 'A');
  CHECK(at("\xC3\xA9").cp == 0xE9);
  CHECK(at("\xC3\xA9").size == 2);
  CHECK(at("\xE2\x82\xAC").cp == 0x20AC);
  CHECK(at("\xF0\x9F\x98\x80").cp == 0x1F600);
  CHECK(at("\xF0\x9F\x98\x80").size == 4);

  CHECK(at("\xFF").cp == u::kReplacementChar);
  CHECK(at("\x80").cp == u::kReplacementChar);
  CHECK(at("\xC3").cp == u::kReplacementChar);           // truncated at the end
  CHECK(at("\xC3").size == 1);
  CHECK(at("\xE2\x82").size == 1);                       // truncated 3-byte sequence
  CHECK(at("\xE2\x41\x41").cp == u::kReplacementChar);   // continuation missing
  CHECK(at("\xF7\xBF\xBF\xBF").cp == u::kReplacementChar);   // above U+10FFFF
  // Accepted as llama.cpp accepts them.
  CHECK(at("\xC0\x80").cp == 0);
  CHECK(at("\xED\xA0\x80").cp == 0xD800);

  std::vector<uint32_t> cps;
  u::append_codepoints("a\xFF\xC3\xA9", cps);
  CHECK(cps == std::vector<uint32_t>{'a', u::kReplacementChar, 0xE9});
}

TEST_CASE("unicode: append_utf8 round trips", "[unicode]") {
  for (const uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    u::append_utf8(s, cp);
    const auto d = u::decode(s, 0);
    CHECK(d.cp == cp);
    CHECK(d.size == s.size());
  }
}

TEST_CASE("unicode: incomplete_suffix_length", "[unicode]") {
  CHECK(u::incomplete_suffix_length("") == 0);
  CHECK(u::incomplete_suffix_length("abc") == 0);
  CHECK(u::incomplete_suffix_length("ab\xC3") == 1);
  CHECK(u::incomplete_suffix_length("ab\xE2\x82") == 2);
  CHECK(u::incomplete_suffix_length("ab\xE2\x82\xAC") == 0);
  CHECK(u::incomplete_suffix_length("\xF0\x9F\x98") == 3);
  CHECK(u::incomplete_suffix_length("\xF0\x9F\x98\x80") == 0);
  CHECK(u::incomplete_suffix_length("a\x82") == 0);     // stray continuation byte
  CHECK(u::incomplete_suffix_length("a\xFF") == 0);     // can never complete
}

TEST_CASE("byte map: GPT-2 bytes_to_unicode", "[unicode][bpe]") {
  using namespace ember::tok::byte_map;
  CHECK(char_of_byte('A') == 'A');
  CHECK(char_of_byte('!') == '!');
  CHECK(char_of_byte(0xE9) == 0xE9);
  CHECK(char_of_byte(0x00) == 0x100);
  CHECK(char_of_byte(' ') == 0x120);    // 'Ġ'
  CHECK(char_of_byte('\n') == 0x10A);   // 'Ċ'
  CHECK(char_of_byte(0xAD) == 0x143);   // the last of the 68 remapped bytes
  for (int b = 0; b < 256; ++b) CHECK(byte_of_char(char_of_byte(static_cast<uint8_t>(b))) == b);
  CHECK(byte_of_char(0x144) == -1);
  CHECK(byte_of_char(0x20) == -1);      // a space is not one of the characters
}
