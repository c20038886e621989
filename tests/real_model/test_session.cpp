// The public Session / Sampler API on the real model: chunked prefill, streaming,
// stops, cancellation, rewind, determinism, threads, errors and logging.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "real_model/real_model.hpp"

using namespace ember;

namespace {

double maxrel(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    ref = std::max(ref, double(std::abs(b[i])));
  }
  return diff / ref;
}

size_t argmax(std::span<const float> v) { return size_t(std::max_element(v.begin(), v.end()) - v.begin()); }

std::vector<int32_t> long_prompt(const Model& model, size_t n) {
  std::string text;
  while (model.tokenize(text).size() < n)
    text += "The lighthouse keeper wrote every evening about the weather, the ships and the birds. ";
  auto ids = model.tokenize(text, true);
  ids.resize(n);
  return ids;
}

std::vector<int32_t> greedy(const Model& model, std::string_view prompt, int n) {
  auto session = model.new_session();
  Sampler sampler = Sampler::greedy();
  GenerateOptions options;
  options.max_tokens = n;
  options.stop_at_end_of_generation = false;
  return session->generate(prompt, sampler, options).tokens;
}

}  // namespace

TEST_CASE("prefill in chunks gives the logits of one pass", "[session]") {
  auto model = test::gemma();
  const auto prompt = long_prompt(*model, 150);
  auto whole = model->new_session({.prefill_chunk_size = 512});
  auto chunked = model->new_session({.prefill_chunk_size = 7});
  REQUIRE(whole->prefill(prompt) == Outcome::ok);
  REQUIRE(chunked->prefill(prompt) == Outcome::ok);
  CHECK(whole->position() == 150);
  CHECK(chunked->position() == 150);
  REQUIRE(whole->logits().size() == size_t(model->info().n_vocab));
  CHECK(argmax(whole->logits()) == argmax(chunked->logits()));
  // Chunks of 7 run other matmul kernels than one batch of 150 (summation order), which
  // 8-bit activations turn into differences of about 1e-2 (docs/model.md).
  CHECK(maxrel(chunked->logits(), whole->logits()) < 5e-2);
  // decode() continues from either the same way.
  whole->decode(int32_t(argmax(whole->logits())));
  chunked->decode(int32_t(argmax(chunked->logits())));
  CHECK(argmax(whole->logits()) == argmax(chunked->logits()));
}

TEST_CASE("generate streams pieces that add up to the text", "[session]") {
  auto model = test::gemma();
  auto session = model->new_session();
  Sampler sampler({.temperature = 0.7f, .seed = 7});
  std::string streamed;
  int calls = 0;
  const GenerateResult r = session->generate("Write one sentence about rain.", sampler, {.max_tokens = 24},
                                             [&](std::string_view piece) {
                                               streamed += piece;
                                               ++calls;
                                               return Continue;
                                             });
  CHECK(streamed == r.text);
  CHECK(calls > 0);
  CHECK(r.metrics.generated_tokens == int32_t(r.tokens.size()));
  CHECK(r.metrics.prompt_tokens == int32_t(model->tokenize("Write one sentence about rain.", true, true).size()));
  CHECK(session->position() == r.metrics.prompt_tokens + r.metrics.generated_tokens);
  if (r.stop_reason == StopReason::max_tokens) CHECK(r.tokens.size() == 24);
  CHECK(model->detokenize(r.tokens) == r.text);
}

