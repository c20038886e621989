// Finding special tokens in text before it is tokenized.
//
// Control, unknown and user-defined tokens are cut out of the text first, so
// that "<start_of_turn>" becomes one id instead of being spelled out in pieces.
// The rule is llama.cpp's: tokens are tried longest first (equal lengths by
// ascending id); each one takes every non-overlapping occurrence, leftmost
// first, inside the text that no earlier token has taken. Control and unknown
// tokens take part only when parse_special is on; user-defined ones always.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace ember::tok {

// A part of the text: plain text [start, start + size) when token == kNoToken,
// else one special token that spans those bytes.
struct Fragment {
  uint32_t start = 0;
  uint32_t size = 0;
  int32_t token = kNoToken;
};

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher() = default;
  explicit SpecialTokenMatcher(const Vocab& vocab);

  // Cuts `text` into fragments, in text order; plain-text fragments are never
  // empty and never adjacent.
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

 private:
  struct Node {
    int32_t token = kNoToken;       // the special token whose text ends here
    bool always = false;            // user-defined: matched even without parse_special
  };
  int32_t child(int32_t node, uint8_t byte) const;

  // A trie of the special tokens' texts. Edges from the root are an array (most
  // bytes of ordinary text start no special token); the edges of node i are
  // edge_bytes_/edge_targets_[edge_begin_[i], edge_begin_[i + 1]), by byte.
  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_edges_{};
  std::vector<uint32_t> edge_begin_;   // [nodes + 1]
  std::vector<uint8_t> edge_bytes_;
  std::vector<int32_t> edge_targets_;
  uint32_t max_size_ = 0;              // bytes of the longest special token
};

}  // namespace ember::tok
