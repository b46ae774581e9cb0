#pragma once
//! \file draft_sampling.hpp
//! How a draft's sibling tokens were drawn from the draft distribution q: the one word the drafters
//! (draft/, which record it in draft_candidates::sampled_as) and the multi-draft verifier
//! (verify/multi_draft.hpp, which relies on it) share. It lives here, below both, so that draft/ need
//! not include verify/.

#include <cstdint>

namespace specdec {

//! How each node's children were drawn from the draft distribution.
enum class draft_sampling : std::uint8_t {
  with_replacement,    //!< i.i.d. draws (siblings may repeat a token)
  without_replacement  //!< sequential draws excluding earlier siblings' tokens (siblings distinct)
};

}  // namespace specdec
