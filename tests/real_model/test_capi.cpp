// The C API (include/ember/ember.h) on the real model: results equal the C++ API's,
// statuses and last-error messages for bad input, versioned structs, buffers,
// callbacks, cancellation, state, and the Engine.
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "real_model/real_model.hpp"

using namespace ember;

namespace {

struct CModel {
  ember_model* m = nullptr;
  CModel() {
    ember_model_options o = ember_model_default_options();
    o.threads = 2;
    REQUIRE(ember_model_load(test::real_model_path().c_str(), &o, &m) == EMBER_OK);
  }
  ~CModel() { ember_model_free(m); }
};

ember_sampler* greedy_sampler() {
  ember_sampler_options o = ember_sampler_default_options();
  o.temperature = 0.0f;
  ember_sampler* s = nullptr;
  REQUIRE(ember_sampler_create(&o, &s) == EMBER_OK);
  return s;
}

struct Streamed {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<float> logprobs;
  int stop_after = -1;
};

int on_token(int32_t token, const char* text, size_t length, float logprob, void* user) {
  auto* s = static_cast<Streamed*>(user);
  if (token >= 0) s->tokens.push_back(token);
  s->text.append(text, length);
  s->logprobs.push_back(logprob);
  return s->stop_after >= 0 && int(s->tokens.size()) >= s->stop_after ? EMBER_STOP : EMBER_CONTINUE;
}

}  // namespace

TEST_CASE("C API: generation equals the C++ API's, streamed with ids and log-probabilities", "[capi]") {
  CModel cm;
  ember_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(ember_model_get_info(cm.m, &info) == EMBER_OK);
  CHECK(std::string(info.architecture) == "gemma3");
  CHECK(info.n_vocab == 262144);
  CHECK(info.threads == 2);
  CHECK(info.kv_reserved_bytes == 0);  // nothing reserved before a session

  const char* prompt = "The capital of France is";
  ember_session* session = nullptr;
  REQUIRE(ember_session_create(cm.m, nullptr, &session) == EMBER_OK);
  ember_sampler* sampler = greedy_sampler();
  ember_generate_options g = ember_generate_default_options();
  g.max_tokens = 8;
  g.stop_at_end_of_generation = 0;
  g.logprobs = 1;
  Streamed streamed;
  ember_generate_result r{};
  r.struct_size = sizeof(r);
  REQUIRE(ember_session_generate(session, prompt, sampler, &g, on_token, &streamed, &r) == EMBER_OK);
  CHECK(r.stop_reason == EMBER_STOP_MAX_TOKENS);
  REQUIRE(r.n_tokens == 8);
  CHECK(std::vector<int32_t>(r.tokens, r.tokens + r.n_tokens) == streamed.tokens);
  CHECK(std::string(r.text, r.text_length) == streamed.text);
  for (size_t i = 0; i < 8; ++i) CHECK(streamed.logprobs[i] <= 0.0f);

  // The C++ API on the same model gives the same tokens.
  auto model = test::gemma();
  auto cpp = model->new_session();
  Sampler cs = Sampler::greedy();
  const auto expected = cpp->generate(prompt, cs, {.max_tokens = 8, .stop_at_end_of_generation = false});
  CHECK(expected.tokens == streamed.tokens);
  CHECK(expected.text == streamed.text);

  // Speculative decoding through the C API: the same tokens, drafts counted.
  ember_session* fast = nullptr;
  REQUIRE(ember_session_create(cm.m, nullptr, &fast) == EMBER_OK);
  ember_generate_options gs = g;
  gs.draft_kind = EMBER_DRAFT_SELF;
  gs.self_vocab = 16384;
  gs.draft_adaptive = 0;
  Streamed spec_stream;
  ember_generate_result rs{};
  rs.struct_size = sizeof(rs);
  REQUIRE(ember_session_generate(fast, prompt, sampler, &gs, on_token, &spec_stream, &rs) == EMBER_OK);
  CHECK(rs.drafted > 0);
  CHECK(rs.accepted <= rs.drafted);
  ember_session_free(fast);
  // (greedy in the batch-invariant order: compare with a plain batch-invariant C++ session)
  auto inv = model->new_session({.batch_invariant = true});
  Sampler gi = Sampler::greedy();
  CHECK(inv->generate(prompt, gi, {.max_tokens = 8, .stop_at_end_of_generation = false}).tokens == spec_stream.tokens);

  // The callback's EMBER_STOP ends generation.
  Streamed two;
  two.stop_after = 2;
  ember_session_reset(session);
  REQUIRE(ember_session_generate(session, prompt, sampler, &g, on_token, &two, &r) == EMBER_OK);
  CHECK(r.stop_reason == EMBER_STOP_CALLBACK);
  CHECK(r.n_tokens == 2);
  ember_session_free(session);
  ember_sampler_free(sampler);
}

