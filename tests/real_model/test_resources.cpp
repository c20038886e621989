// What a model costs the host, seen from outside: the threads it starts, the KV
// memory it reserves (bounded by a budget) and the memory it hands back.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/expect_error.hpp"
#include "real_model/real_model.hpp"

using namespace ember;

namespace {

int count_threads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.is_directory();
  return n;
}

// The thread count once the kernel has reaped threads that were joined: a joined
// thread's /proc/self/task entry can outlive pthread_join by a moment on a busy machine.
int count_threads_settled(int expected) {
  int n = count_threads();
  for (int i = 0; i < 100 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = count_threads();
  }
  return n;
}

// Resident memory of this process in bytes (/proc/self/statm).
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

std::vector<int32_t> prompt_of(const Model& model, size_t n) {
  std::string text;
  while (model.tokenize(text).size() < n) text += "A quiet river runs past the mill, and the miller counts the sacks. ";
  auto ids = model.tokenize(text, true);
  ids.resize(n);
  return ids;
}

}  // namespace

TEST_CASE("ember starts no thread the host did not ask for", "[session][threads][resources]") {
  const int before = count_threads();
  {
    // One thread: loading, tokenizing, sessions, forks and generation all run on the caller.
    auto model = Model::load(test::real_model_path(), {.threads = 1});
    auto session = model->new_session({.kv = {.max_tokens = 256}});
    Sampler g = Sampler::greedy();
    session->generate("Once upon a time", g, {.max_tokens = 3});
    auto fork = session->fork();
    fork->decode(7);
    CHECK(count_threads() == before);
    // An Engine driven by step() from the host's loop adds none either ...
    auto engine = Engine::create(model);
    Request r;
    r.prompt = "Hello";
    r.generate.max_tokens = 2;
    const RequestHandle h = engine->submit(r);
    while (engine->pending() > 0) engine->step();
    CHECK(engine->result(h).state == RequestState::finished);
    CHECK(count_threads() == before);
    // ... and start() adds exactly the one it asks for, gone after stop().
    engine->start();
    CHECK(count_threads() == before + 1);
    engine->stop();
    CHECK(count_threads_settled(before) == before);
  }
  // threads = 0 is the physical cores: the pool has threads() - 1 workers.
  auto model = Model::load(test::real_model_path(), {});
  CHECK(model->threads() >= 1);
  CHECK(model->threads() <= int(std::max(1u, std::thread::hardware_concurrency())));
  CHECK(count_threads() == before);  // nothing before the first session
  auto session = model->new_session({.kv = {.max_tokens = 64}});
  REQUIRE(session->prefill("Hi") == Outcome::ok);
  CHECK(count_threads() == before + model->threads() - 1);
}

TEST_CASE("KV memory goes back to the system when a session ends", "[session][resources]") {
  auto model = Model::load(test::real_model_path(), {.threads = 2});
  const auto prompt = prompt_of(*model, 1500);
  auto fill = [&] {
    auto session = model->new_session({.kv = {.max_tokens = 2048}});
    REQUIRE(session->prefill(prompt) == Outcome::ok);
    return session;
  };
  fill().reset();  // the executor's working buffers reach their size once
  const size_t before = resident_bytes();
  auto session = fill();
  const size_t held = session->kv_memory().bytes;
  const size_t peak = resident_bytes();
  INFO("resident before " << before << ", with the session " << peak << ", KV held " << held);
  // The pages the session writes become resident ...
  REQUIRE(peak > before);
  CHECK(double(peak - before) >= 0.8 * double(held));
  session.reset();
  const size_t after = resident_bytes();
  INFO("resident after the session ended " << after);
  // ... and go back when it ends: at most a fifth of the growth stays.
  CHECK(after <= before + (peak - before) / 5);
  CHECK(model->kv_memory().pages_used == 0);
}

TEST_CASE("a memory budget bounds the KV pool's reservation", "[session][resources]") {
  const size_t per_token = Model::load(test::real_model_path(), {.threads = 1, .vocab_only = true})
                               ->kv_bytes_per_token(KVStorage::f16);
  REQUIRE(per_token == 0);  // a vocab-only model has no KV figures
  ModelOptions options{.threads = 1};
  options.kv_memory_budget = size_t(8) << 20;  // 8 MiB: 512 pages of 16 tokens at 16 KiB
  auto model = Model::load(test::real_model_path(), options);
  const size_t reservation = model->kv_pool_bytes();
  CHECK(reservation <= options.kv_memory_budget);
  CHECK(reservation > options.kv_memory_budget / 2);
  auto session = model->new_session({.kv = {.max_tokens = 4096}});
  CHECK(model->kv_memory().bytes_total == reservation);
  // 3000 tokens need 188 pages in each of Gemma's 3 global layers alone, more than
  // the budget's 512: the prompt does not fit and changes nothing.
  CHECK(session->prefill(prompt_of(*model, 3000)) == Outcome::cache_full);
  CHECK(session->position() == 0);
  CHECK(session->prefill(prompt_of(*model, 256)) == Outcome::ok);
  // A second storage type finds the budget spent.
  test::expect_error([&] { model->new_session({.kv = {.storage = KVStorage::int8}})->prefill("Hi"); },
                     ErrorCode::invalid_argument, "kv_memory_budget");
  test::expect_error([&] { model->kv_pool_bytes(KVStorage::int8); }, ErrorCode::invalid_argument,
                     "kv_memory_budget");
  CHECK(model->kv_memory().bytes_total == reservation);  // nothing was reserved by the failures
}
