#include "tokenizer/split_pattern.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "common/fail.hpp"

namespace ember::tok {

using unicode::Category;
using unicode::ClassByte;

namespace {

// Collapsed-view bytes of the non-ASCII classes.
constexpr uint32_t kWhitespaceByte = 0x0B;
constexpr uint32_t kOtherByte = 0xD0;
constexpr uint32_t kNumberByte = 0xD1;
constexpr uint32_t kLetterByte = 0xD2;
constexpr uint32_t kPunctuationByte = 0xD3;
constexpr uint32_t kMarkByte = 0xD4;
constexpr uint32_t kSymbolByte = 0xD5;

using Range = std::pair<uint32_t, uint32_t>;   // inclusive

// The ASCII members of each \p{X} in the collapsed view: what llama.cpp puts in
// place of \p{X}. They follow the Unicode categories except that '~' (Sm) is
// not in \p{S}.
constexpr Range kAsciiNumber[] = {{'0', '9'}};
constexpr Range kAsciiLetter[] = {{'A', 'Z'}, {'a', 'z'}};
constexpr Range kAsciiPunctuation[] = {{'!', '#'}, {'%', '*'}, {',', '/'}, {':', ';'}, {'?', '@'},
                                       {'[', ']'}, {'_', '_'}, {'{', '{'}, {'}', '}'}};
constexpr Range kAsciiSymbol[] = {{'$', '$'}, {'+', '+'}, {'<', '>'}, {'^', '^'}, {'`', '`'}, {'|', '|'}};
// \s of std::regex in the "C" locale; other whitespace reaches the matcher as 0x0B.
constexpr Range kSpace[] = {{'\t', '\r'}, {' ', ' '}};
constexpr Range kDigit[] = {{'0', '9'}};

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

struct SymbolSet {
  bool negated = false;
  std::vector<Range> ranges;
  std::array<uint64_t, 4> low{};   // membership of symbols 0..255, negation applied

  // Sorts and merges the ranges and fills the table of the first 256 symbols.
  void finish() {
    std::sort(ranges.begin(), ranges.end());
    std::vector<Range> merged;
    for (const Range& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    ranges = std::move(merged);
    for (uint32_t s = 0; s < 256; ++s) {
      if (in_ranges(s) != negated) low[s >> 6] |= uint64_t{1} << (s & 63);
    }
  }
  bool in_ranges(uint32_t s) const {
    // The last range starting at or before s.
    const auto it = std::upper_bound(ranges.begin(), ranges.end(), s,
                                     [](uint32_t value, const Range& r) { return value < r.first; });
    return it != ranges.begin() && s <= std::prev(it)->second;
  }
  bool contains(uint32_t s) const { return s < 256 ? ((low[s >> 6] >> (s & 63)) & 1) != 0 : in_ranges(s) != negated; }
};

enum class Op : uint8_t {
  symbol,        // the symbol at the position is in sets[x]: advance
  split,         // try x first, then y
  jump,          // continue at x
  look_ahead,    // programs[x] matches here (negate: does not): continue without advancing
  end_of_text,   // the position is the end of the piece
  match,
};

struct Inst {
  Op op = Op::match;
  bool negate = false;
  uint32_t x = 0;
  uint32_t y = 0;
};

struct Node {
  enum class Kind : uint8_t { symbol, concat, alternate, repeat, look_ahead, end_of_text };
  explicit Node(Kind k = Kind::concat) : kind(k) {}
  Kind kind;
  uint32_t set = 0;
  uint32_t min = 1;
  uint32_t max = 1;
  bool negate = false;
  std::vector<Node> children;
};

}  // namespace

struct SplitPattern::Compiled {
  SymbolView view = SymbolView::codepoints;
  std::vector<SymbolSet> sets;
  std::vector<std::vector<Inst>> programs;   // [0] is the pattern; the others are look-aheads
};

namespace {

// Recursive-descent parser of the dialect; nesting depth is that of the
// (fixed) pattern, not of the text.
class Parser {
 public:
  Parser(std::string_view pattern, SplitPattern::Compiled& out) : pattern_(pattern), out_(out) {
    unicode::append_codepoints(pattern, cps_);
  }

  Node parse() {
    Node root = alternation();
    if (pos_ != cps_.size()) error("unexpected ')'");
    return root;
  }

