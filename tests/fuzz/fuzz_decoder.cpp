// Fuzz target for the adaptive depth's inputs that can come from outside (decoder/adaptive_depth.hpp):
// a step cost curve's text form, as a user's cache file hands it to speculative_batch::set_cost_curve.
// A parsed curve must print back to text that parses to the same curve, give a finite cost >= 0 at
// every row count, equal to a measured point where there is one, and feed choose_depths a choice.
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/decoder/adaptive_depth.hpp"

SPECDEC_FUZZ_TARGET(cost_curve, "step_cost_curve::from_text, to_text round trip, seconds, choose_depths") {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = specdec::step_cost_curve::from_text(text);
  const std::string printed = c.to_text();
  specdec::step_cost_curve d;
  try {
    d = specdec::step_cost_curve::from_text(printed);
  } catch (const specdec::invalid_argument& e) {
    specdec_fuzz::finding(std::string("to_text of a parsed curve does not parse: ") + e.what());
  }
  FUZZ_CHECK(d.to_text() == printed, "round trip changed the curve:\n" + printed + "->\n" + d.to_text());
  FUZZ_CHECK(d.points() == c.points(), "round trip changed the number of points");
  if (c.empty()) return;
  for (double rows : {1.0, 1.5, 2.0, 3.0, 17.0, 1000.0, 16777216.0}) {
    const double s = c.seconds(rows);
    FUZZ_CHECK(std::isfinite(s) && s >= 0.0, "seconds(" + std::to_string(rows) + ") = " + std::to_string(s));
    FUZZ_CHECK(s == d.seconds(rows), "the reparsed curve costs rows differently");
  }
  // a measured point is its own value (one measurement per row count in a parsed curve)
  std::size_t line_start = 0;
  while (line_start < printed.size()) {
    const auto nl = printed.find('\n', line_start);
    const std::string line = printed.substr(line_start, nl - line_start);
    line_start = nl + 1;
    const auto sp = line.find(' ');
    double rows = 0, sec = 0;  // from_chars: std::stod rejects denormals, which the curve keeps
    std::from_chars(line.data(), line.data() + sp, rows);
    std::from_chars(line.data() + sp + 1, line.data() + line.size(), sec);
    FUZZ_CHECK(c.seconds(rows) == sec, "seconds at a measured row count != its value: " + line);
  }
  // choose_depths over it: one request, depths 0..3, a chain's nodes, no draft cost
  const std::vector<double> tokens{1.0, 1.5, 1.75, 1.875}, nodes{0, 1, 2, 3}, draft{0, 0, 0, 0};
  std::vector<int> got;
  const double rate = specdec::choose_depths(std::vector<specdec::depth_choice_input>{{tokens, nodes, draft}}, c, got);
  FUZZ_CHECK(got.size() == 1 && got[0] >= 0 && got[0] <= 3, "choose_depths chose no depth in range");
  FUZZ_CHECK(std::isfinite(rate) && rate > 0.0, "choose_depths rate " + std::to_string(rate));
}
