# Compile-fail tests: each case compiles a source with -fsyntax-only from a CMake script
# (run_compile_fail.cmake) with one -D define and expects the build to fail with a message matching a
# regex (and, when a fourth field is given, every error line to match that regex); the case without a
# define is the positive control that must compile.
set(_cf_dir ${CMAKE_CURRENT_LIST_DIR})
# The compiler a case runs (the C++ compiler unless a block below switches to nvcc) and its mode
# (run_compile_fail.cmake: "" = -fsyntax-only, "nvcc" = compile one .cu for the default GPU target).
set(_cf_compiler ${CMAKE_CXX_COMPILER})
set(_cf_mode "")

# The -fsyntax-only cases (GCC) read specdec's headers from a precompiled umbrella header, built with
# the tests: parsing the headers was most of each case's 3-5 s (70 cases, 255 s of the test command's
# ctest on a 2-core EPYC; one case 5.4 -> 1.7 s). The cases' -D macros are names the library never
# reads, so one header serves them all; where GCC cannot use it (a macro it depends on, a stale or
# missing .gch), it reads the header's text instead: the same diagnostics, only slower. The depfile
# rebuilds it whenever a header changes. Loading the 160 MB .gch takes ~1.7 s, so the sources that
# include a few light headers (0.6-1.6 s of text) go without it (_cf_no_pch).
set(_cf_no_pch kv_layout_missing_member.cpp kv_mapping_missing_member.cpp tree_batch_backend_missing.cpp)
set(_cf_pch "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT SPECDEC_SANITIZE)  # (sanitizer builds skip these cases)
  set(_cf_pch ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_pch/specdec_compile_fail.hpp)
  file(CONFIGURE OUTPUT ${_cf_pch} CONTENT "#include \"specdec/specdec.hpp\"\n")
  add_custom_command(OUTPUT ${_cf_pch}.gch
                     COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -I${PROJECT_SOURCE_DIR}/include -x c++-header ${_cf_pch}
                             -o ${_cf_pch}.gch -MD -MF ${_cf_pch}.d -MT ${_cf_pch}.gch
                     DEPENDS ${_cf_pch} DEPFILE ${_cf_pch}.d
                     COMMENT "Precompiling the compile-fail tests' umbrella header")
  add_custom_target(specdec_compile_fail_pch ALL DEPENDS ${_cf_pch}.gch)
endif()

# specdec_add_compile_fail_cases(<prefix> <source> <case>...): one ctest test compile_fail.<prefix>_<name>
# per case "name|DEFINE|expected-message-regex[|every-error-line-regex]" (DEFINE and regex empty for the
# control).
function(specdec_add_compile_fail_cases prefix src)
  get_filename_component(_file ${src} NAME)
  set(_pch ${_cf_pch})
  if(_file IN_LIST _cf_no_pch)
    set(_pch "")
  endif()
  foreach(_case IN LISTS ARGN)
    string(REPLACE "|" ";" _parts "${_case}")
    list(LENGTH _parts _n)
    list(GET _parts 0 _name)
    set(_define "")
    set(_expect "")
    set(_only "")
    if(_n GREATER 3)
      list(GET _parts 3 _only)
    endif()
    if(_n GREATER 1)
      list(GET _parts 1 _define)
    endif()
    if(_n GREATER 2)
      list(GET _parts 2 _expect)
    endif()
    add_test(NAME compile_fail.${prefix}_${_name}
             COMMAND ${CMAKE_COMMAND} -DCXX=${_cf_compiler} -DMODE=${_cf_mode} -DSRC=${src} "-DPCH=${_pch}"
                     -DINCLUDE=${PROJECT_SOURCE_DIR}/include -DDEFINE=${_define} "-DEXPECT=${_expect}"
                     "-DONLY=${_only}"
                     -P ${_cf_dir}/run_compile_fail.cmake)
    set_tests_properties(compile_fail.${prefix}_${_name} PROPERTIES LABELS compile_fail TIMEOUT 300)
  endforeach()
endfunction()

# A type missing one kv_layout member must be rejected by check_kv_layout<L>() with a static_assert
# message that names the member.
specdec_add_compile_fail_cases(kv_layout ${_cf_dir}/kv_layout_missing_member.cpp
  "control|"
  "missing_k_row|MISSING_K_ROW|kv_layout: missing member function 'k_row\\(int request"
  "missing_v_row|MISSING_V_ROW|kv_layout: missing member function 'v_row\\(int request"
  "missing_length|MISSING_LENGTH|kv_layout: missing member function 'length\\(int request\\)'"
  "missing_num_requests|MISSING_NUM_REQUESTS|kv_layout: missing member function 'num_requests\\(\\)'"
  "missing_num_kv_heads|MISSING_NUM_KV_HEADS|kv_layout: missing member function 'num_kv_heads\\(\\)'"
  "missing_head_dim|MISSING_HEAD_DIM|kv_layout: missing member function 'head_dim\\(\\)'"
  "missing_space|MISSING_SPACE|kv_layout: missing member function 'space\\(\\)'"
  "missing_value_type|MISSING_VALUE_TYPE|kv_layout: missing member type 'value_type'")

# Every entry point taking a layout accepts any type, so a type that is not a kv_layout gets all of
# check_kv_layout's messages that apply (here three missing members, and the commit entry points'
# capacity()) and nothing else: not an overload-resolution failure naming only the first missing
# member. A read-only layout passed to a commit gets check_writable_kv_layout's messages only.
specdec_add_compile_fail_cases(kv_layout_entry ${_cf_dir}/kv_layout_entry_points.cpp
  "control|"
  "not_a_layout|NOT_A_LAYOUT|kv_layout: missing member function 'length\\(int request\\)'.*kv_layout: missing member function 'k_row\\(int request.*kv_layout: missing member function 'space\\(\\)'.*writable_kv_layout: missing member function 'capacity\\(int request\\)'|kv_layout: "
  "read_only|READ_ONLY|writable_kv_layout: value_type must not be const.*writable_kv_layout: missing member function 'capacity\\(int request\\)'|writable_kv_layout: ")

# The attention entry points are single templates over the execution policy; calling one with
# specdec::cuda from a translation unit that did not include the .cuh backend must fail with the
# backend seam's static_assert (detail/backend.hpp). The control calls the same with specdec::host.
specdec_add_compile_fail_cases(attention_backend ${_cf_dir}/attention_backend_missing.cpp
  "control|"
  "cuda_without_cuh|USE_CUDA_POLICY|no attention backend for this execution policy")

# RoPE has the same seam (rope_backend in position/rope.hpp): apply_rope with specdec::cuda in a
# translation unit without position/rope.cuh fails with its one static_assert, and every error line
# is that message (no cascade). The control calls the same with specdec::host.
specdec_add_compile_fail_cases(rope_backend ${_cf_dir}/rope_backend_missing.cpp
  "control|"
  "cuda_without_cuh|USE_CUDA_POLICY|no apply_rope backend for this execution policy in this translation unit\\. For specdec::cuda include <specdec/position/rope\\.cuh>|no apply_rope backend for this execution policy")

# build_tree_batch has the same seam (tree_batch_backend in tree/tree_batch.hpp).
specdec_add_compile_fail_cases(tree_batch_backend ${_cf_dir}/tree_batch_backend_missing.cpp
  "control|"
  "cuda_without_cuh|USE_CUDA_POLICY|no build_tree_batch backend for this execution policy in this translation unit\\. For specdec::cuda include <specdec/tree/tree_batch\\.cuh>|no build_tree_batch backend for this execution policy")

# Element types are checked at compile time: one static_assert sentence per argument
# (detail::check_attention_types, detail::check_merge_types), and no other error (the bodies are
# instantiated only when every type is right). One case per wrong argument; the control compiles.
# (_et_only: every error line is one of these sentences; no '|' since it separates a case's fields.)
set(_et_only "specdec[a-z_:* ]*: [a-z_':, ]+ must ")
specdec_add_compile_fail_cases(attention_element_types ${_cf_dir}/attention_element_types.cpp
  "control|"
  "q_double|Q_DOUBLE|specdec attention: q's element type must be float, specdec::half or specdec::bfloat16|${_et_only}"
  "cuda_float|CUDA_FLOAT|specdec attention: with specdec::cuda, q's element type must be specdec::half or specdec::bfloat16|${_et_only}"
  "cache_half|CACHE_HALF|specdec attention: the cache's value_type must equal q's element type|${_et_only}"
  "spec_k_half|SPEC_K_HALF|specdec attention: spec_k's element type must equal q's element type|${_et_only}"
  "spec_v_half|SPEC_V_HALF|specdec attention: spec_v's element type must equal q's element type|${_et_only}"
  "out_half|OUT_HALF|specdec attention: out's element type must equal q's element type and be non-const|${_et_only}"
  "out_const|OUT_CONST|specdec attention: out's element type must equal q's element type and be non-const|${_et_only}"
  "lse_double|LSE_DOUBLE|specdec attention: lse's element type must be non-const float|${_et_only}"
  "lse_const|LSE_CONST|specdec attention: lse's element type must be non-const float|${_et_only}"
  "indptr_int64|INDPTR_INT64|specdec attention: q_indptr's element type must be std::int32_t|${_et_only}"
  "mask_uint32|MASK_UINT32|specdec attention: the tree mask's element type must be specdec::mask_word|${_et_only}"
  "merge_o_parts_half|MERGE_O_PARTS_HALF|specdec::lse_merge: o_parts' element type must equal out's element type|${_et_only}"
  "merge_lse_parts_double|MERGE_LSE_PARTS_DOUBLE|specdec::lse_merge: lse_parts' element type must be float|${_et_only}"
  "merge_o_b_half|MERGE_O_B_HALF|specdec::lse_merge: o_b's element type must equal out's element type|${_et_only}"
  "merge_lse_a_double|MERGE_LSE_A_DOUBLE|specdec::lse_merge: lse_a's element type must be float|${_et_only}"
  "merge_out_const|MERGE_OUT_CONST|specdec::lse_merge: out's element type must be non-const float, specdec::half or specdec::bfloat16|${_et_only}"
  "merge_lse_out_double|MERGE_LSE_OUT_DOUBLE|specdec::lse_merge: lse_out's element type must be non-const float|${_et_only}"
  "convert_lse_double|CONVERT_LSE_DOUBLE|specdec::convert_lse_\\*: lse's element type must be non-const float|${_et_only}")

# A user's mapping missing a part is rejected where kv_cache<T, Mapping> is instantiated, by
# check_kv_mapping<M>() with a static_assert message that names the part.
specdec_add_compile_fail_cases(kv_mapping ${_cf_dir}/kv_mapping_missing_member.cpp
  "control|"
  "missing_offset|MISSING_OFFSET|kv_mapping: missing member function 'offset\\(int request, int token, int kv_head\\)'|kv_mapping: "
  "missing_length|MISSING_LENGTH|kv_mapping: missing member function 'length\\(int request\\)'|kv_mapping: "
  "not_copyable|NOT_COPYABLE|kv_mapping: the mapping type must be copyable|kv_mapping: ")

# nvcc variant, registered when nvcc is found (with or without the CUDA build): a mapping used from a
# CUDA kernel must mark its members SPECDEC_HOST_DEVICE. Without it nvcc must refuse to compile the
# kernel, with its "calling a __host__ function ... from a __device__ function" error (kv_cache routes
# device-side mapping calls through __device__ functions so that this is an error, not the warning an
# __host__ __device__ caller gets). Plain nvcc flags: no -Werror, as a user would build.
if(CMAKE_CUDA_COMPILER)
  set(SPECDEC_NVCC ${CMAKE_CUDA_COMPILER})
else()
  file(GLOB _cf_cuda_bins /usr/local/cuda/bin /usr/local/cuda-*/bin)
  find_program(SPECDEC_NVCC nvcc HINTS ${_cf_cuda_bins})
endif()
if(SPECDEC_NVCC)
  set(_cf_compiler ${SPECDEC_NVCC})
  set(_cf_mode nvcc)
  specdec_add_compile_fail_cases(nvcc_kv_mapping ${_cf_dir}/kv_mapping_host_only.cu
    "control|"
    "host_only|HOST_ONLY_MAPPING|calling a __host__ function\\(\"my_mapping::[a-z]+\\(int.*\\) const\"\\) from a __[a-z]+__ function")
  set(_cf_compiler ${CMAKE_CXX_COMPILER})
  set(_cf_mode "")
else()
  message(STATUS "specdec: nvcc not found; the nvcc compile-fail cases are not registered")
endif()
