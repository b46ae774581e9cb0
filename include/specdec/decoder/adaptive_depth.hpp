#pragma once
//! \file adaptive_depth.hpp
//! Hardware-aware draft depth: the pieces speculative_batch uses when a request asks for
//! generation_options::adaptive_depth (issue #26 item 4): a draft is worth its cost only while the
//! tokens it is expected to add grow faster than the time it adds. With a constant acceptance alpha,
//! a target whose cost does not grow with the rows and a draft costing c target forwards per token,
//! the ratio below is Leviathan et al.'s expected speedup (1 - alpha^(g+1)) / ((1 - alpha)(g c + 1))
//! of proposal length g, as GLIDE §5.1 states it; here the acceptance is measured per depth and the
//! verification cost per row count, on this machine (a 2-core CPU and an H100 want different trees).
//!
//! Each step, for every request r and each candidate depth d in [0, draft_depth]:
//!   tokens_r(d) = 1 + sum_{i=1..d} prod_{j=1..i} q_r(j)   (expected tokens emitted: accepted + bonus),
//! q_r(j) the running conditional acceptance at depth j (acceptance_estimate: decayed counts of "depth j
//! accepted, given depth j-1 was", shrunk towards the batch's estimate); the step's cost is
//!   c(rows) + v rows + sum_r draft_r(d_r),   rows = sum_r (1 + nodes_r(d_r)),
//! c the measured cost of the target's forward on that many rows (step_cost_curve: calibrated once by
//! timed forwards, then the median of the latest steps at each row count), v the measured
//! verification and commit time per row, nodes_r(d) and draft_r(d) the medians of the tree size and
//! the steady drafting time (a step right after one that drafted) request r (else the batch) had at
//! depth d, plus, for a request that drafted before but not last step, its drafter's catch-up on the
//! tokens since (measured per skipped token, bounded by the draft's first pass over the prompt: a
//! LongSpec draft re-reads at most its window). A source with no steady time yet (one that never
//! drafts twice in a row) is priced by the median of its resumed steps' whole times instead (before
//! its first resumed step, by the catch-up alone). With a
//! drafter of several draft sources (draft/drafter.hpp), all of these estimates are per source, and
//! each step uses those of the source about to draft.
//! choose_depths picks the depths that maximise sum_r tokens_r(d_r) / cost; d = 0 is plain decoding
//! (no draft, one row), so a request falls back to autoregressive decoding whenever speculation does
//! not pay on this machine.
//!
//! Exploration: a request learns nothing about depths it does not run, so each step it sets aside
//! explore_budget of its step time; when the savings cover the expected regret of running one level
//! deeper (or, alternately, shallower: the cost of fewer rows goes stale too), it runs that depth once
//! and spends the savings. With several draft sources the savings and the probes are per source (each
//! step's savings go to the source that planned it, a probe's step included), so every source's
//! estimates keep being refreshed, however often the others probe. The regret counts the seconds the probe adds or saves (a resumed drafter's
//! catch-up included) less the tokens it adds or loses at the plan's rate, so exploring costs at most
//! about explore_budget of the decoding time. What remains is one-time: the first steps before the
//! estimates settle, the draft's first pass over the prompt, and the calibration (stats().calibrate_s;
//! a kept curve skips it).
//!
//! Losslessness is untouched (the depth only changes what is proposed, from information of earlier
//! steps). Greedy outputs are identical to the target's whatever the depths. Sampled outputs keep
//! their exact distribution but are reproducible bit for bit only with the same depth decisions, and
//! those follow measured times: use a fixed depth (adaptive_depth off) where sampled outputs must
//! repeat across runs.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec {

