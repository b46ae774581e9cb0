#pragma once
//! \file drafter.hpp
//! The drafter policy of speculative_decoder: the `drafter` concept split into named sub-requirements
//! and check_drafter<D>(), which static_asserts each part with a message naming the missing member
//! (the other three policy concepts are in decoder/concepts.hpp), and the drafter side of the pairing
//! vocabulary of decoder/pairing.hpp: `draft_output`, what a drafter declares it can provide besides
//! tokens (`static constexpr draft_output provides`), and its detection (draft_output_v, draft_output::none
//! without the trait). They live in draft/ so that each shipped drafter checks itself right after its
//! definition without including decoder/.

#include <concepts>
#include <type_traits>
#include <cstdint>

#include "specdec/draft/draft_candidates.hpp"

namespace specdec {

//! What a drafter can provide besides the draft tokens (flags; "can": in at least one of its modes,
//! which may be chosen at run time, see decoder/pairing.hpp's file comment).
enum class draft_output : std::uint8_t {
  none = 0,
  q_rows = 1,      //!< the draft distribution's rows q for the drafted tokens (when it samples)
  iid_drafts = 2,  //!< k independent drafts sampled from q, each with its q rows (multi-draft mode)
};
[[nodiscard]] constexpr draft_output operator|(draft_output a, draft_output b) noexcept {
  return static_cast<draft_output>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
//! True if `have` includes every flag of `want`.
[[nodiscard]] constexpr bool provides_all(draft_output have, draft_output want) noexcept {
  return (static_cast<std::uint8_t>(have) & static_cast<std::uint8_t>(want)) == static_cast<std::uint8_t>(want);
}

// ---- trait detection (a missing trait takes its default: see decoder/pairing.hpp) ----------------------

template <class D>
concept drafter_declares_output = requires {
  { D::provides } -> std::convertible_to<draft_output>;
};

namespace detail {
template <class D>
consteval draft_output drafter_output() {
  if constexpr (drafter_declares_output<D>) return D::provides;
  else return draft_output::none;
}
}  // namespace detail

//! What a drafter can provide (draft_output::none without `provides`).
template <class D>
inline constexpr draft_output draft_output_v = detail::drafter_output<D>();

// ---- drafter ---------------------------------------------------------------------------------------

//! `reset(int request)` forgets a request's draft state (a new prompt starts in that slot).
template <class D>
concept drafter_has_reset = requires(D& d, int r) { d.reset(r); };

//! `propose(const draft_request&, draft_candidates&)` fills candidates for the tokens after the root.
//! A self-drafter (TokenSwift: the target itself on a partial KV cache) fits here too: it holds a
//! reference to the target and runs it inside propose(); nothing in the decoder assumes a separate model.
template <class D>
concept drafter_has_propose = requires(D& d, const draft_request& req, draft_candidates& out) { d.propose(req, out); };

//! A drafter policy.
template <class D>
concept drafter = drafter_has_reset<D> && drafter_has_propose<D>;

// ---- draft sources (optional) ----------------------------------------------------------------------

//! A drafter made of parts whose cost and acceptance differ (lookup_first_drafter: prompt lookup where
//! the context repeats, a draft model elsewhere) may say which part drafts a request's next step:
//! `static constexpr int draft_sources` (>= 1) and `int draft_source(const draft_request&)`, a value in
//! [0, draft_sources) for the request's committed tokens (req.depth: the deepest the step may draft,
//! >= 1). The adaptive depth (decoder/adaptive_depth.hpp) then keeps its acceptance, tree-size and
//! drafting-time estimates per source and plans each step's depth with the estimates of the source
//! about to draft: a free lookup draft that the target mostly accepts is planned deep, a costly model
//! draft shallow or not at all. Contract: draft_source neither draws from req.rng nor changes what the
//! next propose() for those tokens does, and it names the part that propose() then uses at any depth
//! >= 1 (the decoder checks the range, not this). Both are exactly int, so every check sees the value
//! itself (a wider type would be narrowed first: 2^32 would pass as source 0, 2^32 + 2 sources as 2).
//! A drafter that declares draft_sources without that member is an error (check_drafter), not one
//! source.
template <class D>
concept drafter_has_sources = requires(D& d, const draft_request& req) {
  requires std::same_as<std::remove_cv_t<decltype(D::draft_sources)>, int>;
  { d.draft_source(req) } -> std::same_as<int>;
};

//! D declares a draft_sources member (whether or not the rest of drafter_has_sources holds).
template <class D>
concept drafter_declares_sources = requires { D::draft_sources; };

namespace detail {
template <class D>
consteval int drafter_sources() {
  if constexpr (drafter_has_sources<D>) return static_cast<int>(D::draft_sources);
  else return 1;
}
}  // namespace detail

//! The number of draft sources of D (1 without draft_sources).
template <class D>
inline constexpr int draft_sources_v = detail::drafter_sources<D>();

template <class D>
consteval bool check_drafter() {
  static_assert(drafter_has_reset<D>, "drafter: missing member function 'reset(int request)'");
  static_assert(drafter_has_propose<D>,
                "drafter: missing member function 'propose(const specdec::draft_request&, specdec::draft_candidates&)'");
  static_assert(!drafter_declares_sources<D> || drafter_has_sources<D>,
                "drafter: declares 'draft_sources' but has no member function 'int draft_source(const "
                "specdec::draft_request&)' (returning exactly int), or 'draft_sources' is not an int constant");
  static_assert(draft_sources_v<D> >= 1 && draft_sources_v<D> <= 64, "drafter: draft_sources must be in [1, 64]");
  return true;
}

}  // namespace specdec
