// The KV cache on the real model: paging and sliding windows change no logit,
// quantized storage stays close to F16 at a fraction of the bytes, eviction keeps
// memory bounded, forks share their prefix, state blobs restore exactly.
#include <cstring>
#include <cmath>
#include <cstdio>

#include "common/expect_error.hpp"
#include "cpu/cpu_backend.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"
#include "quant/kv_formats.hpp"
#include "quant/quant.hpp"
#include "real_model/real_model.hpp"
#include "runtime/model_impl.hpp"

using namespace ember;

namespace {

std::vector<int32_t> text_tokens(const Model& model, size_t n) {
  const std::string text = test::read_text(test::data_dir() / "gemma3" / "perplexity.txt");
  auto ids = model.tokenize(text, true);
  REQUIRE(ids.size() >= n);
  ids.resize(n);
  return ids;
}

size_t argmax(std::span<const float> v) { return size_t(std::max_element(v.begin(), v.end()) - v.begin()); }

using test::expect_error;

}  // namespace

TEST_CASE("paging and sliding-window freeing leave every logit unchanged", "[kv_real]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 700);  // beyond the 512-token window of the local layers
  auto session = model->new_session({.kv = {.max_tokens = 1024}, .threads = 2});
  const std::vector<float> paged = session->evaluate(ids);

  // The cache as it was before paging per layer: every cell kept, windows only masked.
  const model::LoadedModel& lm = *model->impl().loaded;
  auto be = cpu::make_cpu_backend({.threads = 2});
  kv::CacheConfig cfg;
  cfg.n_layer = lm.hparams.n_layer;
  cfg.k_width = cfg.v_width = int64_t(lm.hparams.n_head_kv) * lm.hparams.head_dim_k;
  cfg.max_tokens = cfg.max_seq_tokens = 1024;
  kv::KVCache keep_all(*be, cfg);
  model::Forward forward(lm.hparams, lm.weights, *be, 512);
  std::vector<model::BatchToken> batch;
  for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], int32_t(i), 0, true});
  std::vector<float> reference;
  forward.run(keep_all, batch, reference);
  REQUIRE(paged.size() == reference.size());
  size_t differ = 0;
  for (size_t i = 0; i < paged.size(); ++i) differ += paged[i] != reference[i];
  CHECK(differ == 0);
  // The local layers hold at most their window (plus a page), the global ones everything.
  const KVSessionMemory mem = session->kv_memory();
  const ModelInfo& info = model->info();
  const int global = info.n_layer - info.n_sliding_layers;
  CHECK(mem.tokens == 700);
  CHECK(mem.pages <= global * 44 + info.n_sliding_layers * 34);
  CHECK(mem.pages < info.n_layer * 44);
}

