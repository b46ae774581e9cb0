# Shared by cmake/test.cmake and cmake/demo.cmake (script mode): checks the Debian packages specdec's
# build needs and installs the missing ones when run as root; otherwise prints the exact apt-get
# command and stops with a non-zero status. Also defines specdec_run() and the job count.
cmake_minimum_required(VERSION 3.25)
get_filename_component(SPECDEC_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# Debian packages: compiler, build tool, and the test/benchmark/interop dependencies.
set(SPECDEC_DEB_PACKAGES catch2 libbenchmark-dev libdlpack-dev cmake g++ make)

function(specdec_missing_packages out)
  set(missing)
  find_program(_dpkg_query dpkg-query)
  if(NOT _dpkg_query)
    # Not a Debian system: check for the files instead and leave installing to the user.
    foreach(f /usr/include/catch2/catch.hpp /usr/include/benchmark/benchmark.h /usr/include/dlpack/dlpack.h)
      if(NOT EXISTS ${f})
        message(FATAL_ERROR "specdec: ${f} not found and this is not a Debian system: install Catch2 v2, "
                            "Google Benchmark and the DLPack headers with your package manager.")
      endif()
    endforeach()
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  foreach(p IN LISTS SPECDEC_DEB_PACKAGES)
    execute_process(COMMAND ${_dpkg_query} -W -f=\${Status} ${p} OUTPUT_VARIABLE st ERROR_QUIET RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT st MATCHES "install ok installed")
      list(APPEND missing ${p})
    endif()
  endforeach()
  set(${out} "${missing}" PARENT_SCOPE)
endfunction()

specdec_missing_packages(_missing)
if(_missing)
  list(JOIN _missing " " _missing_str)
  set(_cmd "apt-get update && apt-get install -y ${_missing_str}")
  execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _uid STREQUAL "0")
    message(FATAL_ERROR "specdec: missing Debian packages: ${_missing_str}\n"
                        "Install them as root, then run this command again:\n"
                        "  sudo sh -c '${_cmd}'\n")
  endif()
  message(STATUS "specdec: installing missing Debian packages: ${_missing_str}")
  set(ENV{DEBIAN_FRONTEND} noninteractive)
  foreach(args "update" "install;-y;--no-install-recommends;${_missing}")
    execute_process(COMMAND apt-get ${args} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "specdec: 'apt-get ${args}' failed (exit ${rc})")
    endif()
  endforeach()
endif()

# Parallel build jobs: SPECDEC_JOBS from the environment, else every logical core.
if(DEFINED ENV{SPECDEC_JOBS})
  set(SPECDEC_JOBS $ENV{SPECDEC_JOBS})
else()
  cmake_host_system_information(RESULT SPECDEC_JOBS QUERY NUMBER_OF_LOGICAL_CORES)
endif()

# Runs a command with its output streamed; stops the script when it fails.
function(specdec_run what)
  string(REPLACE ";" " " _shown "${ARGN}")
  message(STATUS "specdec: ${what}: ${_shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "specdec: ${what} failed (exit ${rc})")
  endif()
endfunction()

# Configures (once) and builds a build directory of specdec with the given extra cache options.
# SPECDEC_CUDA in the environment (AUTO|ON|OFF) is passed through; the default is AUTO.
function(specdec_configure_and_build dir)
  set(_cuda AUTO)
  if(DEFINED ENV{SPECDEC_CUDA})
    set(_cuda $ENV{SPECDEC_CUDA})
  endif()
  # Release at -O2 (not CMake's -O3): the optimization level the team develops and tests with
  # (RelWithDebInfo) without the debug info; GCC 12 gives -O3-only false positives (-Warray-bounds in
  # std::vector::insert) that -Werror turns into build failures. Benchmarks add -O3 -march=native.
  specdec_run("configure" ${CMAKE_COMMAND} -S ${SPECDEC_ROOT} -B ${dir} -DCMAKE_BUILD_TYPE=Release
              "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DSPECDEC_CUDA=${_cuda} ${ARGN})
  specdec_run("build" ${CMAKE_COMMAND} --build ${dir} --parallel ${SPECDEC_JOBS})
endfunction()
