// Reading the golden fixtures of ../shared/golden: X.ids.txt and X.logits.f32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember::test {

struct GoldenCase {
  int64_t vocab = 0;
  std::vector<int32_t> prompt;   // fed as one batch
  std::vector<int32_t> greedy;   // fed one token at a time
  std::vector<float> logits;     // [prompt + greedy][vocab]
};

inline GoldenCase read_golden(const std::filesystem::path& dir, const std::string& name) {
  GoldenCase g;
  std::ifstream ids(dir / (name + ".ids.txt"));
  if (!ids) throw std::runtime_error("cannot open " + (dir / (name + ".ids.txt")).string());
  std::string line;
  while (std::getline(ids, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "vocab") {
      in >> g.vocab;
    } else {
      std::vector<int32_t>& dst = key == "prompt" ? g.prompt : g.greedy;
      for (int32_t id; in >> id;) dst.push_back(id);
    }
  }
  std::ifstream bin(dir / (name + ".logits.f32"), std::ios::binary);
  if (!bin) throw std::runtime_error("cannot open logits of " + name);
  g.logits.resize((g.prompt.size() + g.greedy.size()) * size_t(g.vocab));
  bin.read(reinterpret_cast<char*>(g.logits.data()), std::streamsize(g.logits.size() * sizeof(float)));
  if (size_t(bin.gcount()) != g.logits.size() * sizeof(float)) throw std::runtime_error("short logits file " + name);
  return g;
}

// maxrel = max|ours - ref| / max|ref| over all rows, and the share of rows whose argmax agrees.
struct Agreement {
  double maxrel = 0.0;
  double argmax_agree = 0.0;
};

inline Agreement compare_logits(const std::vector<float>& ours, const std::vector<float>& ref, int64_t vocab) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_diff = std::max(max_diff, double(std::abs(ours[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::abs(ref[i])));
  }
  const size_t rows = ref.size() / size_t(vocab);
  size_t agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = ours.data() + r * size_t(vocab);
    const float* b = ref.data() + r * size_t(vocab);
    size_t ia = 0, ib = 0;
    for (size_t i = 1; i < size_t(vocab); ++i) {
      if (a[i] > a[ia]) ia = i;
      if (b[i] > b[ib]) ib = i;
    }
    agree += ia == ib ? 1 : 0;
  }
  return {max_diff / max_ref, double(agree) / double(rows)};
}

}  // namespace ember::test
