// Shared helpers of the real-model tests (Gemma 3 270M Q4_K_M) and readers of the
// llama.cpp reference data in tests/data/gemma3 (see its README.md).
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"

namespace ember::test {

// One model shared by the tests of an executable (loading is cheap, but why repeat it).
inline std::shared_ptr<Model> gemma(int threads = 2) {
  static std::shared_ptr<Model> model = Model::load(real_model_path(), {.threads = threads});
  return model;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int32_t> ids;
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

// Texts separated by "\n__ggml_vocab_test__\n" (the last, empty piece dropped).
inline std::vector<std::string> split_texts(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t start = 0;
  for (size_t at; (at = all.find(sep, start)) != std::string::npos; start = at + sep.size())
    texts.push_back(all.substr(start, at - start));
  if (start < all.size()) texts.push_back(all.substr(start));
  return texts;
}

inline std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Submits one request per prompt (`shape(request, i)` fills in the rest), steps the
// engine until nothing is pending, and returns every request's tokens (each must have
// finished) with the engine's metrics.
template <class Shape>
std::pair<std::vector<std::vector<int32_t>>, EngineMetrics> run_requests(Engine& engine,
                                                                         const std::vector<std::string>& prompts,
                                                                         Shape shape) {
  std::vector<RequestHandle> handles;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.prompt = prompts[i];
    shape(r, i);
    handles.push_back(engine.submit(r));
  }
  while (engine.pending() > 0) engine.step();
  std::vector<std::vector<int32_t>> out;
  for (const RequestHandle h : handles) {
    const RequestResult r = engine.result(h);
    REQUIRE(r.state == RequestState::finished);
    out.push_back(r.tokens);
  }
  return {out, engine.metrics()};
}

}  // namespace ember::test
