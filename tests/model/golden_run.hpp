// Running a golden fixture through ember's forward pass on any backend: the CPU golden
// tests (test_golden.cpp) and the CUDA ones (tests/cuda/test_cuda.cpp) share it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"
#include "model/golden.hpp"
#include "model/loaded_model.hpp"

namespace ember::test {

// Runs the golden sequence: the prompt as one batch, then the greedy tokens one by one.
inline std::vector<float> run_golden(const std::string& name, backend::Backend& be, const GoldenCase& g) {
  auto model = model::LoadedModel::open(golden_dir() / (name + ".gguf"), be);
  model->weights.prepare_for_matmul(be);  // as Model::load does (the CPU's repacked matrices)
  REQUIRE(model->hparams.n_vocab == g.vocab);
  kv::CacheConfig cfg;
  cfg.n_layer = model->hparams.n_layer;
  cfg.k_width = cfg.v_width = int64_t(model->hparams.n_head_kv) * model->hparams.head_dim_k;
  cfg.storage = quant::DType::f16;
  cfg.max_tokens = cfg.max_seq_tokens = 128;
  kv::KVCache cache(be, cfg);
  model::Forward forward(model->hparams, model->weights, be);

  std::vector<float> all, logits;
  std::vector<model::BatchToken> batch;
  for (size_t i = 0; i < g.prompt.size(); ++i) batch.push_back({g.prompt[i], int32_t(i), 0, true});
  REQUIRE(forward.run(cache, batch, logits) == batch.size());
  all = logits;
  for (size_t i = 0; i < g.greedy.size(); ++i) {
    const model::BatchToken t{g.greedy[i], int32_t(g.prompt.size() + i), 0, true};
    REQUIRE(forward.run(cache, std::span(&t, 1), logits) == 1);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace ember::test