//! Parameters of the adaptive depth control (speculative_batch::set_adaptive_options).
struct adaptive_depth_options {
  //! Each new observation of a depth multiplies its earlier counts by this (forgets old text).
  double decay = 0.95;
  //! Pseudo-observations of the prior behind each conditional acceptance estimate.
  double prior_weight = 2.0;
  //! Prior conditional acceptance at depth 1 before anything was observed (deeper depths inherit the
  //! estimate of the depth above).
  double prior_acceptance = 0.5;
  //! Share of a request's step time set aside for probing a depth other than the chosen one.
  double explore_budget = 0.01;
  //! The running costs (step cost per row count, drafting time and tree size per depth) are the
  //! median of this many latest measurements (one slow step on a busy machine moves no decision).
  //! speculative_batch applies it to its own estimates and to requests added afterwards (set the
  //! options before adding requests); a given curve keeps the window it was made with.
  int cost_window = 9;
  //! Calibration: largest target row count timed (rows 1, 2, 3, 5, 9, 17, ... up to this; larger
  //! steps extrapolate until measured online) and timed forwards per row count (the fastest is kept).
  int calibration_rows = 17;
  int calibration_reps = 2;
  //! Refine the step cost curve from every step's measured time (else the calibrated curve stays).
  bool learn_costs = true;

  //! Throws invalid_argument naming the first bad field.
  void validate(std::string_view fn) const {
    require(decay > 0.0 && decay <= 1.0, fn, "adaptive_depth_options.decay", "in (0, 1]", decay);
    require(prior_weight > 0.0 && std::isfinite(prior_weight), fn, "adaptive_depth_options.prior_weight",
            "a finite value > 0", prior_weight);
    require(prior_acceptance >= 0.0 && prior_acceptance <= 1.0, fn, "adaptive_depth_options.prior_acceptance",
            "in [0, 1]", prior_acceptance);
    require(explore_budget >= 0.0 && explore_budget <= 1.0, fn, "adaptive_depth_options.explore_budget", "in [0, 1]",
            explore_budget);
    require(cost_window >= 1 && cost_window <= 1024, fn, "adaptive_depth_options.cost_window", "in [1, 1024]",
            cost_window);
    require(calibration_rows >= 2 && calibration_rows <= 4096, fn, "adaptive_depth_options.calibration_rows",
            "in [2, 4096]", calibration_rows);
    require(calibration_reps >= 1 && calibration_reps <= 100, fn, "adaptive_depth_options.calibration_reps",
            "in [1, 100]", calibration_reps);
  }
};

//! The median of the latest `window` values (a ring; the median is kept up to date on each add, so
//! reading it is O(1)). Empty until the first add.
class running_median {
 public:
  explicit running_median(int window = 9) : window_(static_cast<std::size_t>(std::max(window, 1))) {}
  void add(double v) {
    if (ring_.size() < window_) ring_.push_back(v);
    else ring_[next_] = v;
    next_ = (next_ + 1) % window_;
    sorted_ = ring_;
    const auto mid = sorted_.begin() + static_cast<std::ptrdiff_t>(sorted_.size() / 2);
    std::nth_element(sorted_.begin(), mid, sorted_.end());
    median_ = *mid;
    if (sorted_.size() % 2 == 0) median_ = 0.5 * (median_ + *std::max_element(sorted_.begin(), mid));
  }
  [[nodiscard]] bool empty() const noexcept { return ring_.empty(); }
  [[nodiscard]] double median() const noexcept { return median_; }

 private:
  std::size_t window_;
  std::size_t next_ = 0;
  std::vector<double> ring_, sorted_;
  double median_ = 0.0;
};

//! The cost in seconds of running the target on `rows` rows (all requests' roots and tree nodes;
//! speculative_batch records its forward): at each measured row count the median of its latest
//! `window` measurements, linear in between, the last segment's slope (at least 0) beyond the largest
//! measured row count, the smallest point's cost below it. Empty until calibrated or given.
//! Text form (to_text / from_text): one "rows seconds" pair per line, so a curve measured once can be
//! kept in a file and handed to the next run (speculative_batch::set_cost_curve) without calibrating.
class step_cost_curve {
 public:
  explicit step_cost_curve(int window = 9) : window_(window) {
    require(window >= 1 && window <= 1024, "specdec::step_cost_curve", "window", "in [1, 1024]", window);
  }
  [[nodiscard]] bool empty() const noexcept { return rows_.empty(); }
  //! Measured row counts.
  [[nodiscard]] int points() const noexcept { return static_cast<int>(rows_.size()); }
  //! The largest row count a curve holds or is asked about.
  static constexpr int max_rows = 1 << 24;