TEST_CASE("max_tokens, stop tokens, stop strings and the callback end generation", "[session]") {
  auto model = test::gemma();
  const std::string prompt = "The capital of France is";
  const auto reference = greedy(*model, prompt, 12);  // " the capital of France. It is ..."
  const std::string reference_text = model->detokenize(reference);
  REQUIRE(reference_text.find("France") != std::string::npos);

  GenerateOptions options;
  options.stop_at_end_of_generation = false;
  SECTION("max_tokens") {
    auto s = model->new_session();
    Sampler g = Sampler::greedy();
    options.max_tokens = 5;
    const auto r = s->generate(prompt, g, options);
    CHECK(r.stop_reason == StopReason::max_tokens);
    CHECK(r.tokens == std::vector<int32_t>(reference.begin(), reference.begin() + 5));
  }
  SECTION("stop token") {
    auto s = model->new_session();
    Sampler g = Sampler::greedy();
    options.max_tokens = 12;
    options.stop_tokens = {reference[2]};
    const auto r = s->generate(prompt, g, options);
    CHECK(r.stop_reason == StopReason::stop_token);
    CHECK(r.tokens == std::vector<int32_t>(reference.begin(), reference.begin() + 2));
  }
  SECTION("stop string, held back from the stream") {
    auto s = model->new_session();
    Sampler g = Sampler::greedy();
    options.max_tokens = 12;
    options.stop_strings = {"France"};
    std::string streamed;
    const auto r = s->generate(prompt, g, options, [&](std::string_view p) {
      streamed += p;
      return Continue;
    });
    CHECK(r.stop_reason == StopReason::stop_string);
    CHECK(r.text == reference_text.substr(0, reference_text.find("France")));
    CHECK(streamed == r.text);
    CHECK(streamed.find("Fr") == std::string::npos);
  }
  SECTION("callback") {
    auto s = model->new_session();
    Sampler g = Sampler::greedy();
    options.max_tokens = 12;
    int calls = 0;
    const auto r = s->generate(prompt, g, options, [&](std::string_view) { return ++calls == 2 ? Stop : Continue; });
    CHECK(r.stop_reason == StopReason::callback);
    CHECK(calls == 2);
    CHECK(r.tokens.size() < 12);
  }
}

TEST_CASE("cancel from another thread stops a long prefill within one chunk", "[session]") {
  auto model = test::gemma();
  const auto prompt = long_prompt(*model, 3000);
  auto session = model->new_session({.kv = {.max_tokens = 4096}, .prefill_chunk_size = 64});
  std::atomic<bool> started{false};
  std::thread canceller([&] {
    while (!started.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    session->cancel();
  });
  started = true;
  const Outcome finished = session->prefill(prompt);
  canceller.join();
  CHECK(finished == Outcome::cancelled);
  // The chunks evaluated before the cancellation stay; the one in flight is undone.
  CHECK(session->position() < 3000);
  CHECK(session->position() % 64 == 0);
  // The session keeps working after a cancellation.
  Sampler g = Sampler::greedy();
  const int32_t before = session->position();
  const std::vector<int32_t> more = {818, 5279};
  const auto r = session->generate(more, g, {.max_tokens = 2, .stop_at_end_of_generation = false});
  CHECK(r.tokens.size() == 2);
  CHECK(session->position() == before + 4);
}

TEST_CASE("cancel from another thread stops generation within a token", "[session]") {
  auto model = test::gemma();
  auto session = model->new_session();
  Sampler g = Sampler::greedy();
  std::atomic<int> pieces{0};
  std::thread canceller([&] {
    while (pieces.load() < 3) std::this_thread::yield();
    session->cancel();
  });
  const auto r = session->generate("Tell me a long story about a dragon.", g,
                                   {.max_tokens = 200, .stop_at_end_of_generation = false},
                                   [&](std::string_view) {
                                     ++pieces;
                                     return Continue;
                                   });
  canceller.join();
  CHECK(r.stop_reason == StopReason::cancelled);
  CHECK(r.tokens.size() < 200);
}

TEST_CASE("a cancel() that comes before a call is not lost", "[session]") {
  auto model = test::gemma();
  auto session = model->new_session();
  const auto prompt = model->tokenize("The river was", true);
  session->cancel();
  CHECK(session->prefill(prompt) == Outcome::cancelled);
  CHECK(session->position() == 0);
  // The call that reported it consumed it.
  REQUIRE(session->prefill(prompt) == Outcome::ok);
  const int32_t at = session->position();
  session->cancel();
  CHECK(session->decode(5) == Outcome::cancelled);
  CHECK(session->position() == at);
  session->cancel();
  Sampler g = Sampler::greedy();
  const auto r = session->generate(std::span<const int32_t>(), g, {.max_tokens = 4});
  CHECK(r.stop_reason == StopReason::cancelled);
  CHECK(r.tokens.empty());
  CHECK(session->position() == at);
  CHECK(session->generate(std::span<const int32_t>(), g, {.max_tokens = 2, .stop_at_end_of_generation = false})
            .tokens.size() == 2);
}

TEST_CASE("every session of a model runs on the model's one thread pool", "[session][threads]") {
  auto count_threads = [] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory();
    return n;
  };
  const int before = count_threads();
  auto model = Model::load(test::real_model_path(), {.threads = 2});
  CHECK(count_threads() == before);  // loading starts no thread
  std::vector<std::unique_ptr<Session>> sessions;
  for (int i = 0; i < 4; ++i) {
    sessions.push_back(model->new_session({.kv = {.max_tokens = 256}}));
    Sampler g = Sampler::greedy();
    sessions.back()->generate("Count: one, two,", g, {.max_tokens = 2});
  }
  auto fork = sessions[0]->fork();
  fork->decode(5);
  // Two threads: the caller and one worker, however many sessions run.
  CHECK(count_threads() == before + 1);
}

