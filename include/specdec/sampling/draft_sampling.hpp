#pragma once
//! \file draft_sampling.hpp
//! How a draft's sibling tokens were drawn from the draft distribution q: the one word the drafters
//! (draft/, which record it in draft_candidates::sampled_as) and the multi-draft verifier
//! (verify/multi_draft.hpp, which relies on it) share. It lives here, below both, so that draft/ need
//! not include verify/.

#include <cstdint>
#include <string_view>

#include "specdec/core/error.hpp"

namespace specdec {

//! How each node's children were drawn from the draft distribution.
enum class draft_sampling : std::uint8_t {
  with_replacement,    //!< i.i.d. draws (siblings may repeat a token)
  without_replacement  //!< sequential draws excluding earlier siblings' tokens (siblings distinct)
};

//! Throws invalid_argument naming `function` and `argument` unless `mode` is one of the enumerators
//! (a value cast from an integer may be neither).
inline void require_draft_sampling(std::string_view function, std::string_view argument, draft_sampling mode) {
  require(mode == draft_sampling::with_replacement || mode == draft_sampling::without_replacement, function, argument,
          "draft_sampling::with_replacement or draft_sampling::without_replacement", static_cast<int>(mode));
}

}  // namespace specdec