  //! Records a measured cost at `rows` (the point becomes the median of its latest `window`).
  //! O(points) for a new row count, O(log points + window) otherwise.
  void record(int rows, double seconds) {
    constexpr std::string_view fn = "specdec::step_cost_curve::record";
    require(rows >= 1 && rows <= max_rows, fn, "rows", "in [1, 2^24]", rows);
    require(std::isfinite(seconds) && seconds >= 0.0, fn, "seconds", "a finite value >= 0", seconds);
    const auto it = std::lower_bound(rows_.begin(), rows_.end(), rows);
    const auto i = static_cast<std::size_t>(it - rows_.begin());
    if (it == rows_.end() || *it != rows) {
      rows_.insert(it, rows);
      samples_.insert(samples_.begin() + static_cast<std::ptrdiff_t>(i), running_median(window_));
      cost_.insert(cost_.begin() + static_cast<std::ptrdiff_t>(i), 0.0);
    }
    samples_[i].add(seconds);
    cost_[i] = samples_[i].median();
  }

  //! The estimated cost of `rows` rows (see the class comment). Throws when empty or rows < 1.
  //! O(log points).
  [[nodiscard]] double seconds(double rows) const {
    constexpr std::string_view fn = "specdec::step_cost_curve::seconds";
    require(!empty(), fn, "the curve", "at least one measured point (calibrate or set a curve)", "none");
    require(rows >= 1.0 && rows <= max_rows, fn, "rows", "in [1, 2^24]", rows);
    // the first measured row count >= rows
    const auto hi = static_cast<std::size_t>(
        std::lower_bound(rows_.begin(), rows_.end(), rows, [](int r, double x) { return r < x; }) - rows_.begin());
    if (hi < rows_.size() && rows_[hi] == rows) return cost_[hi];  // a measured row count: its own value
    if (hi == 0) return cost_[0];  // below the smallest point
    if (hi == rows_.size()) {      // beyond the largest point: extend the last segment
      const std::size_t lo = hi - 1;
      const double slope = lo == 0 ? 0.0 : std::max(0.0, (cost_[lo] - cost_[lo - 1]) / (rows_[lo] - rows_[lo - 1]));
      // finite whatever the points (a slope near DBL_MAX over 2^24 rows would overflow)
      return std::min(cost_[lo] + slope * (rows - rows_[lo]), std::numeric_limits<double>::max());
    }
    const std::size_t lo = hi - 1;
    // The fraction first: the difference times (rows - rows_[lo]) overflowed to +-inf for costs near
    // DBL_MAX, where the interpolated value itself lies between two finite points.
    return cost_[lo] + (cost_[hi] - cost_[lo]) * ((rows - rows_[lo]) / (rows_[hi] - rows_[lo]));
  }