 private:
  [[noreturn]] void error(std::string_view what) const {
    fail(ErrorCode::internal, "pre-tokenizer pattern '{}': {} at codepoint {}", pattern_, what, pos_);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek() const { return at_end() ? 0 : cps_[pos_]; }
  uint32_t next() {
    if (at_end()) error("unexpected end");
    return cps_[pos_++];
  }
  void expect(uint32_t cp) {
    if (next() != cp) error("unexpected character");
  }

  Node alternation() {
    Node alt{Node::Kind::alternate};
    alt.children.push_back(sequence());
    while (peek() == '|' && !at_end()) {
      ++pos_;
      alt.children.push_back(sequence());
    }
    return alt.children.size() == 1 ? std::move(alt.children[0]) : std::move(alt);
  }

  Node sequence() {
    Node seq{Node::Kind::concat};
    while (!at_end() && peek() != '|' && peek() != ')') seq.children.push_back(quantified());
    return seq;
  }

  uint32_t number() {
    if (peek() < '0' || peek() > '9') error("expected a count");
    uint32_t value = 0;
    while (peek() >= '0' && peek() <= '9' && !at_end()) value = value * 10 + (next() - '0');
    if (value > 64) error("count above 64");
    return value;
  }

  Node quantified() {
    Node atom_node = atom();
    uint32_t min = 1, max = 1;
    switch (peek()) {
      case '?': min = 0, max = 1; break;
      case '*': min = 0, max = kUnbounded; break;
      case '+': min = 1, max = kUnbounded; break;
      case '{': break;
      default: return atom_node;
    }
    if (next() == '{') {
      min = max = number();
      if (peek() == ',') {
        ++pos_;
        max = peek() == '}' ? kUnbounded : number();
      }
      expect('}');
      if (max < min) error("bad count");
    }
    if (peek() == '?' || peek() == '+') error("lazy and possessive quantifiers are not supported");
    Node rep{Node::Kind::repeat};
    rep.min = min;
    rep.max = max;
    rep.children.push_back(std::move(atom_node));
    return rep;
  }

  Node atom() {
    const uint32_t cp = next();
    switch (cp) {
      case '(': {
        Node inner;
        if (peek() == '?') {
          ++pos_;
          const uint32_t kind = next();
          if (kind == ':') {
            inner = alternation();
          } else if (kind == '=' || kind == '!') {
            inner = Node{Node::Kind::look_ahead};
            inner.negate = kind == '!';
            inner.children.push_back(alternation());
          } else {
            error("unsupported group");
          }
        } else {
          inner = alternation();   // captures are not needed: only the whole match counts
        }
        expect(')');
        return inner;
      }
      case '[': return symbol_node(bracket());
      case '$': return Node{Node::Kind::end_of_text};
      case '\\': {
        SymbolSet set;
        if (escape(set, /*in_class=*/false)) return symbol_node(std::move(set));
        set.ranges.push_back({last_literal_, last_literal_});
        return symbol_node(std::move(set));
      }
      case '.':
      case '^':
      case ')':
      case '|':
      case '*':
      case '+':
      case '?':
      case '{': error("unsupported or misplaced operator");
      default: {
        SymbolSet set;
        set.ranges.push_back({literal(cp), literal(cp)});
        return symbol_node(std::move(set));
      }
    }
  }

  uint32_t literal(uint32_t cp) const {
    if (cp >= 0x80 && out_.view == SymbolView::collapsed) error("non-ASCII character in a pattern with \\p{..}");
    return cp;
  }

  Node symbol_node(SymbolSet set) {
    set.finish();
    Node node{Node::Kind::symbol};
    node.set = static_cast<uint32_t>(out_.sets.size());
    out_.sets.push_back(std::move(set));
    return node;
  }

  static void add(SymbolSet& set, std::span<const Range> ranges) {
    set.ranges.insert(set.ranges.end(), ranges.begin(), ranges.end());
  }
  static void add_class(SymbolSet& set, uint32_t byte, std::span<const Range> ascii) {
    set.ranges.push_back({byte, byte});
    add(set, ascii);
  }

  // After a backslash: adds a class to `set` and returns true, or stores a
  // literal in last_literal_ and returns false.
  bool escape(SymbolSet& set, bool in_class) {
    const uint32_t cp = next();
    switch (cp) {
      case 's': add(set, kSpace); return true;
      case 'd': add(set, kDigit); return true;
      case 'S':
      case 'D':
        if (in_class) error("\\S and \\D inside a class are not supported");
        set.negated = true;
        add(set, cp == 'S' ? std::span<const Range>(kSpace) : std::span<const Range>(kDigit));
        return true;
      case 'p': {
        if (out_.view != SymbolView::collapsed) error("\\p{..} in a codepoint pattern");
        expect('{');
        const uint32_t name = next();
        expect('}');
        switch (name) {
          case 'N': add_class(set, kNumberByte, kAsciiNumber); break;
          case 'L': add_class(set, kLetterByte, kAsciiLetter); break;
          case 'P': add_class(set, kPunctuationByte, kAsciiPunctuation); break;
          case 'M': add_class(set, kMarkByte, {}); break;   // no ASCII marks
          case 'S': add_class(set, kSymbolByte, kAsciiSymbol); break;
          default: error("unknown \\p class");
        }
        return true;
      }
      case 'r': last_literal_ = '\r'; return false;
      case 'n': last_literal_ = '\n'; return false;
      case 't': last_literal_ = '\t'; return false;
      case 'v': last_literal_ = '\v'; return false;
      case 'f': last_literal_ = '\f'; return false;
      default:
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) {
          error("unsupported escape");
        }
        last_literal_ = literal(cp);
        return false;
    }
  }

