#pragma once
//! \file thread_pool.hpp
//! A small fixed-size thread pool with a blocking parallel_for, used by the host backend.
//!
//! parallel_for(n, f) calls f(i) for every i in [0, n) across the pool and the calling thread, and
//! returns when all calls are done. Work is handed out one index at a time from an atomic counter, so
//! uneven items (ragged requests) balance. A parallel_for issued from inside a pool task runs inline,
//! so nested parallelism cannot deadlock. The first exception thrown by f is rethrown to the caller.
//!
//! Waiting: a worker that has finished a job polls for the next one for a short while (the pool's
//! spin time) before it sleeps on a condition variable, and so does the caller waiting for the
//! workers to finish, as OpenMP runtimes and llama.cpp's thread pool do. A model step issues a few
//! dozen parallel_for calls microseconds apart (the projections, attention, the MLP); with sleeping
//! alone each of them paid a futex wake-up and a context switch on every thread, which took 13% of
//! the CPU samples of the example demo's decode loop on a 2-core Xeon (benchmarks/RESULTS.md, "The
//! thread pool polls before it sleeps"). The global pool's spin time comes from the environment
//! variable SPECDEC_POOL_SPIN_US (microseconds; 0 = sleep at once), default default_spin.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"

namespace specdec {

class thread_pool {
 public:
  //! How long a worker polls for the next job, and the caller for the workers, before sleeping,
  //! unless SPECDEC_POOL_SPIN_US says otherwise (the global pool) or the constructor is given one.
  static constexpr std::chrono::microseconds default_spin{50};

  //! Starts `workers` background threads (the caller is an extra participant in each parallel_for),
  //! which poll for `spin` after each job before they sleep (0: sleep at once).
  explicit thread_pool(int workers, std::chrono::microseconds spin = default_spin) : spin_(spin) {
    require(workers >= 0, "specdec::thread_pool", "workers", ">= 0", workers);
    require(spin.count() >= 0 && spin.count() <= 1000000, "specdec::thread_pool", "spin (microseconds)",
            "in [0, 1000000]", spin.count());
    threads_.reserve(static_cast<std::size_t>(workers));
    // A thread the system cannot start (a thread or memory limit) throws std::system_error: the
    // threads already running are stopped and joined first, since a joinable std::thread destroyed
    // unwinding calls std::terminate (and the condition variable cannot be destroyed under waiters).
    try {
      for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() { stop_and_join(); }

  //! Number of background threads.
  [[nodiscard]] int workers() const noexcept { return static_cast<int>(threads_.size()); }
  //! How long a thread polls before it sleeps (see the file comment).
  [[nodiscard]] std::chrono::microseconds spin() const noexcept { return spin_; }

  //! Calls f(i) for i in [0, n) using at most max_threads threads in all (0 = all of them; negative
  //! throws invalid_argument).
  template <class F>
  void parallel_for(std::int64_t n, F&& f, int max_threads = 0) {
    require(max_threads >= 0, "specdec::thread_pool::parallel_for", "max_threads", ">= 0 (0 = all threads)",
            max_threads);
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
      generation_.fetch_add(1, std::memory_order_release);  // what polling workers watch
    }
    wake_.notify_all();
    run(j);
    {
      std::lock_guard lock(mutex_);
      slots_ = 0;  // workers that have not joined yet skip this job: its work is already done
    }
    // The workers that joined finish their last items: poll, then sleep.
    poll([&] { return j.active.load(std::memory_order_acquire) == 0; });
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return j.active.load(std::memory_order_acquire) == 0; });
    job_ = nullptr;
    if (j.error) std::rethrow_exception(j.error);
  }

  //! The process-wide pool: hardware_concurrency - 1 workers, created on first use, polling for
  //! SPECDEC_POOL_SPIN_US microseconds (default_spin if unset; an invalid value is an error).
  static thread_pool& global() {
    static thread_pool pool(std::max(1u, std::thread::hardware_concurrency()) - 1, spin_from_env());
    return pool;
  }