  //! "rows seconds" per line, in increasing rows.
  [[nodiscard]] std::string to_text() const {
    std::string s;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      char buf[64];
      const auto a = std::to_chars(buf, buf + sizeof buf, rows_[i]);
      *a.ptr = ' ';
      const auto b = std::to_chars(a.ptr + 1, buf + sizeof buf, cost_[i]);
      s.append(buf, b.ptr);
      s += '\n';
    }
    return s;
  }

  //! Parses to_text's form (blank lines ignored; lines in any order) into a curve of the given
  //! window. Throws invalid_argument naming the bad line. O(lines log lines).
  [[nodiscard]] static step_cost_curve from_text(std::string_view text, int window = 9) {
    constexpr std::string_view fn = "specdec::step_cost_curve::from_text";
    step_cost_curve c(window);
    struct point {
      int rows;
      double seconds;
      int line;
    };
    std::vector<point> points;  // recorded once sorted: inserting each in place was quadratic
    int line_no = 0;
    while (!text.empty()) {
      const auto nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string where = "line " + std::to_string(line_no);
      int rows = 0;
      double sec = 0;
      const char* p = line.data();
      const char* end = line.data() + line.size();
      while (p < end && (*p == ' ' || *p == '\t')) ++p;
      const auto a = std::from_chars(p, end, rows);
      require(a.ec == std::errc{} && a.ptr < end && (*a.ptr == ' ' || *a.ptr == '\t'), fn, where,
              "\"rows seconds\"", std::string(line));
      p = a.ptr;
      while (p < end && (*p == ' ' || *p == '\t')) ++p;
      const auto b = std::from_chars(p, end, sec);
      require(b.ec == std::errc{} && std::string_view(b.ptr, static_cast<std::size_t>(end - b.ptr))
                                             .find_first_not_of(" \t\r") == std::string_view::npos,
              fn, where, "\"rows seconds\"", std::string(line));
      require(rows >= 1 && rows <= (1 << 24), fn, where + " rows", "in [1, 2^24]", rows);
      require(std::isfinite(sec) && sec >= 0.0, fn, where + " seconds", "a finite value >= 0", sec);
      points.push_back({rows, sec, line_no});
    }
    std::stable_sort(points.begin(), points.end(), [](const point& a, const point& b) { return a.rows < b.rows; });
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (i > 0 && points[i].rows == points[i - 1].rows) [[unlikely]] {
        const int later = std::max(points[i].line, points[i - 1].line);
        throw_invalid_argument(fn, "line " + std::to_string(later) + " rows", "each row count once", points[i].rows);
      }
      c.record(points[i].rows, points[i].seconds);  // appended: rows increase
    }
    return c;
  }

 private:
  int window_;
  std::vector<int> rows_;                //!< measured row counts, increasing
  std::vector<running_median> samples_;  //!< per measured row count
  std::vector<double> cost_;             //!< their medians
};

//! Decayed counts of conditional acceptance per depth: at depth i, trials = steps whose tree reached
//! depth i with depth i - 1 accepted, successes = those that accepted depth i too.
class acceptance_estimate {
 public:
  //! One verified step: the tree reached `depth` (its deepest path), `accepted` tokens were accepted.
  void record(int depth, int accepted, double decay) {
    constexpr std::string_view fn = "specdec::acceptance_estimate::record";
    require(depth >= 0, fn, "depth", ">= 0", depth);
    require(accepted >= 0 && accepted <= depth, fn, "accepted", "in [0, depth = " + std::to_string(depth) + "]", accepted);
    require(decay > 0.0 && decay <= 1.0, fn, "decay", "in (0, 1]", decay);
    if (trials_.size() < static_cast<std::size_t>(depth) + 1) {
      trials_.resize(static_cast<std::size_t>(depth) + 1, 0.0);
      successes_.resize(static_cast<std::size_t>(depth) + 1, 0.0);
    }
    for (int i = 1; i <= std::min(depth, accepted + 1); ++i) {
      auto& t = trials_[static_cast<std::size_t>(i)];
      auto& s = successes_[static_cast<std::size_t>(i)];
      t = decay * t + 1.0;
      s = decay * s + (accepted >= i ? 1.0 : 0.0);
    }
  }
  [[nodiscard]] double trials(int i) const noexcept {
    return i >= 1 && static_cast<std::size_t>(i) < trials_.size() ? trials_[static_cast<std::size_t>(i)] : 0.0;
  }
  [[nodiscard]] double successes(int i) const noexcept {
    return i >= 1 && static_cast<std::size_t>(i) < successes_.size() ? successes_[static_cast<std::size_t>(i)] : 0.0;
  }
  //! q(i) for i = 1..depth: the counts shrunk towards `prior` (may be null) with prior_weight
  //! pseudo-trials; where the prior has not seen depth i either, towards this estimate's q(i - 1)
  //! (q(0) = prior_acceptance).
  void conditional(int depth, const acceptance_estimate* prior, const adaptive_depth_options& o,
                   std::vector<double>& q) const {
    std::vector<double> pq;
    if (prior != nullptr) prior->conditional(depth, nullptr, o, pq);
    conditional(depth, prior, pq, o, q);
  }
  //! The same with the prior's own q (its conditional(>= depth, nullptr, ...)) computed once by the
  //! caller, for many estimates against one prior.
  void conditional(int depth, const acceptance_estimate* prior, std::span<const double> prior_q,
                   const adaptive_depth_options& o, std::vector<double>& q) const {
    require(prior == nullptr || prior_q.size() > static_cast<std::size_t>(depth),
            "specdec::acceptance_estimate::conditional", "prior_q", "the prior's q up to depth", prior_q.size());
    q.assign(static_cast<std::size_t>(depth) + 1, 1.0);
    double above = o.prior_acceptance;
    for (int i = 1; i <= depth; ++i) {
      const double toward = prior != nullptr && prior->trials(i) > 0.0 ? prior_q[static_cast<std::size_t>(i)] : above;
      q[static_cast<std::size_t>(i)] = (successes(i) + o.prior_weight * toward) / (trials(i) + o.prior_weight);
      above = q[static_cast<std::size_t>(i)];
    }
  }