TEST_CASE("INT8 and INT4 storage stay close to F16 at a fraction of the bytes", "[kv_real]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 400);
  auto run = [&](KVStorage storage, int32_t group, int32_t exact = 0) {
    auto s = model->new_session(
        {.kv = {.max_tokens = 512, .storage = storage, .group_size = group, .exact_recent = exact}, .threads = 2});
    auto logits = s->evaluate(ids);
    return std::pair{logits, s->kv_memory()};
  };
  const size_t vocab = size_t(model->info().n_vocab);
  // Negative log-likelihood of every next token of the text under one storage.
  auto nll = [&](const std::vector<float>& logits) {
    std::vector<double> out;
    for (size_t t = 0; t + 1 < ids.size(); ++t) {
      const auto row = std::span(logits).subspan(t * vocab, vocab);
      const float mx = *std::max_element(row.begin(), row.end());
      double sum = 0;
      for (float v : row) sum += std::exp(double(v) - mx);
      out.push_back(std::log(sum) - (double(row[size_t(ids[t + 1])]) - mx));
    }
    return out;
  };
  const auto [f16, f16_mem] = run(KVStorage::f16, 32);
  const std::vector<double> base = nll(f16);
  const auto n = double(base.size());
  // The perplexity rise against F16 must not be significantly above its bound: at most
  // bound + 2 standard errors of the paired per-token change (std of the per-token
  // differences / sqrt(n), as bench/kv_quality.py). A last-bit change of the kernels
  // moves a 400-token rise by up to ~1.5 points (docs/performance.md), about one standard
  // error here (0.6 % for INT8, 1.1-1.9 % for INT4 at avx512), so a bare bound failed on
  // rounding alone at some ISA levels. What it still catches is a gross loss (an INT8
  // quantizer with 15 levels instead of 255: +10.7 % and +25.6 %); a finer break (31
  // levels: +1.9 +- 1.1 %) passes here and fails the per-key bound of the next test.
  // INT4 with the newest 16 tokens exact (KVCacheOptions::exact_recent): issue 18's 3 %.
  for (auto [storage, group, exact, max_rise, ratio] :
       {std::tuple{KVStorage::int8, 32, 0, 0.01, 34.0 / 64}, std::tuple{KVStorage::int8, 64, 0, 0.01, 66.0 / 128},
        std::tuple{KVStorage::int4, 32, 0, 0.05, 20.0 / 64}, std::tuple{KVStorage::int4, 64, 0, 0.06, 36.0 / 128},
        std::tuple{KVStorage::int4, 32, 16, 0.03, 20.0 / 64}, std::tuple{KVStorage::int4o, 32, 0, 0.03, 26.0 / 64},
        std::tuple{KVStorage::k8v4, 32, 0, 0.02, 27.0 / 64}}) {
    const auto [q, q_mem] = run(storage, group, exact);
    const std::vector<double> mine = nll(q);
    double mean = 0, var = 0;
    for (size_t t = 0; t < base.size(); ++t) mean += (mine[t] - base[t]) / n;
    for (size_t t = 0; t < base.size(); ++t) var += (mine[t] - base[t] - mean) * (mine[t] - base[t] - mean) / (n - 1);
    const double rise = std::exp(mean) - 1.0, se = std::exp(mean) * std::sqrt(var / n);
    INFO("storage " << int(storage) << " group " << group << " exact " << exact << ": perplexity rise " << 100 * rise
                    << " % +- "
                    << 100 * se << " % (bound " << 100 * max_rise << " %)");
    CHECK(rise <= max_rise + 2 * se);
    CHECK(q_mem.pages == f16_mem.pages);
    CHECK(double(q_mem.bytes) / double(f16_mem.bytes) == Approx(ratio).epsilon(1e-9));
  }
}

