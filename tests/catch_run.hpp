// The Catch2 session behind the test mains (catch_main.cpp, cuda/cuda_catch_main.cpp), compiled once
// in catch_impl.cpp: Catch2 v2's implementation is a single header whose runner part takes about as
// long to compile as a test file, and Catch::Session is declared only where it is compiled.
#pragma once

namespace specdec_test {

//! Runs the test cases that argc/argv select; when only_tests is not null, only those of them that the
//! test spec only_tests selects too (e.g. "[nogpu]"; a command line without a test spec selects all).
//! Catch2 ANDs it with the last comma-separated alternative of the command line's spec only: keep
//! such specs to one alternative (ctest passes a file tag or nothing). Returns
//! what Catch::Session::run returns: the number of failed assertions (capped), or a non-zero status
//! for a bad command line.
int run_catch(int argc, char** argv, const char* only_tests = nullptr);

}  // namespace specdec_test