TEST_CASE("rewind returns to a position and replays identically", "[session]") {
  auto model = test::gemma();
  auto session = model->new_session();
  Sampler g = Sampler::greedy();
  const auto prompt = model->tokenize("Once upon a time", true, true);
  const int32_t prompt_len = int32_t(prompt.size());
  const auto first = session->generate("Once upon a time", g, {.max_tokens = 12, .stop_at_end_of_generation = false});
  CHECK(session->position() == prompt_len + 12);

  // Back to after the third generated token: the rest replays exactly, because the
  // cells kept are untouched and each later token is evaluated as it was the first time.
  session->rewind(prompt_len + 3);
  CHECK(session->position() == prompt_len + 3);
  CHECK(std::vector<int32_t>(session->tokens().begin() + prompt_len, session->tokens().end()) ==
        std::vector<int32_t>(first.tokens.begin(), first.tokens.begin() + 3));
  const auto replay = session->generate(std::span<const int32_t>(), g, {.max_tokens = 9, .stop_at_end_of_generation = false});
  CHECK(replay.tokens == std::vector<int32_t>(first.tokens.begin() + 3, first.tokens.end()));

  // Back to the prompt: the context is the prompt again and generation continues from it.
  session->rewind(prompt_len);
  CHECK(std::vector<int32_t>(session->tokens().begin(), session->tokens().end()) == prompt);
  const auto again = session->generate(std::span<const int32_t>(), g, {.max_tokens = 3, .stop_at_end_of_generation = false});
  CHECK(again.tokens.size() == 3);
  CHECK(session->position() == prompt_len + 3);

  CHECK_THROWS_AS(session->rewind(session->position() + 1), Error);
  CHECK_THROWS_AS(session->rewind(-1), Error);
  session->reset();
  CHECK(session->position() == 0);
}

TEST_CASE("the same seed gives the same text", "[session][sampler]") {
  auto model = test::gemma();
  auto run = [&](uint64_t seed) {
    auto s = model->new_session();
    Sampler sampler({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed});
    return s->generate("My favourite animal is", sampler, {.max_tokens = 24, .stop_at_end_of_generation = false}).tokens;
  };
  const auto a = run(42), b = run(42), c = run(43);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("one model serves sessions on four threads at once", "[session][threads]") {
  auto model = test::gemma();
  const std::vector<std::string> prompts = {"The sea is", "My dog likes", "In 1905, Einstein", "def add(a, b):"};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(greedy(*model, p, 16));
  std::vector<std::vector<int32_t>> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto s = model->new_session({.threads = 1});
      Sampler g = Sampler::greedy();
      together[i] = s->generate(prompts[i], g, {.max_tokens = 16, .stop_at_end_of_generation = false}).tokens;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(prompts[i]);
    CHECK(together[i] == alone[i]);
  }
}

