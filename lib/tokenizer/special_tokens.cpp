#include "tokenizer/special_tokens.hpp"

#include <algorithm>

namespace ember::tok {

namespace {

bool is_special_type(TokenType type) {
  return type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown;
}

struct Occurrence {
  int32_t token;
  uint32_t start;
};

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const Vocab& vocab) {
  root_edges_.fill(-1);
  nodes_.emplace_back();   // the root
  // Collect each node's children, then lay the edges out by node, sorted by byte.
  std::vector<std::vector<std::pair<uint8_t, int32_t>>> children(1);
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    if (!is_special_type(vocab.types[id])) continue;
    const std::string_view text = vocab.text(id);
    if (text.empty()) continue;
    int32_t node = 0;
    for (const char ch : text) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& kids = children[node];
      const auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == byte; });
      if (it != kids.end()) {
        node = it->second;
        continue;
      }
      const auto next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      children.emplace_back();
      children[node].emplace_back(byte, next);
      node = next;
    }
    // Texts are unique in a vocabulary, so each end node holds one token.
    nodes_[node].token = id;
    nodes_[node].always = vocab.types[id] == TokenType::user_defined;
    max_size_ = std::max(max_size_, static_cast<uint32_t>(text.size()));
  }
  edge_begin_.assign(nodes_.size() + 1, 0);
  for (size_t node = 0; node < nodes_.size(); ++node) {
    auto& kids = children[node];
    std::sort(kids.begin(), kids.end());
    edge_begin_[node] = static_cast<uint32_t>(edge_bytes_.size());
    for (const auto& [byte, to] : kids) {
      edge_bytes_.push_back(byte);
      edge_targets_.push_back(to);
      if (node == 0) root_edges_[byte] = to;
    }
  }
  edge_begin_[nodes_.size()] = static_cast<uint32_t>(edge_bytes_.size());
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_edges_[byte];
  const auto first = edge_bytes_.begin() + edge_begin_[node];
  const auto last = edge_bytes_.begin() + edge_begin_[node + 1];
  const auto it = std::lower_bound(first, last, byte);
  return (it != last && *it == byte) ? edge_targets_[it - edge_bytes_.begin()] : -1;
}

void SpecialTokenMatcher::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  const auto n = static_cast<uint32_t>(text.size());

  // Every occurrence of every special token that may be matched, bucketed by
  // length; within a bucket they come in text order.
  std::vector<std::vector<Occurrence>> by_size(max_size_ + 1);
  bool any = false;
  if (max_size_ > 0) {
    for (uint32_t start = 0; start < n; ++start) {
      int32_t node = root_edges_[static_cast<uint8_t>(text[start])];
      uint32_t pos = start + 1;
      while (node >= 0) {
        const Node& here = nodes_[node];
        if (here.token != kNoToken && (parse_special || here.always)) {
          by_size[pos - start].push_back(Occurrence{here.token, start});
          any = true;
        }
        if (pos == n) break;
        node = child(node, static_cast<uint8_t>(text[pos++]));
      }
    }
  }
  if (!any) {
    if (n > 0) out.push_back(Fragment{0, n, kNoToken});
    return;
  }

  // Longest token first, then by id; each token's occurrences left to right.
  // An occurrence is taken when none of its bytes is taken yet. Checking its
  // first and last byte is enough: every span taken before is at least as
  // long, so it cannot lie strictly inside this one.
  std::vector<uint8_t> taken(n, 0);
  std::vector<Fragment> accepted;
  for (uint32_t size = max_size_; size > 0; --size) {
    auto& bucket = by_size[size];
    const auto by_token = [](const Occurrence& a, const Occurrence& b) { return a.token < b.token; };
    if (!std::is_sorted(bucket.begin(), bucket.end(), by_token)) {
      std::stable_sort(bucket.begin(), bucket.end(), by_token);
    }
    for (const Occurrence& o : bucket) {
      if (taken[o.start] || taken[o.start + size - 1]) continue;
      std::fill(taken.begin() + o.start, taken.begin() + o.start + size, 1);
      accepted.push_back(Fragment{o.start, size, o.token});
    }
  }
  std::sort(accepted.begin(), accepted.end(),
            [](const Fragment& a, const Fragment& b) { return a.start < b.start; });

  uint32_t pos = 0;
  for (const Fragment& f : accepted) {
    if (f.start > pos) out.push_back(Fragment{pos, f.start - pos, kNoToken});
    out.push_back(f);
    pos = f.start + f.size;
  }
  if (pos < n) out.push_back(Fragment{pos, n - pos, kNoToken});
}

}  // namespace ember::tok
