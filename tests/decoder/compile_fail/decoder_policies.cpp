// Compile-fail cases for the decoder's policy concepts. Each -D macro removes one member from an
// otherwise valid policy; instantiating speculative_decoder must then fail with the static_assert of
// check_target_model / check_drafter / check_tree_builder / check_verifier naming that member.
// MISTYPED_DRAFT_SOURCE instead declares draft sources with a mistyped member. Without a macro the file
// compiles (positive control).
#include <span>

#include "specdec/decoder/speculative_decoder.hpp"

struct target {
#ifndef MISSING_LOGIT_TYPE
  using logit_type = float;
#endif
#ifndef MISSING_VOCAB_SIZE
  int vocab_size() const { return 4; }
#endif
#ifndef MISSING_MAX_REQUESTS
  int max_requests() const { return 1; }
#endif
#ifndef MISSING_PREFILL
  void prefill(int, std::span<const std::int32_t>) {}
#endif
#ifndef MISSING_FORWARD
  void forward(int, std::int32_t, const specdec::token_tree&, std::span<float>) {}
#endif
#ifndef MISSING_COMMIT
  void commit(int, std::span<const std::int32_t>) {}
#endif
};

struct drafter {
#ifndef MISSING_RESET
  void reset(int) {}
#endif
#ifndef MISSING_PROPOSE
  void propose(const specdec::draft_request&, specdec::draft_candidates&) {}
#endif
#ifdef MISTYPED_DRAFT_SOURCE  // draft sources (draft/drafter.hpp) whose draft_source does not return int
  static constexpr int draft_sources = 2;
  std::int64_t draft_source(const specdec::draft_request&) { return 0; }
#endif
};

struct builder {
#ifndef MISSING_BUILD
  void build(const specdec::draft_candidates&, specdec::token_tree&) {}
#endif
};

struct verifier {
#ifndef MISSING_TRAIT
  static constexpr bool is_lossless_for_sampling = false;
#endif
#ifndef MISSING_VERIFY
  void verify(const specdec::verify_input&, specdec::verify_result&) {}
#endif
};

int main() {
  target t;
  specdec::speculative_decoder<target, drafter, builder, verifier> d(t);
  (void)d;
}