TEST_CASE("quantized caches store keys minus the BOS key of their layer", "[kv_real]") {
  auto model = test::gemma();
  const model::LoadedModel& lm = *model->impl().loaded;
  const auto ids = text_tokens(*model, 96);
  REQUIRE(ids[0] == model->bos_token());
  auto be = cpu::make_cpu_backend({.threads = 2});
  model::Forward forward(lm.hparams, lm.weights, *be, 512);
  kv::CacheConfig cfg;
  cfg.n_layer = lm.hparams.n_layer;
  const int64_t width = cfg.k_width = cfg.v_width = int64_t(lm.hparams.n_head_kv) * lm.hparams.head_dim_k;
  cfg.max_tokens = cfg.max_seq_tokens = 128;
  std::vector<model::BatchToken> batch;
  for (size_t i = 0; i < ids.size(); ++i) batch.push_back({ids[i], int32_t(i), 0, true});
  auto evaluate = [&](quant::DType storage) {
    cfg.storage = storage;
    auto cache = std::make_unique<kv::KVCache>(*be, cfg);
    std::vector<float> logits;
    forward.run(*cache, batch, logits);
    return std::pair{std::move(cache), logits};
  };
  const auto [f32, f32_logits] = evaluate(quant::DType::f32);
  const auto [q8, q8_logits] = evaluate(quant::DType::kv_q8_g32);
  const auto [q4, q4_logits] = evaluate(quant::DType::kv_q4_g32);
  const std::vector<float>& offsets = forward.key_offsets();
  REQUIRE(offsets.size() == size_t(cfg.n_layer * width));

  // Key row of cell `c` of a layer as stored, decoded to f32.
  auto key = [&](const kv::KVCache& cache, int layer, int32_t c) {
    kv::KVCache::LayerTables tab;
    cache.layer_tables(layer, std::vector<int32_t>{0}, tab);
    const int32_t pt = cache.page_tokens();
    const int32_t slot = tab.page_table[size_t(c / pt)] * pt + c % pt;
    std::vector<float> row(static_cast<size_t>(width));
    const void* src = cache.k().row_ptr(slot);
    if (cache.k().type == quant::DType::f32) std::memcpy(row.data(), src, row.size() * sizeof(float));
    if (cache.k().type == quant::DType::kv_q8_g32) quant::kv::dequantize_q8(src, row.data(), width, 32);
    if (cache.k().type == quant::DType::kv_q4_g32) quant::kv::dequantize_q4(src, row.data(), width, 32);
    return row;
  };
  double max_offset = 0, err8 = 0, err8_plain = 0, err4 = 0, err4_plain = 0;
  std::vector<uint8_t> block(static_cast<size_t>(width) * 2);
  std::vector<float> centered(static_cast<size_t>(width)), back(static_cast<size_t>(width));
  for (int il = 0; il < cfg.n_layer; ++il) {
    const float* off = offsets.data() + size_t(il) * size_t(width);
    // The offset is the BOS key (the same token at the same position, in a batch of 1).
    const auto bos = key(*f32, il, 0);
    for (int64_t j = 0; j < width; ++j) {
      CHECK(off[j] == Approx(bos[size_t(j)]).margin(1e-2));
      max_offset = std::max(max_offset, double(std::fabs(off[j])));
    }
    // So the BOS cell of a quantized cache stores (almost) zeros: up to 0.14 against keys of
    // up to 64, because the BOS token attends to its own INT8 value in the layers before.
    for (float v : key(*q8, il, 0)) CHECK(std::fabs(v) < 0.25f);
    for (int32_t c = 1; c < int32_t(ids.size()); ++c) {
      const auto x = key(*f32, il, c);
      // Layer 0 sees the same keys in every cache (later layers see the quantization of the
      // layers before): there the stored row plus the offset is the key up to INT8 rounding.
      if (il == 0) {
        const auto k8 = key(*q8, il, c);
        for (int64_t g = 0; g < width; g += 32) {
          float amax = 0;  // the group's step is amax / 127
          for (int64_t j = g; j < g + 32; ++j) amax = std::max(amax, std::fabs(x[size_t(j)] - off[j]));
          for (int64_t j = g; j < g + 32; ++j)
            CHECK(std::fabs(k8[size_t(j)] + off[j] - x[size_t(j)]) <= amax / 254.0f * 1.01f + 1e-3f);
        }
      }
      // The quantization error of the real keys, centered against as they are.
      auto error = [&](quant::DType type, const float* shift) {
        for (int64_t j = 0; j < width; ++j) centered[size_t(j)] = x[size_t(j)] - (shift ? shift[j] : 0.0f);
        quant::quantize_row(type, centered.data(), block.data(), width);
        quant::dequantize_row(type, block.data(), back.data(), width);
        double e = 0;
        for (int64_t j = 0; j < width; ++j) e += std::pow(double(back[size_t(j)]) - centered[size_t(j)], 2);
        return e;
      };
      err8 += error(quant::DType::kv_q8_g32, off), err8_plain += error(quant::DType::kv_q8_g32, nullptr);
      err4 += error(quant::DType::kv_q4_g32, off), err4_plain += error(quant::DType::kv_q4_g32, nullptr);
    }
  }
  INFO("max |offset| " << max_offset << ", squared key error INT8 " << err8 << " (uncentered " << err8_plain
                       << "), INT4 " << err4 << " (uncentered " << err4_plain << ")");
  // Gemma 3 270M's keys have channel means of tens (layer 11: -77 over a whole text;
  // the BOS key's largest channel is 64).
  CHECK(max_offset > 20.0);
  // Measured: 0.64 (INT8) and 0.58 (INT4) of the uncentered squared error.
  CHECK(err8 < 0.75 * err8_plain);
  CHECK(err4 < 0.7 * err4_plain);
  // Attention ignores the shift: the logits stay those of the F32 cache up to the
  // quantization (a broken shift would move every score of a layer by a different amount).
  const size_t vocab = size_t(model->info().n_vocab);
  size_t same8 = 0, same4 = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const auto at = [&](const std::vector<float>& l) { return argmax(std::span(l).subspan(t * vocab, vocab)); };
    same8 += at(q8_logits) == at(f32_logits);
    same4 += at(q4_logits) == at(f32_logits);
  }
  INFO("argmax as with F32: INT8 " << same8 << ", INT4 " << same4 << " of " << ids.size());
  CHECK(same8 >= ids.size() * 9 / 10);
  CHECK(same4 >= ids.size() * 8 / 10);
}