TEST_CASE("C API: the log and progress callbacks reach the host", "[capi]") {
  struct Seen {
    int messages = 0;
    int info = 0;
    float last_progress = -1.0f;
  } seen;
  ember_model_options o = ember_model_default_options();
  o.threads = 1;
  o.log = [](ember_log_level level, const char* message, size_t length, void* user) {
    auto* s = static_cast<Seen*>(user);
    ++s->messages;
    if (level == EMBER_LOG_INFO && std::string(message, length).find("loaded") != std::string::npos) ++s->info;
  };
  o.log_user = &seen;
  o.progress = [](float f, void* user) {
    static_cast<Seen*>(user)->last_progress = f;
    return 1;
  };
  o.progress_user = &seen;
  ember_model* m = nullptr;
  REQUIRE(ember_model_load(test::real_model_path().c_str(), &o, &m) == EMBER_OK);
  CHECK(seen.info >= 1);
  CHECK(seen.last_progress == 1.0f);
  ember_model_free(m);
  // A progress callback returning 0 cancels the load.
  o.progress = [](float f, void*) { return f < 0.5f ? 1 : 0; };
  CHECK(ember_model_load(test::real_model_path().c_str(), &o, &m) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("cancelled"));
}

TEST_CASE("C API: tokenizer, chat template and the buffer protocol", "[capi]") {
  CModel cm;
  const std::string text = "Hello, world!";
  size_t needed = 0;
  CHECK(ember_tokenize(cm.m, text.data(), text.size(), 1, 0, nullptr, 0, &needed) == EMBER_ERR_BUFFER_TOO_SMALL);
  REQUIRE(needed > 1);
  std::vector<int32_t> ids(needed);
  REQUIRE(ember_tokenize(cm.m, text.data(), text.size(), 1, 0, ids.data(), ids.size(), &needed) == EMBER_OK);
  CHECK(ids == test::gemma()->tokenize(text, true));

  char small[4];
  CHECK(ember_detokenize(cm.m, ids.data() + 1, ids.size() - 1, 0, small, sizeof(small), &needed) ==
        EMBER_ERR_BUFFER_TOO_SMALL);
  CHECK(needed == text.size());
  std::string out(needed + 1, '\0');
  REQUIRE(ember_detokenize(cm.m, ids.data() + 1, ids.size() - 1, 0, out.data(), out.size(), &needed) == EMBER_OK);
  CHECK(out.c_str() == text);

  const ember_chat_message turn{"user", "Hi"};
  std::vector<char> chat(512);
  REQUIRE(ember_chat_apply(cm.m, &turn, 1, 1, chat.data(), chat.size(), &needed) == EMBER_OK);
  const std::vector<ChatMessage> cpp_turn{{"user", "Hi"}};
  CHECK(std::string(chat.data()) == test::gemma()->apply_chat_template(cpp_turn, true));
  CHECK(ember_is_end_of_generation(cm.m, test::gemma()->eos_token()) == 1);
}

