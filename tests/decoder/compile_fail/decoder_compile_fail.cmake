# Compile-fail tests of the decoder's policy concepts (decoder/concepts.hpp): a policy missing one
# member must be rejected where speculative_decoder is instantiated, with a static_assert message that
# names the member. Uses specdec_add_compile_fail_cases of tests/compile_fail/compile_fail.cmake (included first).
# Registered by including this file from tests/CMakeLists.txt.
specdec_add_compile_fail_cases(decoder ${CMAKE_CURRENT_LIST_DIR}/decoder_policies.cpp
  "control|"
  "missing_logit_type|MISSING_LOGIT_TYPE|target_model: missing member type 'logit_type'"
  "missing_vocab_size|MISSING_VOCAB_SIZE|target_model: missing member function 'vocab_size\\(\\) const'"
  "missing_max_requests|MISSING_MAX_REQUESTS|target_model: missing member function 'max_requests\\(\\) const'"
  "missing_prefill|MISSING_PREFILL|target_model: missing member function 'prefill\\(int request"
  "missing_forward|MISSING_FORWARD|target_model: missing member function 'forward\\(int request, int32_t root"
  "missing_commit|MISSING_COMMIT|target_model: missing member function 'commit\\(int request"
  "missing_reset|MISSING_RESET|drafter: missing member function 'reset\\(int request\\)'"
  "missing_propose|MISSING_PROPOSE|drafter: missing member function 'propose\\("
  "missing_build|MISSING_BUILD|tree_builder: missing member function 'build\\("
  "missing_verify|MISSING_VERIFY|verifier: missing member function 'verify\\("
  "missing_trait|MISSING_TRAIT|verifier: missing 'static constexpr bool is_lossless_for_sampling'")

# The same for TokenSwift's self-drafting model (decoder/self_drafter.hpp): instantiating self_drafter
# over a model missing one member fails with check_self_draft_model's message naming it.
specdec_add_compile_fail_cases(self_draft_model ${CMAKE_CURRENT_LIST_DIR}/self_draft_model.cpp
  "control|"
  "missing_logit_type|MISSING_LOGIT_TYPE|self_draft_model: missing member type 'logit_type'"
  "missing_vocab_size|MISSING_VOCAB_SIZE|self_draft_model: missing member function 'vocab_size\\(\\) const'"
  "missing_num_draft_heads|MISSING_NUM_DRAFT_HEADS|self_draft_model: missing member function 'num_draft_heads\\(\\) const'"
  "missing_self_draft|MISSING_SELF_DRAFT|self_draft_model: missing member function 'self_draft\\(int request"
  "missing_reset_draft|MISSING_RESET_DRAFT|self_draft_model: missing member function 'reset_draft\\(int request\\)'")
