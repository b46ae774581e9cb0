#pragma once
//! \file error.hpp
//! Error types and the argument-validation helpers every public entry point uses.
//!
//! Messages have one shape, so users and tests can rely on it:
//!   "<function>: argument '<argument>': expected <expected>, got <actual>"

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "specdec/core/isa.hpp"

namespace specdec {

//! Thrown by host entry points when an argument violates a precondition. Derives from
//! std::invalid_argument so generic handlers catch it.
class invalid_argument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

//! Thrown when a CUDA runtime call fails; the message carries the CUDA error string and the call.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  //! The cudaError_t value, as int so this header needs no CUDA headers.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

// The helpers below are inline functions that every host entry point calls: inside the ISA
// namespace (core/isa.hpp), so files built with different target flags keep separate copies.
namespace detail {
inline namespace SPECDEC_HOST_ISA {
template <class T>
void append_value(std::ostringstream& os, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char> ||
                       std::is_same_v<T, char>) {
    os << static_cast<int>(v);
  } else {
    os << v;
  }
}
}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {

//! Builds the canonical message "<function>: argument '<argument>': expected <expected>, got <actual>".
template <class Actual>
[[nodiscard]] std::string format_argument_error(std::string_view function, std::string_view argument,
                                                std::string_view expected, const Actual& actual) {
  std::ostringstream os;
  os << function << ": argument '" << argument << "': expected " << expected << ", got ";
  detail::append_value(os, actual);
  return os.str();
}

//! Throws specdec::invalid_argument with the canonical message.
template <class Actual>
[[noreturn]] void throw_invalid_argument(std::string_view function, std::string_view argument,
                                         std::string_view expected, const Actual& actual) {
  throw invalid_argument(format_argument_error(function, argument, expected, actual));
}

//! Precondition check: if !ok, throws invalid_argument naming function, argument, expectation and
//! the actual value. `expected` is only formatted on failure, so the happy path costs one branch.
template <class Actual>
void require(bool ok, std::string_view function, std::string_view argument, std::string_view expected,
             const Actual& actual) {
  if (!ok) [[unlikely]] throw_invalid_argument(function, argument, expected, actual);
}

//! require(actual == expected) with the expected value printed.
template <class A, class B>
void require_equal(std::string_view function, std::string_view argument, const A& expected, const B& actual) {
  if (!(actual == expected)) [[unlikely]] {
    std::ostringstream e;
    detail::append_value(e, expected);
    throw_invalid_argument(function, argument, e.str(), actual);
  }
}

//! require(lo <= actual <= hi).
template <class T>
void require_in_range(std::string_view function, std::string_view argument, const T& actual, const T& lo,
                      const T& hi) {
  if (!(lo <= actual && actual <= hi)) [[unlikely]] {
    std::ostringstream e;
    e << "a value in [";
    detail::append_value(e, lo);
    e << ", ";
    detail::append_value(e, hi);
    e << "]";
    throw_invalid_argument(function, argument, e.str(), actual);
  }
}

//! The product of non-negative sizes (an element count: requests * slots * heads * head_dim, a
//! tensor's shape), throwing naming function and argument when it would exceed INT64_MAX instead of
//! wrapping (a wrapped count sizes a buffer too small for the loops that follow). Negative sizes
//! are the caller's to reject first; here they throw too.
[[nodiscard]] inline std::int64_t checked_size_product(std::string_view function, std::string_view argument,
                                                      std::initializer_list<std::int64_t> sizes) {
  std::int64_t n = 1;
  for (const std::int64_t s : sizes) {
    if (s < 0 || (s > 0 && n > INT64_MAX / s)) [[unlikely]] {
      std::ostringstream a;
      const char* sep = "";
      for (const std::int64_t x : sizes) a << sep << x, sep = " * ";
      throw_invalid_argument(function, argument, "non-negative sizes whose product fits in int64", a.str());
    }
    n *= s;
  }
  return n;
}

}  // namespace SPECDEC_HOST_ISA

namespace detail {
inline namespace SPECDEC_HOST_ISA {
//! The one check of a CSR offsets array (q_indptr, page_indptr, accepted_indptr, node_indptr, ...):
//! `indptr` holds requests + 1 int32 values in host memory; requires indptr[0] == 0, non-decreasing
//! values and, when total >= 0, indptr[requests] == total (`total_what` names that size). Afterwards
//! every difference indptr[r + 1] - indptr[r] is a non-negative int32 and every indptr[r] indexes
//! the array the offsets point into. `argument` is the argument the message names, `name` the array
//! (they differ when the array is a member: argument 'cache', name page_indptr). Messages are built
//! only on failure (validation on every call does not allocate). O(requests).
inline void validate_indptr(std::string_view function, std::string_view argument, std::string_view name,
                            const std::int32_t* indptr, std::int64_t requests, std::int64_t total = -1,
                            std::string_view total_what = {}) {
  if (indptr == nullptr) [[unlikely]]
    throw_invalid_argument(function, argument, "non-null " + std::string(name), "nullptr");
  if (indptr[0] != 0) [[unlikely]]
    throw_invalid_argument(function, argument, std::string(name) + "[0] == 0", indptr[0]);
  for (std::int64_t r = 0; r < requests; ++r)
    if (indptr[r + 1] < indptr[r]) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "non-decreasing " + std::string(name) + " (at request " + std::to_string(r) + "), " +
                                 std::string(name) + "[" + std::to_string(r) + "] = " + std::to_string(indptr[r]) +
                                 " followed by",
                             indptr[r + 1]);
  if (total >= 0 && indptr[requests] != total) [[unlikely]]
    throw_invalid_argument(function, argument,
                           "last value " + std::string(name) + "[" + std::to_string(requests) + "] equal to " +
                               std::string(total_what) + " = " + std::to_string(total),
                           indptr[requests]);
}

//! Runs `f`, a call an entry point delegates to another primitive, and returns its result; an
//! invalid_argument it throws is re-thrown as "<function> -> <its message>", so the message names
//! the entry point the user called as well as the primitive that checked. Other exceptions pass
//! through unchanged.
template <class F>
decltype(auto) delegate_call(std::string_view function, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(function) + " -> " + e.what());
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

}  // namespace specdec