TEST_CASE("eviction keeps a long stream within its budget", "[kv_real]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 600);
  for (const KVCacheOptions kv : {KVCacheOptions{.eviction = KVEviction::streaming, .sinks = 4, .window = 60},
                                  KVCacheOptions{.eviction = KVEviction::h2o, .heavy = 24, .recent = 40}}) {
    auto s = model->new_session({.kv = kv, .prefill_chunk_size = 16, .threads = 2});
    size_t most = 0;
    for (size_t at = 0; at < ids.size(); at += 16) {
      const auto logits = s->evaluate(std::span(ids).subspan(at, std::min<size_t>(16, ids.size() - at)));
      for (float v : logits) REQUIRE(std::isfinite(v));
      most = std::max<size_t>(most, size_t(s->kv_memory().tokens));
    }
    CHECK(most <= 64);
    CHECK(s->position() == 600);
    // Rewinding into the evicted past recomputes; the session stays usable.
    s->rewind(100);
    Sampler g = Sampler::greedy();
    const auto r = s->generate(std::span<const int32_t>(), g, {.max_tokens = 4});
    CHECK(r.tokens.size() == 4);
    CHECK(s->kv_memory().tokens <= 64);
  }
}

TEST_CASE("forks share the prefix pages and continue exactly like the parent", "[kv_real]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 1000);
  auto parent = model->new_session({.kv = {.max_tokens = 1200}, .threads = 2});
  parent->prefill(ids);
  const auto one = model->kv_memory().pages_used;
  std::vector<std::unique_ptr<Session>> forks;
  for (int i = 0; i < 8; ++i) forks.push_back(parent->fork());
  CHECK(model->kv_memory().pages_used == one);  // 8 forks holding the prefix: 1.0x one session
  // The fork already has the logits: its first token needs no evaluation.
  Sampler g = Sampler::greedy();
  const auto first = forks[0]->generate(std::span<const int32_t>(), g, {.max_tokens = 1});
  CHECK(first.tokens.at(0) == int32_t(argmax(parent->logits())));
  CHECK(first.metrics.prompt_tokens == 0);
  {
    // Time to first token of a fork against a fresh session given the same prompt
    // (printed for docs/kv-cache.md; a figure, not an assertion).
    auto fresh = model->new_session({.kv = {.max_tokens = 1200}, .threads = 2});
    Sampler g2 = Sampler::greedy();
    const auto cold = fresh->generate(ids, g2, {.max_tokens = 1});
    auto fork = parent->fork();
    const auto warm = fork->generate(std::span<const int32_t>(), g2, {.max_tokens = 1});
    std::printf("kv fork: time to first token %.3f ms (fork) vs %.1f ms (fresh session, %zu-token prompt): %.0fx\n",
                warm.metrics.time_to_first_token * 1e3, cold.metrics.time_to_first_token * 1e3, ids.size(),
                cold.metrics.time_to_first_token / std::max(warm.metrics.time_to_first_token, 1e-9));
    CHECK(warm.tokens == cold.tokens);
  }
  // Fork 0 holds its sampled token as pending; the others decode the same token.
  forks[0]->prefill(std::span<const int32_t>());
  for (size_t i = 1; i < forks.size(); ++i) forks[i]->decode(first.tokens[0]);
  parent->decode(first.tokens[0]);
  for (auto& f : forks) REQUIRE(f->logits().size() == parent->logits().size());
  for (auto& f : forks) CHECK(std::equal(f->logits().begin(), f->logits().end(), parent->logits().begin()));
  const double ratio = double(model->kv_memory().pages_used) / double(one);
  // Each fork's first new token copies the partly filled last page of every layer.
  std::printf("kv fork: after one new token each, 8 forks + parent hold %.3fx the pages of one session\n", ratio);
  CHECK(ratio <= 1.0 + 8.0 * 2 * model->info().n_layer / double(one));
  forks.clear();
  parent.reset();
  CHECK(model->kv_memory().pages_used == 0);
}

