#pragma once
//! \file thread_pool.hpp
//! A small fixed-size thread pool with a blocking parallel_for, used by the host backend.
//!
//! parallel_for(n, f) calls f(i) for every i in [0, n) across the pool and the calling thread, and
//! returns when all calls are done. Work is handed out one index at a time from an atomic counter, so
//! uneven items (ragged requests) balance. A parallel_for issued from inside a pool task runs inline,
//! so nested parallelism cannot deadlock. The first exception thrown by f is rethrown to the caller.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"

namespace specdec {

class thread_pool {
 public:
  //! Starts `workers` background threads (the caller is an extra participant in each parallel_for).
  explicit thread_pool(int workers) {
    require(workers >= 0, "specdec::thread_pool", "workers", ">= 0", workers);
    threads_.reserve(static_cast<std::size_t>(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  //! Number of background threads.
  [[nodiscard]] int workers() const noexcept { return static_cast<int>(threads_.size()); }

  //! Calls f(i) for i in [0, n) using at most max_threads threads in all (0 = all of them).
  template <class F>
  void parallel_for(std::int64_t n, F&& f, int max_threads = 0) {
    if (n <= 0) return;
    const int helpers = std::min<std::int64_t>(
        n - 1, max_threads > 0 ? std::min(max_threads - 1, workers()) : workers());
    if (helpers <= 0 || in_pool_task()) {
      for (std::int64_t i = 0; i < n; ++i) f(i);
      return;
    }
    std::lock_guard serial(submit_mutex_);  // one parallel_for at a time per pool
    job j;
    j.n = n;
    j.body = [&f](std::int64_t i) { f(i); };
    {
      std::lock_guard lock(mutex_);
      job_ = &j;
      slots_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    run(j);
    std::unique_lock lock(mutex_);
    slots_ = 0;  // workers that have not woken yet skip this job: its work is already done
    done_.wait(lock, [&] { return j.active == 0; });
    job_ = nullptr;
    if (j.error) std::rethrow_exception(j.error);
  }

  //! The process-wide pool: hardware_concurrency - 1 workers, created on first use.
  static thread_pool& global() {
    static thread_pool pool(std::max(1u, std::thread::hardware_concurrency()) - 1);
    return pool;
  }

 private:
  struct job {
    std::int64_t n = 0;
    std::function<void(std::int64_t)> body;
    std::atomic<std::int64_t> next{0};
    int active = 0;  // guarded by mutex_
    std::exception_ptr error;
    std::mutex error_mutex;
  };

  static bool& in_pool_task() {
    thread_local bool flag = false;
    return flag;
  }

  static void run(job& j) {
    const bool was = in_pool_task();
    in_pool_task() = true;
    for (;;) {
      const std::int64_t i = j.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= j.n) break;
      try {
        j.body(i);
      } catch (...) {
        std::lock_guard lock(j.error_mutex);
        if (!j.error) j.error = std::current_exception();
        j.next.store(j.n, std::memory_order_relaxed);  // stop handing out work
      }
    }
    in_pool_task() = was;
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      job* j = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && slots_ > 0); });
        if (stop_) return;
        seen = generation_;
        --slots_;
        j = job_;
        ++j->active;
      }
      run(*j);
      {
        std::lock_guard lock(mutex_);
        --j->active;
      }
      done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_, submit_mutex_;
  std::condition_variable wake_, done_;
  job* job_ = nullptr;
  int slots_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

//! parallel_for on the global pool, limited by a host policy's thread count.
template <class F>
void parallel_for(const host& policy, std::int64_t n, F&& f) {
  require(policy.num_threads >= 0, "specdec::parallel_for", "policy.num_threads", ">= 0", policy.num_threads);
  thread_pool::global().parallel_for(n, std::forward<F>(f), policy.num_threads);
}

}  // namespace specdec