TEST_CASE("a full context ends generation; too long a prompt is an error that changes nothing", "[session][errors]") {
  auto model = test::gemma();
  auto session = model->new_session({.kv = {.max_tokens = 16}});
  CHECK(session->capacity() == 16);
  Sampler g = Sampler::greedy();
  const auto r = session->generate("One two three four five", g, {.max_tokens = 100, .stop_at_end_of_generation = false});
  CHECK(r.stop_reason == StopReason::context_full);
  CHECK(session->position() == 16);

  auto fresh = model->new_session({.kv = {.max_tokens = 16}});
  REQUIRE(fresh->prefill(model->tokenize("Hello", true)) == Outcome::ok);
  const int32_t before = fresh->position();
  CHECK(fresh->prefill(long_prompt(*model, 40)) == Outcome::cache_full);
  CHECK(fresh->position() == before);
  const std::vector<int32_t> bad = {5, int32_t(model->info().n_vocab) + 3};
  try {
    fresh->prefill(bad);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("outside the vocabulary"));
  }
  CHECK(fresh->position() == before);
  // Still usable.
  CHECK(fresh->decode(5) == Outcome::ok);
  CHECK(fresh->position() == before + 1);
  // generate() with a prompt that does not fit ends with context_full and adds nothing.
  Sampler g2 = Sampler::greedy();
  const auto too_long = fresh->generate(long_prompt(*model, 40), g2, {.max_tokens = 4});
  CHECK(too_long.stop_reason == StopReason::context_full);
  CHECK(too_long.tokens.empty());
  CHECK(fresh->position() == before + 1);
}

TEST_CASE("invalid options are rejected with named errors", "[session][errors]") {
  auto model = test::gemma();
  auto expect = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      FAIL("no error for " << needle);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK_THAT(e.what(), Catch::Matchers::Contains(needle));
    }
  };
  expect([&] { model->new_session({.kv = {.max_tokens = 0}}); }, "max_tokens");
  expect([&] { Model::load(test::real_model_path(), {.kv_page_tokens = 0}); }, "kv_page_tokens");
  expect([&] { model->new_session({.prefill_chunk_size = 0}); }, "prefill_chunk_size");
  expect([&] { Model::load(test::real_model_path(), {.threads = -2}); }, "threads");
  auto s = model->new_session();
  Sampler g = Sampler::greedy();
  expect([&] { s->generate("x", g, {.max_tokens = -1}); }, "max_tokens");
  expect([&] { s->generate(std::span<const int32_t>(), g); }, "empty");
  try {
    Model::load("/nonexistent/model.gguf");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::io);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("/nonexistent/model.gguf"));
  }
}

TEST_CASE("the library writes nothing to stdout or stderr; logs reach the callback", "[session][logging]") {
  std::fflush(stdout);
  std::fflush(stderr);
  char path[] = "/tmp/ember_stdio_XXXXXX";
  const int capture = mkstemp(path);
  REQUIRE(capture >= 0);
  const int saved_out = dup(1), saved_err = dup(2);
  dup2(capture, 1);
  dup2(capture, 2);
  std::vector<std::string> messages;
  {
    auto model = Model::load(test::real_model_path(), {.threads = 2, .log = [&](LogLevel, std::string_view m) {
                                                          messages.emplace_back(m);
                                                        }});
    auto s = model->new_session();
    Sampler sampler({.seed = 1});
    s->generate("Hello", sampler, {.max_tokens = 4});
  }
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  const off_t written = lseek(capture, 0, SEEK_END);
  close(capture);
  unlink(path);
  CHECK(written == 0);
  CHECK_FALSE(messages.empty());
}

TEST_CASE("Gemma's chat template renders turns in its format", "[session][chat]") {
  auto model = test::gemma();
  CHECK(model->info().chat_template == "gemma");
  const std::vector<ChatMessage> messages = {{"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Name a colour."}};
  CHECK(model->apply_chat_template(messages, true) ==
        "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n");
}
