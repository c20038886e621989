#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <thread>

#include "common/fail.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define EMBER_CPU_RELAX() _mm_pause()
#else
#define EMBER_CPU_RELAX() ((void)0)
#endif

namespace ember::cpu {
namespace {
// Iterations a worker spins on the generation counter before sleeping. Roughly
// 50-100 microseconds: long enough to bridge consecutive ops of one forward pass.
constexpr int kSpinIterations = 1 << 15;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  require(n_threads >= 1 && n_threads <= 1024, "threads must be in [1, 1024], got {}", n_threads);
  workers_.reserve(size_t(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_task(int index) {
  try {
    (*task_)(index, n_threads_);
  } catch (...) {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run(const std::function<void(int, int)>& task) {
  if (n_threads_ == 1) {
    task(0, 1);
    return;
  }
  task_ = &task;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_task(0);
  // Spin while the workers finish; yield now and then so that a worker waiting for a
  // core (another process holds it) gets ours instead of a whole time slice later.
  for (uint32_t spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    EMBER_CPU_RELAX();
    if ((spin & 255) == 255) std::this_thread::yield();
  }
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int spin = 0; current == seen && spin < kSpinIterations; ++spin) {
      EMBER_CPU_RELAX();
      if ((spin & 255) == 255) std::this_thread::yield();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      current = generation_.load(std::memory_order_acquire);
    }
    seen = current;
    if (stop_.load()) return;
    run_task(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int threads = int(std::min<int64_t>(n, n_threads_));
  if (threads == 1) {
    body(0, n);
    return;
  }
  run([&](int index, int) {
    if (index >= threads) return;
    const int64_t begin = n * index / threads;
    const int64_t end = n * (index + 1) / threads;
    if (begin < end) body(begin, end);
  });
}

}  // namespace ember::cpu
