#pragma once
//! \file row_error.hpp
//! Error messages of the token-producing entry points (logits processors, samplers, verifiers) when
//! a value of a row breaks the non-finite policy (sampling/sampler.hpp): they name the function, the
//! argument, the row (and the request, in a ragged batch) and the token, in the canonical shape of
//! core/error.hpp. Built only on the error path.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "specdec/core/error.hpp"

namespace specdec::detail {

//! What the policy expects of a logit / a probability (the start of the messages).
inline constexpr std::string_view bad_logit_text = "finite or -inf logits (no NaN, no +inf)";
inline constexpr std::string_view bad_prob_text = "finite probabilities >= 0 (no NaN, no inf, no negative entry)";

//! A single row's size: 1 to 2^31 - 1 entries (token ids are int32, so a longer row would hand back
//! negative ids). Throws invalid_argument naming `function` and `argument`.
inline void require_row_size(std::string_view function, std::string_view argument, std::size_t size) {
  require(size >= 1 && size <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), function, argument,
          "a non-empty row of at most 2^31 - 1 tokens (vocab >= 1)", size);
}

//! Where a row of logits / probabilities comes from, for messages. `row` < 0: the argument is one
//! row (no row index is printed). In a ragged batch `request` >= 0 and `row` is the row in the
//! whole tensor; `request_row` is the same row counted from the request's first row.
struct row_ref {
  std::string_view function;
  std::string_view argument;
  std::int64_t row = -1;
  std::int64_t request = -1;
  std::int64_t request_row = -1;
};

//! " (row 7 = request 1's row 2, token 5)" and its shorter forms; token < 0 omits the token.
inline std::string row_position(const row_ref& at, std::int64_t token) {
  std::string s;
  const auto add = [&](const std::string& part) { s += (s.empty() ? " (" : ", ") + part; };
  if (at.row >= 0) {
    std::string r = "row " + std::to_string(at.row);
    if (at.request >= 0) r += " = request " + std::to_string(at.request) + "'s row " + std::to_string(at.request_row);
    add(r);
  } else if (at.request >= 0) {  // only the request-local row is known (a per-request view of a batch)
    add("request " + std::to_string(at.request) + "'s row " + std::to_string(at.request_row));
  }
  if (token >= 0) add("token " + std::to_string(token));
  return s.empty() ? s : s + ")";
}

//! Throws invalid_argument: "<function>: argument '<argument>': expected <expected> (row r, token t),
//! got <value>".
template <class Value>
[[noreturn]] void throw_bad_entry(const row_ref& at, std::string_view expected, std::int64_t token, const Value& value) {
  throw_invalid_argument(at.function, at.argument, std::string(expected) + row_position(at, token), value);
}

//! Throws invalid_argument for a row with no admissible token (all -inf logits, all-zero probabilities).
[[noreturn]] inline void throw_empty_row(const row_ref& at, std::string_view expected, std::string_view got) {
  throw_invalid_argument(at.function, at.argument, std::string(expected) + row_position(at, -1), got);
}

}  // namespace specdec::detail
