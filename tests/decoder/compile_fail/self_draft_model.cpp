// Compile-fail cases for draft/self_drafter.hpp's self_draft_model concept. Each -D macro removes one
// member from an otherwise valid self-drafting model; instantiating self_drafter must then fail with
// check_self_draft_model's static_assert naming that member. Without a macro the file compiles.
#include <span>

#include "specdec/draft/self_drafter.hpp"

struct model {
#ifndef MISSING_LOGIT_TYPE
  using logit_type = float;
#endif
#ifndef MISSING_VOCAB_SIZE
  int vocab_size() const { return 4; }
#endif
#ifndef MISSING_NUM_DRAFT_HEADS
  int num_draft_heads() const { return 3; }
#endif
#ifndef MISSING_SELF_DRAFT
  void self_draft(int, std::span<const std::int32_t>, std::span<float>) {}
#endif
#ifndef MISSING_RESET_DRAFT
  void reset_draft(int) {}
#endif
};

int main() {
  model m;
  specdec::self_drafter<model> d(m);
  (void)d;
}
