// Runs the tokenizer fuzz target (tests/fuzz/fuzz_tokenizer.cpp) on a fixed set
// of awkward inputs and on seeded random ones, with any compiler: the target
// traps on a broken property, so passing means none was found.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/catch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run(uint8_t selector, const std::string& text) {
  std::vector<uint8_t> input;
  input.push_back(selector);
  input.insert(input.end(), text.begin(), text.end());
  CHECK(LLVMFuzzerTestOneInput(input.data(), input.size()) == 0);
}

}  // namespace

TEST_CASE("fuzz target: awkward inputs on every vocabulary", "[fuzz]") {
  const std::vector<std::string> texts = {
      "",
      std::string(1, '\0'),
      "\xFF\xFE\xFD",
      "\xC3",
      "\xE2\x82",
      "\xF0\x9F\x98",
      "\xED\xA0\x80\xED\xBF\xBF",
      "\xC0\x80\xC1\xBF",
      "\xF7\xBF\xBF\xBF\xF8\x88\x80\x80\x80",
      "<|endoftext|><|endoftext|<|endoftext|>>",
      "<s></s><unk>",
      std::string(5000, ' '),
      std::string(5000, '\n'),
      std::string(3000, 'a') + std::string(3000, '1'),
      "'s't're've'm'll'd'S'T'RE",
      "\xE2\x96\x81\xE2\x96\x81 \xE2\x96",
  };
  for (int selector = 0; selector < 256; ++selector) {
    for (const auto& text : texts) run(static_cast<uint8_t>(selector), text);
  }
}

TEST_CASE("fuzz target: seeded random bytes", "[fuzz]") {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> length(0, 200);
  std::uniform_int_distribution<int> byte(0, 255);
  // Bias toward bytes that matter to the tokenizers: ASCII, UTF-8 leads and tails.
  const std::string alphabet = "aZ9 '\n\r\t<|>!.\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x80\xBF\xFF";
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < 4000; ++i) {
    std::string text;
    const int n = length(rng);
    for (int k = 0; k < n; ++k) {
      text.push_back((k % 3 == 0) ? static_cast<char>(byte(rng)) : alphabet[pick(rng)]);
    }
    run(static_cast<uint8_t>(byte(rng)), text);
  }
}