 private:
  std::vector<double> trials_, successes_;  //!< [depth]
};

//! A running median per depth (tree sizes, drafting times) with a fallback for depths not yet seen.
class per_depth_median {
 public:
  explicit per_depth_median(int window = 9) : window_(window) {}
  void record(int depth, double value) {
    require(depth >= 0, "specdec::per_depth_median::record", "depth", ">= 0", depth);
    require(std::isfinite(value), "specdec::per_depth_median::record", "value", "a finite value", value);
    const auto i = static_cast<std::size_t>(depth);
    if (value_.size() <= i) value_.resize(i + 1, running_median(window_));
    value_[i].add(value);
  }
  [[nodiscard]] bool seen(int depth) const noexcept {
    return depth >= 0 && static_cast<std::size_t>(depth) < value_.size() && !value_[static_cast<std::size_t>(depth)].empty();
  }
  //! The median at `depth`; unseen: scaled from the nearest seen depth j > 0 (value(j) * depth / j),
  //! else `fallback`.
  [[nodiscard]] double at(int depth, double fallback) const noexcept {
    if (seen(depth)) return value_[static_cast<std::size_t>(depth)].median();
    int best = -1;
    for (int j = 1; j < static_cast<int>(value_.size()); ++j)
      if (seen(j) && (best < 0 || std::abs(j - depth) < std::abs(best - depth))) best = j;
    return best < 0 ? fallback : value_[static_cast<std::size_t>(best)].median() * depth / best;
  }

 private:
  int window_;
  std::vector<running_median> value_;
};

//! One request's options for choose_depths: for each candidate depth d in [0, tokens.size()), the
//! expected tokens it emits, its expected tree size and its expected drafting time. A request with a
//! fixed depth has one candidate.
struct depth_choice_input {
  std::span<const double> tokens;  //!< tokens[0] = 1 (plain decoding) for adaptive requests
  std::span<const double> nodes;   //!< same size
  std::span<const double> draft_s; //!< same size
};

