# Decides whether the CUDA backend's tests and benchmarks are built (SPECDEC_CUDA = AUTO|ON|OFF).
# The headers themselves need no configuration: .cuh files compile wherever nvcc does.
set(SPECDEC_HAVE_CUDA OFF)
if(NOT SPECDEC_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(_specdec_nvcc nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(_specdec_nvcc)
      set(CMAKE_CUDA_COMPILER ${_specdec_nvcc} CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (default: sm_90, Hopper)")
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates C++20 support in its NVIDIA-CUDA module (added in 3.26 for nvcc >= 12):
    # teach it the flag so targets requiring cxx_std_20 / CUDA_STANDARD 20 configure.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(SPECDEC_HAVE_CUDA ON)
  elseif(SPECDEC_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPECDEC_CUDA=ON but no CUDA compiler (nvcc) was found; install the CUDA Toolkit or use -DSPECDEC_CUDA=AUTO|OFF")
  endif()
endif()
message(STATUS "specdec: CUDA backend ${SPECDEC_HAVE_CUDA} (SPECDEC_CUDA=${SPECDEC_CUDA})")

if(SPECDEC_HAVE_CUDA)
  # The device code of the CUDA tests and the CUDA examples (SPECDEC_CUDA_DEVICE_CODE: FULL or CHECK,
  # read by tests/ and examples/). Where no GPU will run it, compiling it fully is wasted: on a 2-core EPYC,
  # cicc and ptxas took 340 and 250 of the 650 s that test_attention_hybrid.cu cost (nvcc --time).
  # CHECK compiles it as far as the compiler's diagnostics go -- the front end and NVVM at -O0, to
  # PTX for the first architecture's virtual target, no ptxas -- so every kernel still compiles under
  # -Werror and the [nogpu] host tests run, and the executables refuse to run their GPU tests (exit
  # 77, skipped; cuda_catch_main.cpp). FULL builds SASS for CMAKE_CUDA_ARCHITECTURES, optimized, as
  # a GPU session needs (benchmarks/cuda/gpu_session.sh; RESULTS.md "CUDA" builds with FULL on a
  # machine without a GPU and carries the binaries). AUTO: FULL when nvidia-smi lists a GPU at
  # configure time, else CHECK. The benchmarks are always built FULL: their kernels still go
  # through ptxas in every build.
  set(SPECDEC_CUDA_TEST_DEVICE_CODE AUTO CACHE STRING "Device code of the CUDA tests: AUTO, FULL or CHECK (unoptimized PTX, diagnostics only)")
  set_property(CACHE SPECDEC_CUDA_TEST_DEVICE_CODE PROPERTY STRINGS AUTO FULL CHECK)
  set(SPECDEC_CUDA_DEVICE_CODE ${SPECDEC_CUDA_TEST_DEVICE_CODE})
  if(SPECDEC_CUDA_DEVICE_CODE STREQUAL "AUTO")
    set(SPECDEC_CUDA_DEVICE_CODE CHECK)
    find_program(SPECDEC_NVIDIA_SMI nvidia-smi)
    if(SPECDEC_NVIDIA_SMI)
      execute_process(COMMAND ${SPECDEC_NVIDIA_SMI} -L RESULT_VARIABLE _rc OUTPUT_VARIABLE _gpus ERROR_QUIET TIMEOUT 30)
      if(_rc EQUAL 0 AND _gpus MATCHES "GPU [0-9]")
        set(SPECDEC_CUDA_DEVICE_CODE FULL)
      endif()
    endif()
  elseif(NOT SPECDEC_CUDA_DEVICE_CODE MATCHES "^(FULL|CHECK)$")
    message(FATAL_ERROR "SPECDEC_CUDA_TEST_DEVICE_CODE must be AUTO, FULL or CHECK, not '${SPECDEC_CUDA_DEVICE_CODE}'")
  endif()
  message(STATUS "specdec: CUDA tests' and examples' device code: ${SPECDEC_CUDA_DEVICE_CODE} (SPECDEC_CUDA_TEST_DEVICE_CODE=${SPECDEC_CUDA_TEST_DEVICE_CODE})")
  # The first architecture's virtual target: CHECK's device code (and the CUDA header tests').
  list(GET CMAKE_CUDA_ARCHITECTURES 0 SPECDEC_CUDA_FIRST_ARCH)
  string(REGEX REPLACE "-(real|virtual)$" "" SPECDEC_CUDA_FIRST_ARCH "${SPECDEC_CUDA_FIRST_ARCH}")
  # specdec_cuda_device_code(<target>): the target's device code as SPECDEC_CUDA_DEVICE_CODE says
  # (CHECK: PTX for the first architecture's virtual target, NVVM at -O0; FULL: nothing to change).
  function(specdec_cuda_device_code target)
    if(SPECDEC_CUDA_DEVICE_CODE STREQUAL "CHECK")
      set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES ${SPECDEC_CUDA_FIRST_ARCH}-virtual)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcicc=-O0>)
    endif()
  endfunction()
endif()