TEST_CASE("saved state restores to identical logits; bad blobs are typed errors", "[kv_real]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 300);
  for (KVStorage storage : {KVStorage::f16, KVStorage::int4, KVStorage::k8v4}) {
    const SessionOptions opts{.kv = {.max_tokens = 512, .storage = storage}, .threads = 2};
    auto a = model->new_session(opts);
    a->prefill(ids);
    const std::string blob = a->save_state();
    auto b = model->new_session(opts);
    b->load_state(blob);
    CHECK(b->position() == a->position());
    CHECK(std::equal(a->logits().begin(), a->logits().end(), b->logits().begin()));
    a->decode(42);
    b->decode(42);
    CHECK(std::equal(a->logits().begin(), a->logits().end(), b->logits().begin()));

    // Corruption anywhere is caught by the checksum; the session is left as it was.
    std::string bad = blob;
    bad[bad.size() / 2] ^= 0x40;
    expect_error([&] { b->load_state(bad); }, ErrorCode::invalid_argument, "checksum");
    expect_error([&] { b->load_state(blob.substr(0, 100)); }, ErrorCode::invalid_argument, "session state");
    expect_error([&] { b->load_state("hello"); }, ErrorCode::invalid_argument, "not an ember session");
    auto other = model->new_session({.kv = {.max_tokens = 512, .storage = KVStorage::int8}, .threads = 2});
    expect_error([&] { other->load_state(blob); }, ErrorCode::invalid_argument, "other KV-cache options");
    // A version-1 blob (before keys were centred): F16 caches still load it, INT8/INT4
    // caches refuse it by name. The version follows the 8-byte magic; the checksum
    // (FNV-1a of everything before it) is recomputed for the patched blob.
    const auto reseal = [](std::string& patched) {
      uint64_t h = 1469598103934665603ull;
      for (size_t i = 0; i + 8 < patched.size(); ++i) h = (h ^ static_cast<unsigned char>(patched[i])) * 1099511628211ull;
      std::memcpy(patched.data() + patched.size() - 8, &h, 8);
    };
    std::string v1 = blob;
    const uint32_t one = 1;
    std::memcpy(v1.data() + 8, &one, 4);
    reseal(v1);
    // Blobs that pass the checksum but do not describe a session of this model: a token
    // outside the vocabulary, logits of a token not evaluated, fewer tokens evaluated
    // than the KV cache holds. The token list follows its u64 count.
    std::string needle(8, '\0');
    const uint64_t n_ids = ids.size();
    std::memcpy(needle.data(), &n_ids, 8);
    needle.append(reinterpret_cast<const char*>(ids.data()), 4 * ids.size());
    const size_t at = blob.find(needle);
    REQUIRE(at != std::string::npos);
    const size_t counts = at + needle.size();  // u64 n_evaluated, u64 logits_for
    const auto patch = [&](size_t offset, const void* value, size_t bytes) {
      std::string bad = blob;
      std::memcpy(bad.data() + offset, value, bytes);
      reseal(bad);
      return bad;
    };
    const int32_t minus_one = -1, vocab = int32_t(model->info().n_vocab);
    const uint64_t n_eval = ids.size(), fewer = ids.size() - 1;
    expect_error([&] { b->load_state(patch(at + 8, &minus_one, 4)); }, ErrorCode::invalid_argument,
                 "outside the vocabulary");
    expect_error([&] { b->load_state(patch(at + 12, &vocab, 4)); }, ErrorCode::invalid_argument,
                 "outside the vocabulary");
    expect_error([&] { b->load_state(patch(counts + 8, &n_eval, 8)); }, ErrorCode::invalid_argument,
                 "inconsistent counts");
    std::string short_eval = patch(counts, &fewer, 8);
    const uint64_t last = fewer - 1;
    std::memcpy(short_eval.data() + counts + 8, &last, 8);
    reseal(short_eval);
    expect_error([&] { b->load_state(short_eval); }, ErrorCode::invalid_argument, "its KV cache holds");
    if (storage == KVStorage::f16) {
      auto c = model->new_session(opts);
      c->load_state(v1);
      CHECK(size_t(c->position()) == ids.size());
    } else {
      expect_error([&] { b->load_state(v1); }, ErrorCode::invalid_argument, "uncentred keys");
    }
    CHECK(b->position() == a->position());
    b->decode(7);
    a->decode(7);
    CHECK(std::equal(a->logits().begin(), a->logits().end(), b->logits().begin()));
  }
}

