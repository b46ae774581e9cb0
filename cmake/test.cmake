# The test command of the README:   cmake -P cmake/test.cmake
# Installs missing Debian packages (as root; otherwise prints the apt-get line and stops), configures
# build/test with tests, benchmarks and examples, builds it, and runs the whole ctest suite.
# Environment: SPECDEC_JOBS (build jobs), SPECDEC_CUDA (AUTO|ON|OFF).
include(${CMAKE_CURRENT_LIST_DIR}/bootstrap.cmake)
set(_build ${SPECDEC_ROOT}/build/test)
# The demo is compiled here to be checked (test_demo runs its code), for head_dim 64 like the other
# examples (examples/CMakeLists.txt, SPECDEC_DEMO_ALL_HEAD_DIMS); cmake/demo.cmake builds the full one.
specdec_configure_and_build(${_build} -DSPECDEC_BUILD_TESTS=ON -DSPECDEC_BUILD_BENCHMARKS=ON
                            -DSPECDEC_BUILD_EXAMPLES=ON -DSPECDEC_DEMO_ALL_HEAD_DIMS=OFF)
specdec_run("test" ${CMAKE_CTEST_COMMAND} --test-dir ${_build} --output-on-failure -j2)
