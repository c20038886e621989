#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <array>
#include <queue>
#include <string>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace ember::tok {

namespace byte_map {

namespace {

bool stands_for_itself(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> char_of_byte{};
  std::array<int16_t, 0x144> byte_of_char{};   // every mapped character is below U+0144
};

const Tables& tables() {
  static const Tables t = [] {
    Tables result;
    result.byte_of_char.fill(-1);
    uint32_t next_extra = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? b : next_extra++;
      result.char_of_byte[b] = cp;
      result.byte_of_char[cp] = static_cast<int16_t>(b);
    }
    return result;
  }();
  return t;
}

}  // namespace

uint32_t char_of_byte(uint8_t b) { return tables().char_of_byte[b]; }

int byte_of_char(uint32_t cp) {
  const auto& t = tables();
  return cp < t.byte_of_char.size() ? t.byte_of_char[cp] : -1;
}

}  // namespace byte_map

namespace {

// A piece of the word being merged; pieces form a doubly linked list.
struct Piece {
  int32_t id;     // token id, or kNoToken for a byte whose character is not in the vocabulary
  int32_t prev;   // index of the previous live piece, -1 at the start
  int32_t next;   // index of the next live piece, -1 at the end
  uint8_t byte;   // the first byte of the piece (for the fallback of unknown bytes)
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t left;      // piece index
  int32_t right;     // piece index
  int32_t left_id;   // ids when the pair was queued; a pair whose pieces changed since is stale
  int32_t right_id;
  int32_t result;
};

struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

class WordMerger {
 public:
  explicit WordMerger(const Vocab& vocab) : vocab_(vocab) {}

  // Merges the bytes of one word (already split by the pre-tokenizer).
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) {
    if (vocab_.ignore_merges) {
      mapped_.clear();
      for (const char ch : bytes) unicode::append_utf8(mapped_, byte_map::char_of_byte(static_cast<uint8_t>(ch)));
      const int32_t whole = vocab_.find(mapped_);
      if (whole != kNoToken) {
        out.push_back(whole);
        return;
      }
    }

    pieces_.clear();
    const int32_t n = static_cast<int32_t>(bytes.size());
    for (int32_t i = 0; i < n; ++i) {
      const auto b = static_cast<uint8_t>(bytes[i]);
      pieces_.push_back(Piece{vocab_.byte_piece[b], i - 1, i + 1 < n ? i + 1 : -1, b, true});
    }
    queue_ = {};
    for (int32_t i = 0; i + 1 < n; ++i) queue_pair(i, i + 1);

    while (!queue_.empty()) {
      const Candidate c = queue_.top();
      queue_.pop();
      Piece& left = pieces_[c.left];
      Piece& right = pieces_[c.right];
      if (!left.alive || !right.alive || left.next != c.right || left.id != c.left_id || right.id != c.right_id) {
        continue;   // one of the two pieces has been merged with something else since
      }
      left.id = c.result;
      left.next = right.next;
      right.alive = false;
      if (right.next >= 0) pieces_[right.next].prev = c.left;
      if (left.prev >= 0) queue_pair(left.prev, c.left);
      if (left.next >= 0) queue_pair(c.left, left.next);
    }

    for (int32_t i = 0; i >= 0 && i < n; i = pieces_[i].next) {
      const Piece& p = pieces_[i];
      if (p.id != kNoToken) {
        out.push_back(p.id);
        continue;
      }
      // A byte whose character is missing from the vocabulary: llama.cpp looks
      // each byte of that character's UTF-8 form up as a one-byte token and
      // drops the bytes that have none. Merged pieces are always tokens.
      mapped_.clear();
      unicode::append_utf8(mapped_, byte_map::char_of_byte(p.byte));
      for (const char ch : mapped_) {
        const int32_t id = vocab_.find(std::string_view(&ch, 1));
        if (id != kNoToken) out.push_back(id);
      }
    }
  }

 private:
  void queue_pair(int32_t left, int32_t right) {
    const int32_t left_id = pieces_[left].id;
    const int32_t right_id = pieces_[right].id;
    if (left_id == kNoToken || right_id == kNoToken) return;
    if (const Merge* m = vocab_.find_merge(left_id, right_id)) {
      queue_.push(Candidate{m->rank, left, right, left_id, right_id, m->result});
    }
  }

  const Vocab& vocab_;
  std::vector<Piece> pieces_;
  std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> queue_;
  std::string mapped_;
};

}  // namespace

void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  // Invalid UTF-8 becomes U+FFFD per bad byte before splitting, as in llama.cpp.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  unicode::append_codepoints(text, cps);
  std::vector<unicode::ClassByte> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = unicode::class_of(cps[i]);

  std::vector<uint32_t> word_ends;
  split_words(vocab.pre, cps, classes, word_ends);

  WordMerger merger(vocab);
  std::string word;
  uint32_t start = 0;
  for (const uint32_t end : word_ends) {
    word.clear();
    for (uint32_t i = start; i < end; ++i) unicode::append_utf8(word, cps[i]);
    merger.encode_word(word, out);
    start = end;
  }
}

}  // namespace ember::tok