TEST_CASE("C API: bad input is a status and a message, never a crash", "[capi][errors]") {
  ember_model* m = nullptr;
  CHECK(ember_model_load("/nonexistent.gguf", nullptr, &m) == EMBER_ERR_IO);
  CHECK(m == nullptr);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("/nonexistent.gguf"));
  CHECK(ember_model_load(nullptr, nullptr, &m) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("path"));
  const char junk[64] = "not a gguf file at all";
  CHECK(ember_model_load_from_memory(junk, sizeof(junk), 1, nullptr, &m) == EMBER_ERR_MALFORMED_FILE);
  ember_model_options bad = ember_model_default_options();
  bad.threads = -4;
  CHECK(ember_model_load(test::real_model_path().c_str(), &bad, &m) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("threads"));
  bad = ember_model_default_options();
  bad.struct_size = 0;
  CHECK(ember_model_load(test::real_model_path().c_str(), &bad, &m) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("struct_size"));

  CModel cm;
  ember_session* s = nullptr;
  ember_session_options so = ember_session_default_options();
  so.kv.storage = static_cast<ember_kv_storage>(9);
  CHECK(ember_session_create(cm.m, &so, &s) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("storage"));
  so = ember_session_default_options();
  so.kv.storage = EMBER_KV_INT4;
  so.kv_exact_recent = -1;
  CHECK(ember_session_create(cm.m, &so, &s) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("exact_recent"));
  so.kv_exact_recent = 16;  // an INT4 cache whose newest 16 tokens are also kept in F16
  REQUIRE(ember_session_create(cm.m, &so, &s) == EMBER_OK);
  const int32_t few[4] = {2, 10, 20, 30};
  CHECK(ember_session_prefill(s, few, 4) == EMBER_OK);
  ember_session_free(s);
  s = nullptr;
  so = ember_session_default_options();
  CHECK(so.kv_exact_recent == 0);
  so.kv.max_tokens = 16;
  REQUIRE(ember_session_create(cm.m, &so, &s) == EMBER_OK);
  CHECK(ember_last_error() == std::string());  // a successful call clears it
  std::vector<int32_t> many(40, 2);
  CHECK(ember_session_prefill(s, many.data(), many.size()) == EMBER_ERR_CACHE_FULL);
  CHECK(ember_session_position(s) == 0);
  CHECK(ember_session_decode(s, -5) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK(ember_session_load_state(s, "garbage", 7) == EMBER_ERR_INVALID_ARGUMENT);
  ember_sampler_options sop = ember_sampler_default_options();
  sop.top_p = 2.0f;
  ember_sampler* sampler = nullptr;
  CHECK(ember_sampler_create(&sop, &sampler) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("top_p"));
  CHECK(ember_session_generate(s, "Hi", nullptr, nullptr, nullptr, nullptr, nullptr) == EMBER_ERR_INVALID_ARGUMENT);
  // An exception thrown by the host's callback does not cross back... C has no
  // exceptions, but a status name exists for every status.
  for (int st = EMBER_OK; st <= EMBER_CANCELLED; ++st)
    CHECK(std::string(ember_status_name(static_cast<ember_status>(st))) != "unknown");
  ember_session_free(s);
  ember_session_free(nullptr);
  ember_model_free(nullptr);
  ember_sampler_free(nullptr);
  ember_engine_free(nullptr);
}

TEST_CASE("C API: a struct from an older header gets defaults for the fields it lacks", "[capi]") {
  // An "old" caller knew ember_sampler_options only up to seed: no bias, no bans.
  ember_sampler_options full = ember_sampler_default_options();
  full.temperature = 0.0f;
  full.n_banned_tokens = 12345;  // garbage beyond the old struct's end ...
  full.banned_tokens = reinterpret_cast<const int32_t*>(0x1);
  full.struct_size = offsetof(ember_sampler_options, logit_bias);  // ... that ember must not read
  ember_sampler* s = nullptr;
  REQUIRE(ember_sampler_create(&full, &s) == EMBER_OK);
  const float logits[3] = {0.0f, 2.0f, 1.0f};
  int32_t token = -1;
  REQUIRE(ember_sampler_sample(s, logits, 3, &token) == EMBER_OK);
  CHECK(token == 1);
  ember_sampler_free(s);

  // Results are written only as far as the caller's struct goes.
  CModel cm;
  struct OldInfo {
    size_t struct_size;
    const char* architecture;
  } old{sizeof(OldInfo), nullptr};
  const char guard[16] = "untouched";
  char after[16];
  std::memcpy(after, guard, sizeof(after));
  REQUIRE(ember_model_get_info(cm.m, reinterpret_cast<ember_model_info*>(&old)) == EMBER_OK);
  CHECK(std::string(old.architecture) == "gemma3");
  CHECK(std::memcmp(after, guard, sizeof(after)) == 0);
}

