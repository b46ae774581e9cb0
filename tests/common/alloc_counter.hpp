// Process-wide heap-allocation counter for tests that assert a code path allocates nothing, and
// failure injection for tests of what a failed allocation leaves behind.
//
// Include from exactly ONE translation unit of a test executable: it replaces the global
// allocation functions. Every replaceable form ([new.delete.single], [new.delete.array], plain,
// nothrow and aligned) is replaced, all backed by malloc/aligned_alloc + free, so that no pairing
// mixes our operator delete with a runtime-provided operator new. Sanitizer runtimes (ASan) replace
// the same functions; replacing only some of them makes ASan report alloc-dealloc-mismatch when
// e.g. its nothrow new is released through our delete. With the full set, ASan sees malloc/free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace specdec_test {

// Counts calls to any operator new while `counting()` is true.
inline std::atomic<bool>& counting() {
  static std::atomic<bool> flag{false};
  return flag;
}
inline std::atomic<long>& allocations() {
  static std::atomic<long> n{0};
  return n;
}

// RAII: counts allocations made during its lifetime; `count()` reads the number so far.
class allocation_scope {
 public:
  allocation_scope() : start_(allocations().load()) { counting().store(true); }
  ~allocation_scope() { counting().store(false); }
  allocation_scope(const allocation_scope&) = delete;
  allocation_scope& operator=(const allocation_scope&) = delete;
  long count() const { return allocations().load() - start_; }

 private:
  long start_;
};

// Allocations left before every further one fails (operator new throws std::bad_alloc, the nothrow
// forms return nullptr); negative: none fails.
inline std::atomic<long>& allocations_left() {
  static std::atomic<long> n{-1};
  return n;
}

// RAII: lets `allowed` more allocations succeed, then fails every one until it is destroyed, so a test
// can check what a container leaves behind when its growth fails.
class failing_allocation_scope {
 public:
  explicit failing_allocation_scope(long allowed) { allocations_left().store(allowed); }
  ~failing_allocation_scope() { allocations_left().store(-1); }
  failing_allocation_scope(const failing_allocation_scope&) = delete;
  failing_allocation_scope& operator=(const failing_allocation_scope&) = delete;
};

namespace detail {
inline void note_allocation() {
  if (counting().load(std::memory_order_relaxed)) allocations().fetch_add(1, std::memory_order_relaxed);
}
// True when this allocation is to fail (failing_allocation_scope).
inline bool allocation_fails() {
  long left = allocations_left().load(std::memory_order_relaxed);
  while (left >= 0) {
    if (left == 0) return true;
    if (allocations_left().compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return false;
  }
  return false;
}
inline void* plain_alloc(std::size_t n) noexcept {
  note_allocation();
  if (allocation_fails()) return nullptr;
  return std::malloc(n ? n : 1);
}
inline void* aligned_alloc_rounded(std::size_t n, std::align_val_t a) noexcept {
  note_allocation();
  if (allocation_fails()) return nullptr;
  std::size_t al = static_cast<std::size_t>(a);
  if (al < sizeof(void*)) al = sizeof(void*);
  const std::size_t bytes = n == 0 ? al : (n + al - 1) / al * al;  // aligned_alloc: size multiple of al
  return std::aligned_alloc(al, bytes);
}
}  // namespace detail
}  // namespace specdec_test

// GCC cannot see that the replaced new and delete pair malloc/free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  if (void* p = specdec_test::detail::plain_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = specdec_test::detail::plain_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return specdec_test::detail::plain_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return specdec_test::detail::plain_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = specdec_test::detail::aligned_alloc_rounded(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = specdec_test::detail::aligned_alloc_rounded(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return specdec_test::detail::aligned_alloc_rounded(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return specdec_test::detail::aligned_alloc_rounded(n, a);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
