#include "tokenizer/spm.hpp"

#include <algorithm>
#include <queue>
#include <string>

#include "common/fail.hpp"
#include "tokenizer/unicode.hpp"

namespace ember::tok {

namespace {

// A run of bytes of the escaped text; symbols form a doubly linked list.
struct Symbol {
  uint32_t start;
  uint32_t size;   // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;   // bytes of left + right when queued; stale if they changed
};

struct LowerPriority {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  }
};

std::string escape_spaces(std::string_view text, bool prefix_space) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  if (prefix_space) out.append(kSpaceMarker);
  for (const char ch : text) {
    if (ch == ' ') {
      out.append(kSpaceMarker);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view raw, bool prefix_space, std::vector<int32_t>& out) {
  const std::string text = escape_spaces(raw, prefix_space);
  const std::string_view view(text);

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t size = std::min(unicode::sequence_length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{static_cast<uint32_t>(pos), static_cast<uint32_t>(size), index - 1,
                             pos + size < text.size() ? index + 1 : -1});
    pos += size;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> queue;
  const auto queue_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const uint32_t size = l.size + r.size;   // the two are adjacent in `text`
    const int32_t id = vocab.find(view.substr(l.start, size));
    if (id == kNoToken) return;
    queue.push(Candidate{vocab.scores[id], left, right, size});
  };

  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) queue_pair(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.size == 0 || right.size == 0 || left.size + right.size != c.size) continue;   // stale
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    queue_pair(left.prev, c.left);
    queue_pair(c.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = view.substr(s.start, s.size);
    const int32_t id = vocab.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    for (const char ch : piece) {
      const auto byte = static_cast<uint8_t>(ch);
      const int32_t fallback = vocab.byte_fallback[byte];
      if (fallback == kNoToken) {
        fail(ErrorCode::invalid_argument,
             "tokenizer: byte 0x{:02X} of the text has no token (the vocabulary has no <0x{:02X}> piece and no <unk>)",
             byte, byte);
      }
      out.push_back(fallback);
    }
  }
}

}  // namespace ember::tok
