# Compile-fail tests of the decoder's policy concepts (decoder/concepts.hpp): a policy missing one
# member must be rejected where speculative_decoder is instantiated, with a static_assert message that
# names the member. Reuses tests/compile_fail/run_compile_fail.cmake (-fsyntax-only per case).
# Registered by including this file from tests/CMakeLists.txt.
set(_dcf_dir ${CMAKE_CURRENT_LIST_DIR})
set(_dcf_cases
  "control|"
  "missing_logit_type|MISSING_LOGIT_TYPE|target_model: missing member type 'logit_type'"
  "missing_prefill|MISSING_PREFILL|target_model: missing member function 'prefill\\(int request"
  "missing_forward|MISSING_FORWARD|target_model: missing member function 'forward\\(int request, int32_t root"
  "missing_commit|MISSING_COMMIT|target_model: missing member function 'commit\\(int request"
  "missing_reset|MISSING_RESET|drafter: missing member function 'reset\\(int request\\)'"
  "missing_propose|MISSING_PROPOSE|drafter: missing member function 'propose\\("
  "missing_build|MISSING_BUILD|tree_builder: missing member function 'build\\("
  "missing_verify|MISSING_VERIFY|verifier: missing member function 'verify\\("
  "missing_trait|MISSING_TRAIT|verifier: missing 'static constexpr bool is_lossless_for_sampling'")
foreach(_case IN LISTS _dcf_cases)
  string(REPLACE "|" ";" _parts "${_case}")
  list(LENGTH _parts _n)
  list(GET _parts 0 _name)
  set(_define "")
  set(_expect "")
  if(_n GREATER 1)
    list(GET _parts 1 _define)
  endif()
  if(_n GREATER 2)
    list(GET _parts 2 _expect)
  endif()
  add_test(NAME compile_fail.decoder_${_name}
           COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER} -DSRC=${_dcf_dir}/decoder_policies.cpp
                   -DINCLUDE=${PROJECT_SOURCE_DIR}/include -DDEFINE=${_define} "-DEXPECT=${_expect}"
                   -P ${PROJECT_SOURCE_DIR}/tests/compile_fail/run_compile_fail.cmake)
  set_tests_properties(compile_fail.decoder_${_name} PROPERTIES LABELS compile_fail TIMEOUT 300)
endforeach()