  // One member of a class: a literal (returned; it may start a range) or a
  // class escape (added to `set`; returns kUnbounded).
  uint32_t class_atom(SymbolSet& set) {
    const uint32_t cp = next();
    if (cp != '\\') return literal(cp);
    return escape(set, /*in_class=*/true) ? kUnbounded : last_literal_;
  }

  SymbolSet bracket() {
    SymbolSet set;
    if (peek() == '^') {
      set.negated = true;
      ++pos_;
    }
    bool first = true;
    while (first || peek() != ']') {
      if (at_end()) error("unterminated class");
      first = false;
      const uint32_t low = class_atom(set);
      if (low == kUnbounded) continue;
      if (peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        const uint32_t high = class_atom(set);
        if (high == kUnbounded || high < low) error("bad range");
        set.ranges.push_back({low, high});
      } else {
        set.ranges.push_back({low, low});
      }
    }
    ++pos_;
    return set;
  }

  std::string_view pattern_;
  SplitPattern::Compiled& out_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  uint32_t last_literal_ = 0;
};

class Emitter {
 public:
  explicit Emitter(SplitPattern::Compiled& out) : out_(out) {}

  uint32_t program(const Node& root) {
    const auto id = static_cast<uint32_t>(out_.programs.size());
    out_.programs.emplace_back();
    emit(root, id);
    push(id, Inst{Op::match});
    return id;
  }

 private:
  uint32_t here(uint32_t prog) const { return static_cast<uint32_t>(out_.programs[prog].size()); }
  uint32_t push(uint32_t prog, Inst inst) {
    out_.programs[prog].push_back(inst);
    return here(prog) - 1;
  }
  Inst& at(uint32_t prog, uint32_t pc) { return out_.programs[prog][pc]; }

  void emit(const Node& node, uint32_t prog) {
    switch (node.kind) {
      case Node::Kind::symbol: push(prog, Inst{Op::symbol, false, node.set}); return;
      case Node::Kind::end_of_text: push(prog, Inst{Op::end_of_text}); return;
      case Node::Kind::concat:
        for (const Node& child : node.children) emit(child, prog);
        return;
      case Node::Kind::look_ahead: {
        const uint32_t sub = program(node.children[0]);
        push(prog, Inst{Op::look_ahead, node.negate, sub});
        return;
      }
      case Node::Kind::alternate: {
        std::vector<uint32_t> jumps;
        for (size_t i = 0; i < node.children.size(); ++i) {
          if (i + 1 == node.children.size()) {
            emit(node.children[i], prog);
            break;
          }
          const uint32_t split = push(prog, Inst{Op::split});
          at(prog, split).x = here(prog);
          emit(node.children[i], prog);
          jumps.push_back(push(prog, Inst{Op::jump}));
          at(prog, split).y = here(prog);
        }
        for (const uint32_t j : jumps) at(prog, j).x = here(prog);
        return;
      }
      case Node::Kind::repeat: {
        const Node& child = node.children[0];
        for (uint32_t i = 0; i < node.min; ++i) emit(child, prog);
        if (node.max == kUnbounded) {
          const uint32_t split = push(prog, Inst{Op::split});
          at(prog, split).x = here(prog);
          emit(child, prog);
          push(prog, Inst{Op::jump, false, split});
          at(prog, split).y = here(prog);
          return;
        }
        std::vector<uint32_t> splits;
        for (uint32_t i = node.min; i < node.max; ++i) {
          const uint32_t split = push(prog, Inst{Op::split});
          at(prog, split).x = here(prog);
          splits.push_back(split);
          emit(child, prog);
        }
        for (const uint32_t s : splits) at(prog, s).y = here(prog);
        return;
      }
    }
  }