TEST_CASE("rewind frees pages; a full cache is an outcome and nothing is lost", "[kv_real][errors]") {
  auto model = test::gemma();
  const auto ids = text_tokens(*model, 100);
  auto s = model->new_session({.kv = {.max_tokens = 64}});
  REQUIRE(s->prefill(std::span(ids).first(60)) == Outcome::ok);
  const auto before = s->kv_memory();
  const std::vector<float> logits(s->logits().begin(), s->logits().end());
  CHECK(s->prefill(std::span(ids).subspan(60, 10)) == Outcome::cache_full);
  CHECK(s->position() == 60);
  CHECK(s->kv_memory().pages == before.pages);
  CHECK(std::equal(logits.begin(), logits.end(), s->logits().begin()));
  s->rewind(20);
  CHECK(s->kv_memory().pages < before.pages);
  s->prefill(std::span(ids).subspan(20, 40));
  CHECK(std::equal(logits.begin(), logits.end(), s->logits().begin()));
}

TEST_CASE("bad KV options are typed errors", "[kv_real][errors]") {
  auto model = test::gemma();
  const auto bad = [&](KVCacheOptions kv, const std::string& needle) {
    expect_error([&] { model->new_session({.kv = kv}); }, ErrorCode::invalid_argument, needle);
  };
  bad({.eviction = KVEviction::streaming, .sinks = 8, .window = 8}, "larger than the sinks");
  bad({.eviction = KVEviction::streaming, .sinks = -1}, "sinks >= 0");
  bad({.eviction = KVEviction::h2o, .heavy = 10, .recent = 0}, "recent >= 1");
  bad({.max_tokens = 0}, "max_tokens");
  bad({.storage = KVStorage::int4, .group_size = 48}, "group_size");
  expect_error([&] { Model::load(test::real_model_path(), {.kv_page_tokens = 0}); }, ErrorCode::invalid_argument,
               "kv_page_tokens");
}

