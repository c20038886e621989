// The CPU backend's own thread pool: `n_threads - 1` workers plus the calling thread.
//
// run() executes a task on every thread and returns when all have finished. Workers
// spin briefly between tasks (decode issues many small ops back to back) and then
// sleep on a condition variable, so an idle session costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ember::cpu {

class ThreadPool {
 public:
  // n_threads >= 1 (the caller counts as one).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls task(thread_index, n_threads) once on each thread, the caller being index 0.
  // The first exception thrown by any thread is rethrown here after all finished.
  void run(const std::function<void(int, int)>& task);

  // Splits [0, n) into contiguous chunks, one per thread, and calls body(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body);

 private:
  void worker_loop(int index);
  void run_task(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace ember::cpu
