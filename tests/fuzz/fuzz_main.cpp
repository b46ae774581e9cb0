// The one specdec fuzz executable: every target registers itself (SPECDEC_FUZZ_TARGET) and
// -target=NAME (or SPECDEC_FUZZ_TARGET=NAME) picks the one this process runs. One executable keeps
// CI's build to one link of the sanitizer runtime; the target files still compile in parallel.
// Own flags, removed before libFuzzer parses the rest, and passed on through the environment
// (SPECDEC_FUZZ_TARGET, SPECDEC_FUZZ_OPEN_FINDINGS) to the processes -merge and -fork start:
//   -target=NAME        the target to run (-target=list prints the names)
//   -open_findings=1    stop steering around the open findings (findings/<target>/ then reproduce);
//   -open_findings=ID   stop steering around that one only (ID = <target>/<name>, its file's path)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string_view>
#include <typeinfo>

#include "fuzz_util.hpp"
#include "specdec/core/error.hpp"

namespace specdec_fuzz {

std::vector<target>& registry() {
  static std::vector<target> all;
  return all;
}

namespace {
const target* selected = nullptr;
std::string open_findings = "0";  // "0": steer around all, "1": around none, else: all but this id

[[noreturn]] void usage(std::string_view why) {
  std::fprintf(stderr, "specdec_fuzz: %.*s\nusage: specdec_fuzz -target=NAME [libFuzzer flags] [corpus dirs]\ntargets:\n",
               static_cast<int>(why.size()), why.data());
  for (const auto& t : registry())
    std::fprintf(stderr, "  %-24.*s %.*s\n", static_cast<int>(t.name.size()), t.name.data(),
                 static_cast<int>(t.what.size()), t.what.data());
  std::exit(2);
}
}  // namespace

bool avoid_open_finding(std::string_view id) { return open_findings == "0" || (open_findings != "1" && open_findings != id); }

}  // namespace specdec_fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace specdec_fuzz;
  std::string_view name;
  if (const char* env = std::getenv("SPECDEC_FUZZ_TARGET")) name = env;
  if (const char* env = std::getenv("SPECDEC_FUZZ_OPEN_FINDINGS")) open_findings = env;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view a = (*argv)[i];
    if (a.starts_with("-target=")) {
      name = a.substr(8);
    } else if (a.starts_with("-open_findings=")) {
      open_findings = std::string(a.substr(15));
    } else {
      (*argv)[kept++] = (*argv)[i];
    }
  }
  *argc = kept;
  if (name == "list") {
    for (const auto& t : registry()) std::printf("%.*s\n", static_cast<int>(t.name.size()), t.name.data());
    std::exit(0);
  }
  if (name.empty()) usage("no target given");
  for (const auto& t : registry())
    if (t.name == name) selected = &t;
  if (!selected) usage("unknown target");
  ::setenv("SPECDEC_FUZZ_TARGET", std::string(name).c_str(), 1);
  ::setenv("SPECDEC_FUZZ_OPEN_FINDINGS", open_findings.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    specdec_fuzz::selected->run(data, size);
  } catch (const specdec::invalid_argument&) {
    // the documented way to refuse an input
  } catch (const std::exception& e) {
    specdec_fuzz::finding(std::string("an exception other than specdec::invalid_argument escaped: ") +
                          typeid(e).name() + ": " + e.what());
  }
  return 0;
}