//! The depths maximising sum_r tokens_r(d_r) / (step(sum_r (1 + nodes_r(d_r))) + sum_r draft_r(d_r)),
//! step(rows) = cost.seconds(rows) + per_row * rows (per_row: the verification and commit time per
//! row, when the curve holds the target's forward only): from all zeros, repeatedly the single change
//! of one request's depth that raises the ratio most, until none does (exact for one request; for a
//! batch a coordinate ascent). out[r] = the chosen index; returns the chosen ratio (expected tokens
//! per second; 0 for no request). Inputs must be finite and >= 0. O(iterations x sum_r candidates_r).
inline double choose_depths(std::span<const depth_choice_input> in, const step_cost_curve& cost, std::vector<int>& out,
                            double per_row = 0.0) {
  constexpr std::string_view fn = "specdec::choose_depths";
  require(std::isfinite(per_row) && per_row >= 0.0, fn, "per_row", "a finite value >= 0", per_row);
  out.assign(in.size(), 0);
  double tokens = 0, rows = 0, draft = 0;
  for (std::size_t r = 0; r < in.size(); ++r) {
    const auto& c = in[r];
    const std::string arg = "input[" + std::to_string(r) + "]";
    require(!c.tokens.empty() && c.nodes.size() == c.tokens.size() && c.draft_s.size() == c.tokens.size(), fn, arg,
            "tokens, nodes and draft_s of one non-zero size", c.tokens.size());
    for (std::size_t d = 0; d < c.tokens.size(); ++d)
      require(std::isfinite(c.tokens[d]) && c.tokens[d] >= 0 && std::isfinite(c.nodes[d]) && c.nodes[d] >= 0 &&
                  std::isfinite(c.draft_s[d]) && c.draft_s[d] >= 0,
              fn, arg, "finite tokens, nodes and draft_s >= 0", "a bad value at depth " + std::to_string(d));
    tokens += c.tokens[0], rows += 1.0 + c.nodes[0], draft += c.draft_s[0];
  }
  if (in.empty()) return 0.0;
  // a step takes at least a nanosecond, so a curve of zeros cannot make every ratio infinite
  const auto ratio = [&](double t, double n, double s) {
    const double r = std::clamp(n, 1.0, static_cast<double>(step_cost_curve::max_rows));
    return t / std::max(cost.seconds(r) + per_row * r + s, 1e-9);
  };
  double best = ratio(tokens, rows, draft);
  for (std::size_t iter = 0; iter < 64 * in.size(); ++iter) {
    std::size_t br = in.size();
    int bd = 0;
    double bratio = best;
    for (std::size_t r = 0; r < in.size(); ++r) {
      const auto& c = in[r];
      const auto cur = static_cast<std::size_t>(out[r]);
      for (std::size_t d = 0; d < c.tokens.size(); ++d) {
        if (d == cur) continue;
        const double q = ratio(tokens + c.tokens[d] - c.tokens[cur], rows + c.nodes[d] - c.nodes[cur],
                               draft + c.draft_s[d] - c.draft_s[cur]);
        if (q > bratio * (1.0 + 1e-9)) bratio = q, br = r, bd = static_cast<int>(d);
      }
    }
    if (br == in.size()) break;
    const auto& c = in[br];
    const auto cur = static_cast<std::size_t>(out[br]);
    tokens += c.tokens[static_cast<std::size_t>(bd)] - c.tokens[cur];
    rows += c.nodes[static_cast<std::size_t>(bd)] - c.nodes[cur];
    draft += c.draft_s[static_cast<std::size_t>(bd)] - c.draft_s[cur];
    out[br] = bd;
    best = bratio;
  }
  return best;
}

//! Expected tokens of depths 0..q.size()-1 from conditional acceptances q (q[0] unused):
//! tokens[d] = 1 + sum_{i<=d} prod_{j<=i} q[j].
inline void expected_tokens(std::span<const double> q, std::vector<double>& tokens) {
  tokens.assign(q.size(), 1.0);
  double reach = 1.0;
  for (std::size_t d = 1; d < q.size(); ++d) {
    reach *= q[d];
    tokens[d] = tokens[d - 1] + reach;
  }
}

}  // namespace specdec