TEST_CASE("C API: cancel from another thread, fork, save and restore", "[capi]") {
  CModel cm;
  ember_session* s = nullptr;
  REQUIRE(ember_session_create(cm.m, nullptr, &s) == EMBER_OK);
  // A cancel before the call is not lost.
  ember_session_cancel(s);
  CHECK(ember_session_prefill_text(s, "Hello there", 11, 1, 1) == EMBER_CANCELLED);
  CHECK(ember_session_position(s) == 0);
  REQUIRE(ember_session_prefill_text(s, "Hello there", 11, 1, 1) == EMBER_OK);
  const int32_t at = ember_session_position(s);

  size_t size = 0;
  CHECK(ember_session_save_state(s, nullptr, 0, &size) == EMBER_ERR_BUFFER_TOO_SMALL);
  std::vector<char> blob(size);
  REQUIRE(ember_session_save_state(s, blob.data(), blob.size(), &size) == EMBER_OK);
  ember_session* restored = nullptr;
  REQUIRE(ember_session_create(cm.m, nullptr, &restored) == EMBER_OK);
  REQUIRE(ember_session_load_state(restored, blob.data(), blob.size()) == EMBER_OK);
  ember_session* fork = nullptr;
  REQUIRE(ember_session_fork(s, &fork) == EMBER_OK);
  const float* a = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  size_t na = 0, nb = 0, nc = 0;
  REQUIRE(ember_session_logits(s, &a, &na) == EMBER_OK);
  REQUIRE(ember_session_logits(restored, &b, &nb) == EMBER_OK);
  REQUIRE(ember_session_logits(fork, &c, &nc) == EMBER_OK);
  REQUIRE((na == 262144 && nb == na && nc == na));
  CHECK(std::memcmp(a, b, na * sizeof(float)) == 0);
  CHECK(std::memcmp(a, c, na * sizeof(float)) == 0);
  CHECK(ember_session_position(restored) == at);
  CHECK(ember_session_rewind(s, at + 5) == EMBER_ERR_INVALID_ARGUMENT);

  // Cancel from another thread stops a long generation.
  ember_sampler* sampler = greedy_sampler();
  ember_generate_options g = ember_generate_default_options();
  g.max_tokens = 100000;
  g.stop_at_end_of_generation = 0;
  std::atomic<int> seen{0};
  auto count = [](int32_t, const char*, size_t, float, void* user) {
    ++*static_cast<std::atomic<int>*>(user);
    return EMBER_CONTINUE;
  };
  std::thread canceller([&] {
    while (seen.load() < 3) std::this_thread::yield();
    ember_session_cancel(fork);
  });
  ember_generate_result r{};
  r.struct_size = sizeof(r);
  REQUIRE(ember_session_generate(fork, "", sampler, &g, count, &seen, &r) == EMBER_OK);
  canceller.join();
  CHECK(r.stop_reason == EMBER_STOP_CANCELLED);
  CHECK(r.n_tokens < 1000);
  ember_sampler_free(sampler);
  ember_session_free(fork);
  ember_session_free(restored);
  ember_session_free(s);
}

