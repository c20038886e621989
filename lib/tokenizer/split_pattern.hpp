// Split patterns: the regular expressions of the pre-tokenizer table that have
// no hand-written splitter (lib/tokenizer/pre_tokenizer.cpp), matched the way
// llama.cpp's std::regex path matches them, so the words and the ids agree.
//
// The dialect is the subset the table uses: alternation, groups (?:...) and
// (...), look-ahead (?=...) and (?!...), greedy ? * + {n} {n,} {n,m}, classes
// [...] / [^...] with ranges, \s \S \d \D \p{L} \p{N} \p{P} \p{S} \p{M}, the
// escapes \r \n \t \v \f and \<punctuation>, and $ (end of the piece).
// Matching is leftmost-first (ECMAScript / PCRE order, not longest) by a
// backtracker that remembers the (instruction, position) states it has seen
// fail, for the whole piece, so a failed state is never explored twice and
// nothing recurses per character.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.hpp"

namespace ember::tok {

// How a pattern sees the text. llama.cpp runs a pattern that names a Unicode
// class (\p{..}) over a "collapsed" text and the others over codepoints; the
// two give different words (e.g. '~' is not \p{S} in the collapsed view).
enum class SymbolView : uint8_t {
  // ASCII stays as it is; every other codepoint becomes one byte for its
  // class: whitespace 0x0B, \p{N} 0xD1, \p{L} 0xD2, \p{P} 0xD3, \p{M} 0xD4,
  // \p{S} 0xD5, anything else 0xD0. \p{X} matches that byte and a fixed list
  // of ASCII characters (see split_pattern.cpp).
  collapsed,
  // Codepoints as they are, except whitespace above U+007F, which becomes U+000B.
  codepoints,
};

// The symbol standing for codepoint `cp` (of class `c`) in each view.
uint32_t collapsed_symbol(uint32_t cp, unicode::ClassByte c);
uint32_t codepoint_symbol(uint32_t cp, unicode::ClassByte c);

// Working memory of SplitPattern::split, reused across calls by one thread.
struct SplitScratch {
  struct Pending {                   // an alternative still to try
    uint32_t pc;
    uint32_t pos;
    uint32_t depth;                  // length of the path when it was queued
  };
  struct Program {
    std::vector<uint64_t> seen;      // [n_instructions * (n_symbols + 1)] bits: visited in this run
    std::vector<uint64_t> failed;    // same shape: known to fail on this piece
    std::vector<uint64_t> succeeded; // same shape: known to reach the match (look-aheads only)
    std::vector<uint32_t> marked;    // words set in `seen`, to clear them cheaply
    bool overflowed = false;         // `marked` stopped recording: clear all of `seen`
    std::vector<Pending> stack;
    std::vector<size_t> path;        // states from the start of the run to the current one (look-aheads)
  };
  std::vector<Program> programs;     // one per compiled program (the pattern and each look-ahead)
};

class SplitPattern {
 public:
  // Compiles `pattern` (UTF-8). Throws ember::Error (internal) for a pattern
  // outside the dialect above: the table is fixed, so that is a bug in ember.
  explicit SplitPattern(std::string_view pattern);
  ~SplitPattern();
  SplitPattern(SplitPattern&&) noexcept;
  SplitPattern& operator=(SplitPattern&&) noexcept;

  SymbolView view() const;

  // Splits one piece, `symbols` in this pattern's view, as llama.cpp splits a
  // piece with std::regex_iterator: each match is a word and so is each
  // stretch between two matches. Appends `base` + the end of every non-empty
  // word to `ends`.
  void split(std::span<const uint32_t> symbols, uint32_t base, SplitScratch& scratch,
             std::vector<uint32_t>& ends) const;

  struct Compiled;

 private:
  std::unique_ptr<const Compiled> compiled_;
};

}  // namespace ember::tok
