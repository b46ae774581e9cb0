# Compile-fail tests of the decoder's policy concepts (decoder/concepts.hpp; the drafter's is in
# draft/drafter.hpp): a policy missing one member must be rejected where speculative_decoder is
# instantiated, with a static_assert message that names the member. Uses specdec_add_compile_fail_cases
# of tests/compile_fail/compile_fail.cmake (included first).
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
  "mistyped_draft_source|MISTYPED_DRAFT_SOURCE|drafter: declares 'draft_sources' but has no member function 'int draft_source\\(const specdec::draft_request&\\)'"
  "missing_build|MISSING_BUILD|tree_builder: missing member function 'build\\("
  "missing_verify|MISSING_VERIFY|verifier: missing member function 'verify\\("
  "missing_trait|MISSING_TRAIT|verifier: missing 'static constexpr bool is_lossless_for_sampling'")

# The same for TokenSwift's self-drafting model (draft/self_drafter.hpp): instantiating self_drafter
# over a model missing one member fails with check_self_draft_model's message naming it.
specdec_add_compile_fail_cases(self_draft_model ${CMAKE_CURRENT_LIST_DIR}/self_draft_model.cpp
  "control|"
  "missing_logit_type|MISSING_LOGIT_TYPE|self_draft_model: missing member type 'logit_type'"
  "missing_vocab_size|MISSING_VOCAB_SIZE|self_draft_model: missing member function 'vocab_size\\(\\) const'"
  "missing_num_draft_heads|MISSING_NUM_DRAFT_HEADS|self_draft_model: missing member function 'num_draft_heads\\(\\) const'"
  "missing_self_draft|MISSING_SELF_DRAFT|self_draft_model: missing member function 'self_draft\\(int request"
  "missing_reset_draft|MISSING_RESET_DRAFT|self_draft_model: missing member function 'reset_draft\\(int request\\)'")

# Policy pairing (decoder/pairing.hpp, issue #22 item 4): a drafter x tree builder x verifier that cannot
# verify exactly is rejected where speculative_decoder is instantiated, with check_policy_pairing's one
# static_assert sentence and no other error. The control compiles a legal pair per shipped verifier and
# policies without traits. (Combinations that are legal by type but wrong by a run-time option, e.g. a
# chain_drafter without multi_draft_params under multi_draft_verifier, stay verify/'s run-time checks.)
set(_pp_only "policy pairing: ")
specdec_add_compile_fail_cases(policy_pairing ${CMAKE_CURRENT_LIST_DIR}/policy_pairing.cpp
  "control|"
  "multi_draft_on_cartesian|MULTI_DRAFT_ON_CARTESIAN|policy pairing: the verifier needs i\\.i\\.d\\. drafts \\(like multi_draft_verifier, from multi_draft_tree_builder\\) or a chain, but the tree builder builds a merged or ranked tree|${_pp_only}"
  "multi_draft_on_trie|MULTI_DRAFT_ON_TRIE|policy pairing: the verifier needs i\\.i\\.d\\. drafts \\(like multi_draft_verifier|${_pp_only}"
  "chain_on_cartesian|CHAIN_ON_CARTESIAN|policy pairing: the verifier checks chains only \\(like chain_speculative_verifier\\), but the tree builder may build branching trees. use chain_tree_builder|${_pp_only}"
  "chain_on_multi_draft_tree|CHAIN_ON_MULTI_DRAFT_TREE|policy pairing: the verifier checks chains only \\(like chain_speculative_verifier\\)|${_pp_only}"
  "chain_on_user_builder|CHAIN_ON_USER_BUILDER|policy pairing: the verifier checks chains only.*declares 'static constexpr specdec::tree_shape produces = specdec::tree_shape::chain'|${_pp_only}"
  "multi_draft_tree_without_iid_drafter|MULTI_DRAFT_TREE_WITHOUT_IID_DRAFTER|policy pairing: the tree builder lays out i\\.i\\.d\\. drafts for the verifier \\(like multi_draft_tree_builder for multi_draft_verifier\\), but the drafter never draws i\\.i\\.d\\. drafts|${_pp_only}"
  "q_verifier_without_q_drafter|Q_VERIFIER_WITHOUT_Q_DRAFTER|policy pairing: the verifier needs the draft's q rows on branching trees, but the drafter never provides them|${_pp_only}"
  "mistyped_trait|MISTYPED_TRAIT|policy pairing: the tree builder's 'produces' trait must be a specdec::tree_shape|${_pp_only}")