  SplitPattern::Compiled& out_;
};

// One search over one piece.
class Matcher {
 public:
  Matcher(const SplitPattern::Compiled& c, std::span<const uint32_t> symbols, SplitScratch& scratch)
      : c_(c), symbols_(symbols), n_(symbols.size()), scratch_(scratch) {
    if (scratch_.programs.size() < c_.programs.size()) scratch_.programs.resize(c_.programs.size());
    for (size_t p = 0; p < c_.programs.size(); ++p) {
      SplitScratch::Program& s = scratch_.programs[p];
      const size_t words = (c_.programs[p].size() * (n_ + 1) + 63) / 64;
      if (s.seen.size() < words) {
        s.seen.assign(words, 0);   // `seen` is all clear between runs; a larger piece needs more
        s.failed.assign(words, 0);
        s.succeeded.assign(words, 0);
        s.marked.clear();
        s.overflowed = false;
      }
      // What failed or succeeded on the previous piece does not carry over.
      std::fill_n(s.failed.begin(), words, 0);
      std::fill_n(s.succeeded.begin(), words, 0);
    }
  }

  // Leftmost match starting at or after `from` (at `from` only when
  // `continuous`); `not_null` refuses empty matches. Returns {start, end}.
  std::optional<std::pair<size_t, size_t>> search(size_t from, bool not_null, bool continuous) {
    std::optional<std::pair<size_t, size_t>> found;
    for (size_t start = from; start <= n_; ++start) {
      // States that failed from an earlier start are skipped (`failed`).
      const int64_t end = run(0, start, not_null);
      if (end >= 0) {
        found = {start, static_cast<size_t>(end)};
        break;
      }
      if (continuous) break;
    }
    return found;
  }

 private:
  // Runs program `prog` anchored at `start`: the end of the first match in
  // priority order, or -1. When the run fails, every state it visited failed,
  // and stays failed for later runs on this piece: whether a state can reach
  // a match depends only on the instruction and the position (a state at the
  // start of a `not_null` run is never reached again, positions only grow).
  int64_t run(uint32_t prog, size_t start, bool not_null) {
    const int64_t end = explore(prog, start, not_null);
    SplitScratch::Program& s = scratch_.programs[prog];
    if (end < 0) {
      if (s.overflowed) {
        for (size_t w = 0; w < s.seen.size(); ++w) s.failed[w] |= s.seen[w];
      } else {
        for (const uint32_t w : s.marked) s.failed[w] |= s.seen[w];
      }
    }
    clear(prog);
    return end;
  }

  // The backtracking search itself. For a look-ahead (prog != 0) only
  // success matters, so the states on the path that reached the match are
  // remembered as succeeding: a later look-ahead that meets one of them has
  // its answer (superbpe evaluates (\d{3})+(?!\d) at every digit of a run).
  int64_t explore(uint32_t prog, size_t start, bool not_null) {
    const std::vector<Inst>& code = c_.programs[prog];
    SplitScratch::Program& s = scratch_.programs[prog];
    const bool track_path = prog != 0;
    const size_t width = n_ + 1;
    const auto succeed = [&](size_t pos) {
      for (const size_t bit : s.path) s.succeeded[bit >> 6] |= uint64_t{1} << (bit & 63);
      s.stack.clear();
      return static_cast<int64_t>(pos);
    };
    s.stack.clear();
    s.path.clear();
    s.stack.push_back({0, static_cast<uint32_t>(start), 0});
    while (!s.stack.empty()) {
      const SplitScratch::Pending entry = s.stack.back();
      s.stack.pop_back();
      uint32_t pc = entry.pc;
      size_t pos = entry.pos;
      if (track_path) s.path.resize(entry.depth);
      while (true) {
        const size_t bit = pc * width + pos;
        uint64_t& word = s.seen[bit >> 6];
        const uint64_t mask = uint64_t{1} << (bit & 63);
        if (track_path && (s.succeeded[bit >> 6] & mask)) return succeed(pos);
        if ((word | s.failed[bit >> 6]) & mask) break;
        word |= mask;
        if (!s.overflowed) {
          if (s.marked.size() < s.seen.size()) {
            s.marked.push_back(static_cast<uint32_t>(bit >> 6));
          } else {
            s.overflowed = true;
          }
        }
        if (track_path) s.path.push_back(bit);
        const Inst& inst = code[pc];
        bool ok = true;
        switch (inst.op) {
          case Op::symbol:
            ok = pos < n_ && c_.sets[inst.x].contains(symbols_[pos]);
            ++pc, ++pos;
            break;
          case Op::split:
            s.stack.push_back({inst.y, static_cast<uint32_t>(pos), static_cast<uint32_t>(s.path.size())});
            pc = inst.x;
            break;
          case Op::jump: pc = inst.x; break;
          case Op::look_ahead: {
            const bool matched = run(inst.x, pos, false) >= 0;
            ok = matched != inst.negate;
            ++pc;
            break;
          }
          case Op::end_of_text:
            ok = pos == n_;
            ++pc;
            break;
          case Op::match:
            if (not_null && pos == start) {
              ok = false;
              break;
            }
            return succeed(pos);
        }
        if (!ok) break;
      }
    }
    return -1;
  }