  //! SPECDEC_POOL_SPIN_US as a duration (default_spin when unset or empty). Throws invalid_argument
  //! unless it is a whole number of microseconds in [0, 1000000].
  [[nodiscard]] static std::chrono::microseconds spin_from_env() {
    const char* v = std::getenv("SPECDEC_POOL_SPIN_US");
    if (v == nullptr || *v == '\0') return default_spin;
    char* end = nullptr;
    const long long us = std::strtoll(v, &end, 10);
    require(*v >= '0' && *v <= '9' && *end == '\0' && us <= 1000000, "specdec::thread_pool", "SPECDEC_POOL_SPIN_US",
            "a whole number of microseconds in [0, 1000000]", v);
    return std::chrono::microseconds(us);
  }

 private:
  void stop_and_join() noexcept {
    {
      std::lock_guard lock(mutex_);
      stop_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  struct job {
    std::int64_t n = 0;
    std::function<void(std::int64_t)> body;
    std::atomic<std::int64_t> next{0};
    std::atomic<int> active{0};  // workers in run(); joined under mutex_, left without it
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
      // i < 0: the counter wrapped past INT64_MAX (each thread adds once more after the last item,
      // and an exception moves it to n), for n within a few of INT64_MAX: done, not f(INT64_MIN)
      if (i >= j.n || i < 0) break;
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

  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  //! Polls ready() until it holds or spin_ has passed (the clock checked every 64 polls). The
  //! callers re-check their condition under the mutex afterwards, so this only saves a sleep.
  template <class Ready>
  void poll(Ready&& ready) const noexcept {
    if (spin_.count() == 0) return;
    const auto until = std::chrono::steady_clock::now() + spin_;
    do {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return;
        cpu_relax();
      }
    } while (std::chrono::steady_clock::now() < until);
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    bool repoll = false;  // polls once more after a job it missed (only a worker that ran the job before)
    for (;;) {
      poll([&] {
        return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != seen;
      });
      job* j = nullptr;
      {
        std::unique_lock lock(mutex_);
        const std::uint64_t gen = generation_.load(std::memory_order_relaxed);
        if (!stop_.load(std::memory_order_relaxed) && gen != seen && slots_ == 0) {
          // A job this worker was not needed for (max_threads) or came too late to. Poll for the
          // next one only if it ran the one before, so that workers a caller's thread cap leaves
          // out sleep instead of polling through a stream of jobs.
          seen = gen;
          if (std::exchange(repoll, false)) continue;
        }
        wake_.wait(lock, [&] {
          return stop_.load(std::memory_order_relaxed) ||
                 (generation_.load(std::memory_order_relaxed) != seen && slots_ > 0);
        });
        if (stop_.load(std::memory_order_relaxed)) return;
        seen = generation_.load(std::memory_order_relaxed);
        --slots_;
        j = job_;
        j->active.fetch_add(1, std::memory_order_relaxed);
      }
      run(*j);
      repoll = true;
      // The caller may return (and free *j) as soon as active reaches 0: nothing of *j after this.
      // Taking the mutex between the decrement and the notify keeps a sleeping caller from missing it.
      if (j->active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { std::lock_guard lock(mutex_); }
        done_.notify_all();
      }
    }
  }

  std::vector<std::thread> threads_;
  std::chrono::microseconds spin_;
  std::mutex mutex_, submit_mutex_;
  std::condition_variable wake_, done_;
  job* job_ = nullptr;
  int slots_ = 0;                             // guarded by mutex_
  std::atomic<std::uint64_t> generation_{0};  // written under mutex_, polled without it
  std::atomic<bool> stop_{false};             // written under mutex_, polled without it
};

//! parallel_for on the global pool, limited by a host policy's thread count.
template <class F>
void parallel_for(const host& policy, std::int64_t n, F&& f) {
  require(policy.num_threads >= 0, "specdec::parallel_for", "policy.num_threads", ">= 0", policy.num_threads);
  thread_pool::global().parallel_for(n, std::forward<F>(f), policy.num_threads);
}

}  // namespace specdec