TEST_CASE("C API: the Engine runs requests stepped by the host or on its thread", "[capi][engine]") {
  CModel cm;
  ember_engine* engine = nullptr;
  ember_engine_options eo = ember_engine_default_options();
  eo.max_batch_size = 0;
  CHECK(ember_engine_create(cm.m, &eo, &engine) == EMBER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(ember_last_error(), Catch::Matchers::Contains("max_batch_size"));
  REQUIRE(ember_engine_create(cm.m, nullptr, &engine) == EMBER_OK);

  ember_sampler_options greedy = ember_sampler_default_options();
  greedy.temperature = 0.0f;
  ember_generate_options g = ember_generate_default_options();
  g.max_tokens = 6;
  g.stop_at_end_of_generation = 0;
  std::vector<ember_request_handle> handles;
  std::vector<Streamed> streams(3);
  const char* prompts[3] = {"The capital of France is", "Water boils at", "One, two, three,"};
  for (int i = 0; i < 3; ++i) {
    ember_request r = ember_request_default();
    r.prompt = prompts[i];
    r.sampler = &greedy;
    r.generate = &g;
    r.on_token = on_token;
    r.user = &streams[size_t(i)];
    ember_request_handle h = 0;
    REQUIRE(ember_engine_submit(engine, &r, &h) == EMBER_OK);
    handles.push_back(h);
  }
  // An empty request is rejected with its reason.
  ember_request empty = ember_request_default();
  ember_request_handle rejected = 0;
  REQUIRE(ember_engine_submit(engine, &empty, &rejected) == EMBER_OK);
  ember_request_result rr{};
  rr.struct_size = sizeof(rr);
  REQUIRE(ember_engine_result(engine, rejected, 0, &rr) == EMBER_OK);
  CHECK(rr.state == EMBER_REQUEST_REJECTED);
  size_t needed = 0;
  std::vector<char> why(256);
  REQUIRE(ember_engine_error(engine, rejected, why.data(), why.size(), &needed) == EMBER_OK);
  CHECK(needed > 0);

  while (ember_engine_pending(engine) > 0) REQUIRE(ember_engine_step(engine, nullptr) == EMBER_OK);
  auto model = test::gemma();
  for (int i = 0; i < 3; ++i) {
    REQUIRE(ember_engine_result(engine, handles[size_t(i)], 1, &rr) == EMBER_OK);
    CHECK(rr.state == EMBER_REQUEST_FINISHED);
    CHECK(rr.n_generated == 6);
    CHECK(streams[size_t(i)].tokens.size() == 6);
    std::vector<char> text(1024);
    REQUIRE(ember_engine_text(engine, handles[size_t(i)], text.data(), text.size(), &needed) == EMBER_OK);
    CHECK(std::string(text.data()) == streams[size_t(i)].text);
    CHECK(ember_engine_release(engine, handles[size_t(i)]) == 1);
  }
  CHECK(ember_engine_cancel(engine, 987654) == 0);
  CHECK(ember_engine_result(engine, 987654, 0, &rr) == EMBER_ERR_INVALID_ARGUMENT);

  // On the engine's own thread; wait blocks until done.
  REQUIRE(ember_engine_start(engine) == EMBER_OK);
  ember_request r = ember_request_default();
  r.prompt = "Hello";
  r.sampler = &greedy;
  r.generate = &g;
  ember_request_handle h = 0;
  REQUIRE(ember_engine_submit(engine, &r, &h) == EMBER_OK);
  REQUIRE(ember_engine_result(engine, h, 1, &rr) == EMBER_OK);
  CHECK(rr.state == EMBER_REQUEST_FINISHED);
  std::vector<char> prom(1 << 16);
  REQUIRE(ember_engine_metrics(engine, 0, prom.data(), prom.size(), &needed) == EMBER_OK);
  CHECK_THAT(std::string(prom.data()), Catch::Matchers::Contains("ember_"));
  CHECK(ember_engine_metrics(engine, 7, prom.data(), prom.size(), &needed) == EMBER_ERR_INVALID_ARGUMENT);
  ember_engine_free(engine);  // stops the thread and frees
}