  void clear(uint32_t prog) {
    SplitScratch::Program& s = scratch_.programs[prog];
    if (s.overflowed) {
      std::fill(s.seen.begin(), s.seen.end(), 0);
    } else {
      for (const uint32_t w : s.marked) s.seen[w] = 0;
    }
    s.marked.clear();
    s.overflowed = false;
  }

  const SplitPattern::Compiled& c_;
  std::span<const uint32_t> symbols_;
  size_t n_;
  SplitScratch& scratch_;
};

bool names_a_class(std::string_view pattern) {
  for (const std::string_view name : {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}"}) {
    if (pattern.find(name) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

uint32_t collapsed_symbol(uint32_t cp, ClassByte c) {
  if (cp < 0x80) return cp;
  if (unicode::is_whitespace(c)) return kWhitespaceByte;
  switch (unicode::category(c)) {
    case Category::number: return kNumberByte;
    case Category::letter: return kLetterByte;
    case Category::punctuation: return kPunctuationByte;
    case Category::mark: return kMarkByte;
    case Category::symbol: return kSymbolByte;
    default: return kOtherByte;
  }
}

uint32_t codepoint_symbol(uint32_t cp, ClassByte c) {
  return (cp >= 0x80 && unicode::is_whitespace(c)) ? kWhitespaceByte : cp;
}

SplitPattern::SplitPattern(std::string_view pattern) {
  auto compiled = std::make_unique<Compiled>();
  compiled->view = names_a_class(pattern) ? SymbolView::collapsed : SymbolView::codepoints;
  const Node root = Parser(pattern, *compiled).parse();
  Emitter(*compiled).program(root);
  compiled_ = std::move(compiled);
}

SplitPattern::~SplitPattern() = default;
SplitPattern::SplitPattern(SplitPattern&&) noexcept = default;
SplitPattern& SplitPattern::operator=(SplitPattern&&) noexcept = default;

SymbolView SplitPattern::view() const { return compiled_->view; }

void SplitPattern::split(std::span<const uint32_t> symbols, uint32_t base, SplitScratch& scratch,
                         std::vector<uint32_t>& ends) const {
  const size_t n = symbols.size();
  Matcher matcher(*compiled_, symbols, scratch);
  uint32_t last = base;
  const auto emit = [&](size_t end) {   // empty words (from empty matches) are left out: they give no ids
    const auto absolute = static_cast<uint32_t>(base + end);
    if (absolute > last) ends.push_back(absolute);
    last = absolute;
  };
  size_t done = 0;   // end of the last match
  auto match = matcher.search(0, false, false);
  while (match) {
    const auto [start, end] = *match;
    if (start > done) emit(start);
    emit(end);
    done = end;
    if (start != end) {
      match = matcher.search(end, false, false);
      continue;
    }
    // After an empty match, std::regex_iterator first looks for a non-empty
    // match at the same place, then searches from one symbol further on.
    if (end == n) break;
    match = matcher.search(end, true, true);
    if (!match) match = matcher.search(end + 1, false, false);
  }
  if (done < n) emit(n);
}

}  // namespace ember::tok
