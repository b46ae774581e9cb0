# Install tests: build and run tests/install/consumer against a fresh `cmake --install` prefix inside
# the build tree (find_package(specdec CONFIG)), and through add_subdirectory.
foreach(_mode find_package add_subdirectory)
  add_test(NAME install.${_mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${_mode} -DBUILD_DIR=${PROJECT_BINARY_DIR}
                   -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DCONSUMER_DIR=${CMAKE_CURRENT_LIST_DIR}/consumer
                   -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_test/${_mode}
                   "-DGENERATOR=${CMAKE_GENERATOR}" -DCXX=${CMAKE_CXX_COMPILER}
                   -P ${CMAKE_CURRENT_LIST_DIR}/run_install_test.cmake)
  set_tests_properties(install.${_mode} PROPERTIES LABELS install TIMEOUT 600)
endforeach()
