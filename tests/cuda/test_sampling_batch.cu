// process_logits_batch(cuda{}) and logits_to_probs_batch(cuda{}) (sampling/logits_processor.cuh)
// against their host backends, bit for bit: random batches of rows (V from 1 to 128K + 3; ties,
// masked tokens, values near FLT_MAX, nearly flat rows) and parameters (temperature 0 and 1, tiny
// temperatures, top-k, top-p, min-p, eta, several at once); a bad entry or row reported in status and
// left as it was while the other rows are processed; in place and out of place probabilities; graph
// replay; host memory refused before any CUDA call. With a penalty_context: random committed contexts
// (up to 5000 tokens) and trees, repetition and contextual penalties with every other step, against
// the host backend (itself tested against process_tree_logits); a malformed context or a row the
// penalties empty reported and left as it was. The host side is this file's host code, built for
// x86-64-v3 where the machine runs it (tests/CMakeLists.txt): its weights are fast_exp_fused's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "sampling/penalty_test_util.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/sampling/penalty_context.hpp"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

constexpr float sb_ninf = -std::numeric_limits<float>::infinity();

std::vector<float> sb_row(std::int64_t v, specdec::philox_stream& rng, int kind) {
  std::vector<float> r(static_cast<std::size_t>(v));
  for (auto& x : r) {
    const float u = 2.0f * rng.uniform() - 1.0f;
    switch (kind % 5) {
      case 0: x = 8.0f * u; break;
      case 1: x = std::round(4.0f * u); break;
      case 2: x = u * 3.0e38f; break;
      case 3: x = rng.below(3) == 0 ? sb_ninf : 20.0f * u; break;
      default: x = 1e-3f * u; break;
    }
  }
  r[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)))] = 1.0f;  // a logit above -inf
  return r;
}

specdec::sampling_params sb_params(specdec::philox_stream& rng, std::int64_t v) {
  specdec::sampling_params p;
  specdec_test::add_random_processors(p, rng, v);
  return p;
}

bool sb_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

//! The host's processing of the rows (process_logits_batch(host)).
std::vector<float> sb_host_process(std::vector<float> logits, std::int64_t rows, std::int64_t v,
                                   const std::vector<specdec::sampling_params>& params,
                                   const std::vector<std::int32_t>& row_params) {
  std::vector<std::int32_t> st(3);
  specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                specdec::make_view<1>(params.data(), {static_cast<std::int64_t>(params.size())}),
                                specdec::make_view<1>(row_params.data(), {rows}), specdec::make_view<1>(st.data(), {3}));
  return logits;
}

//! Whether this file's host code computes the FMA level's weights, the device's (tests/CMakeLists.txt
//! builds the CUDA tests' host half for x86-64-v3 where the machine runs it); the comparisons are
//! skipped, with a warning, where it does not.
bool sb_host_has_fma() { return SPECDEC_NATIVE_SIMD_FMA != 0; }

void sb_device_process(device_buffer<float>& logits, std::int64_t rows, std::int64_t v,
                       const device_buffer<specdec::sampling_params>& params, const device_buffer<std::int32_t>& row_params,
                       device_buffer<std::int32_t>& status, cudaStream_t stream = nullptr) {
  specdec::process_logits_batch(specdec::cuda{.stream = stream},
                                specdec::make_view<2>(logits.data(), {rows, v}, memory_space::device), dv(params),
                                dv(row_params), dv(status));
}

}  // namespace

TEST_CASE("cuda process_logits_batch equals the host backend bit for bit", "[cuda][sampling]") {
  if (!sb_host_has_fma()) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  specdec::philox_stream rng(41, 0);
  const bool small = specdec_test::sanitizer_sized();
  for (const std::int64_t v : {1, 2, 33, 1000, 32000, 131075}) {
    if (small && v > 32000) continue;
    const std::int64_t rows = v > 32000 ? 12 : 40;
    const int P = 8;
    for (int round = 0; round < 3; ++round) {
      std::vector<specdec::sampling_params> params;
      for (int e = 0; e < P; ++e) params.push_back(sb_params(rng, v));
      std::vector<std::int32_t> row_params;
      std::vector<float> logits;
      for (std::int64_t r = 0; r < rows; ++r) {
        row_params.push_back(static_cast<std::int32_t>(rng.below(P)));
        auto row = sb_row(v, rng, static_cast<int>(r));
        if (r % 7 == 6 && v >= 3) {  // a maximum of both zeros: temperature's shifted path must not depend on which
          std::fill(row.begin(), row.end(), -1e30f);
          row[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)))] = -0.0f;
          row[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)))] = 0.0f;
        }
        logits.insert(logits.end(), row.begin(), row.end());
      }
      const auto want = sb_host_process(logits, rows, v, params, row_params);
      device_buffer<float> dl(logits);
      device_buffer<specdec::sampling_params> dp(params);
      device_buffer<std::int32_t> drp(row_params), st(std::vector<std::int32_t>{5, 5, 5});
      sb_device_process(dl, rows, v, dp, drp, st);
      specdec_test::sync_check("process_logits_batch");
      INFO("V " << v << " round " << round);
      CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
      const auto got = dl.download();
      CHECK(sb_same_bits(got, want));
      if (!sb_same_bits(got, want))
        for (std::int64_t r = 0; r < rows; ++r)
          if (std::memcmp(got.data() + r * v, want.data() + r * v, static_cast<std::size_t>(v) * 4) != 0) {
            const auto& p = params[static_cast<std::size_t>(row_params[static_cast<std::size_t>(r)])];
            UNSCOPED_INFO("row " << r << " differs: t " << p.temperature << " k " << p.top_k << " p " << p.top_p << " min_p "
                                 << p.min_p << " eta " << p.eta_epsilon);
          }
    }
  }
}

TEST_CASE("cuda process_logits_batch reports a bad entry or row and leaves it as it was", "[cuda][sampling]") {
  if (!sb_host_has_fma()) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  const std::int64_t rows = 6, v = 500;
  specdec::philox_stream rng(3, 3);
  std::vector<float> logits;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = sb_row(v, rng, 0);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<specdec::sampling_params> params(3);
  params[0].top_p = 0.8f;
  params[1].repetition_penalty = 1.3f;  // refused: the batch form has no context
  params[2].temperature = 0.7f;
  std::vector<std::int32_t> row_params{0, 2, 1, 0, 7, 2};  // row 2: a penalty; row 4: entry 7 of 3
  logits[static_cast<std::size_t>(5 * v + 9)] = std::numeric_limits<float>::quiet_NaN();  // row 5: NaN
  device_buffer<float> dl(logits);
  device_buffer<specdec::sampling_params> dp(params);
  device_buffer<std::int32_t> drp(row_params), st(std::vector<std::int32_t>{5, 5, 5});
  sb_device_process(dl, rows, v, dp, drp, st);
  specdec_test::sync_check("process_logits_batch (bad)");
  const auto s = st.download();
  CHECK(((s[0] == static_cast<std::int32_t>(specdec::device_error::params) && (s[2] == 2 || s[2] == 4)) ||
         (s[0] == static_cast<std::int32_t>(specdec::device_error::row) && s[1] == -1 && s[2] == 5)));
  const auto got = dl.download();
  // the bad rows as they were; the others as the host processes them
  auto good_params = row_params;
  good_params[2] = 0, good_params[4] = 0, good_params[5] = 0;
  auto clean = logits;
  clean[static_cast<std::size_t>(5 * v + 9)] = 0.0f;
  const auto want = sb_host_process(clean, rows, v, params, good_params);
  for (const std::int64_t r : {0, 1, 3})
    CHECK(std::memcmp(got.data() + r * v, want.data() + r * v, static_cast<std::size_t>(v) * 4) == 0);
  for (const std::int64_t r : {2, 4, 5})
    CHECK(std::memcmp(got.data() + r * v, logits.data() + r * v, static_cast<std::size_t>(v) * 4) == 0);
}

TEST_CASE("cuda logits_to_probs_batch equals the host backend, in place and not", "[cuda][sampling]") {
  if (!sb_host_has_fma()) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  specdec::philox_stream rng(8, 8);
  for (const std::int64_t v : {1, 16, 257, 50000}) {
    const std::int64_t rows = 9;
    std::vector<float> logits;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto row = sb_row(v, rng, static_cast<int>(r));
      logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<float> want(logits.size());
    std::vector<std::int32_t> hst(3);
    specdec::logits_to_probs_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                   specdec::make_view<2>(want.data(), {rows, v}), specdec::make_view<1>(hst.data(), {3}));
    device_buffer<float> dl(logits), dpr(std::vector<float>(logits.size(), -1.0f));
    device_buffer<std::int32_t> st(std::vector<std::int32_t>{5, 5, 5});
    specdec::logits_to_probs_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                   specdec::make_view<2>(dpr.data(), {rows, v}, memory_space::device), dv(st));
    specdec_test::sync_check("logits_to_probs_batch");
    INFO("V " << v);
    CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
    CHECK(sb_same_bits(dpr.download(), want));
    specdec::logits_to_probs_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                   specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device), dv(st));
    specdec_test::sync_check("logits_to_probs_batch (in place)");
    CHECK(sb_same_bits(dl.download(), want));
  }
}

TEST_CASE("cuda process_logits_batch is captured in a CUDA graph and replays", "[cuda][sampling]") {
  if (!sb_host_has_fma()) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  const std::int64_t rows = 16, v = 32000;
  specdec::philox_stream rng(77, 0);
  std::vector<specdec::sampling_params> params(2);
  params[0].temperature = 0.8f, params[0].top_p = 0.9f, params[0].top_k = 50;
  params[1].temperature = 1.2f, params[1].min_p = 0.05f;
  std::vector<std::int32_t> row_params;
  for (std::int64_t r = 0; r < rows; ++r) row_params.push_back(static_cast<std::int32_t>(r % 2));
  std::vector<float> logits;
  device_buffer<float> dl(static_cast<std::size_t>(rows * v));
  device_buffer<specdec::sampling_params> dp(params);
  device_buffer<std::int32_t> drp(row_params), st(std::vector<std::int32_t>{5, 5, 5});
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { sb_device_process(dl, rows, v, dp, drp, st, s); },
      [&] {
        logits.clear();
        for (std::int64_t r = 0; r < rows; ++r) {
          const auto row = sb_row(v, rng, static_cast<int>(r));
          logits.insert(logits.end(), row.begin(), row.end());
        }
        dl.upload(logits);
      },
      [&] { CHECK(sb_same_bits(dl.download(), sb_host_process(logits, rows, v, params, row_params))); });
}

namespace {

//! A random batch with penalties: 1-5 requests, each with its sampling_params (a repetition and a
//! contextual penalty with every other step, windows 0-19 or 1024), a committed context of up to
//! `max_context` tokens and a tree of up to 16 nodes (penalty_context_builder::add_tree_rows), and
//! a random row per tree row.
struct sb_penalized_batch {
  int requests = 0;
  std::vector<specdec::sampling_params> params;
  specdec::penalty_context_builder b;
  std::vector<std::int32_t> row_params;
  std::vector<float> logits;
  sb_penalized_batch(specdec::philox_stream& rng, std::int64_t v, std::uint32_t max_context = 5000)
      : b(static_cast<std::int32_t>(v)) {
    requests = 1 + static_cast<int>(rng.below(5));
    for (int e = 0; e < requests; ++e) {
      auto p = sb_params(rng, v);
      specdec_test::add_random_penalties(p, rng, 3, 20);
      params.push_back(p);
    }
    std::vector<std::int32_t> committed, tokens, parents;
    for (int q = 0; q < requests; ++q) {
      committed.clear(), tokens.clear(), parents.clear();
      const auto len = rng.below(4) == 0 ? 0u : rng.below(max_context);
      for (std::uint32_t j = 0; j < len; ++j) committed.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))));
      const int n = static_cast<int>(rng.below(17));
      for (int i = 0; i < n; ++i) {
        tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))));
        parents.push_back(i == 0 ? -1 : static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1);
      }
      b.add_tree_rows(b.add_context(committed), tokens, parents);
      for (int r = 0; r <= n; ++r) {
        const auto row = sb_row(v, rng, static_cast<int>(rng.below(5)));
        logits.insert(logits.end(), row.begin(), row.end());
        row_params.push_back(q);
      }
    }
  }
};

}  // namespace

TEST_CASE("cuda process_logits_batch with a penalty_context equals the host backend bit for bit", "[cuda][sampling]") {
  if (!sb_host_has_fma()) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  specdec::philox_stream rng(43, 1);
  const bool small = specdec_test::sanitizer_sized();
  for (const std::int64_t v : {3, 50, 4000, 131075}) {
    if (small && v > 4000) continue;
    for (int round = 0; round < 3; ++round) {
      sb_penalized_batch pb(rng, v);
      const auto& [requests, params, b, row_params, logits] = pb;
      const std::int64_t rows = b.rows();
      auto want = logits;
      std::vector<std::int32_t> hst(3);
      specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(want.data(), {rows, v}),
                                    specdec::make_view<1>(params.data(), {requests}),
                                    specdec::make_view<1>(row_params.data(), {rows}), b.view(),
                                    specdec::make_view<1>(hst.data(), {3}));
      const specdec_test::device_penalty_context dc(b);
      device_buffer<float> dl(logits);
      device_buffer<specdec::sampling_params> dp(params);
      device_buffer<std::int32_t> drp(row_params), st(std::vector<std::int32_t>{5, 5, 5});
      specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                    dv(dp), dv(drp), dc.view(), dv(st));
      specdec_test::sync_check("process_logits_batch (penalties)");
      INFO("V " << v << " round " << round << ", " << rows << " rows");
      CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
      CHECK(sb_same_bits(dl.download(), want));
    }
  }
}

TEST_CASE("cuda process_logits_batch reports a malformed penalty context or an emptied row, leaving it as it was",
          "[cuda][sampling]") {
  const std::int64_t rows = 2, v = 6;
  std::vector<specdec::sampling_params> params(1);
  params[0].repetition_penalty = 2.0f;
  std::vector<std::int32_t> row_params{0, 0};
  // context 0: committed {1, 3, 1} -> pairs (1, 2), (3, 1), length 3; row 0's suffix {4}, row 1's none
  struct arrays {
    std::vector<std::int32_t> distinct{1, 3}, last{2, 1}, indptr{0, 2}, length{3}, row_context{0, 0}, path_indptr{0, 1, 1},
        path{4};
  };
  const arrays good;
  const std::vector<std::int32_t>& distinct = good.distinct;
  const auto run_with = [&](const std::vector<float>& logits, const arrays& c) {
    device_buffer<float> dl(logits);
    device_buffer<specdec::sampling_params> dp(params);
    device_buffer<std::int32_t> drp(row_params), st(std::vector<std::int32_t>{5, 5, 5}), dd(c.distinct), dl2(c.last),
        di(c.indptr), dln(c.length), drc(c.row_context), dpi(c.path_indptr), dpa(c.path);
    specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                  dv(dp), dv(drp),
                                  specdec::penalty_context{dv(dd), dv(dl2), dv(di), dv(dln), dv(drc), dv(dpi), dv(dpa)},
                                  dv(st));
    specdec_test::sync_check("process_logits_batch (bad context)");
    return std::pair{st.download(), dl.download()};
  };
  const auto run = [&](const std::vector<float>& logits, const std::vector<std::int32_t>& d,
                       const std::vector<std::int32_t>& row_context) {
    arrays c;
    c.distinct = d, c.row_context = row_context;
    return run_with(logits, c);
  };
  const std::vector<float> flat(static_cast<std::size_t>(rows * v), 0.5f);
  {  // distinct tokens not ascending: both rows read context 0
    const auto [s, got] = run(flat, {3, 1}, {0, 0});
    CHECK(s[0] == static_cast<std::int32_t>(specdec::device_error::context));
    CHECK(s[1] == 0);
    CHECK(got == flat);
  }
  {  // row 1's context out of range; row 0 processed (token 1, 3 and 4 halved)
    const auto [s, got] = run(flat, distinct, {0, 1});
    CHECK(s == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::context), 1, 1});
    CHECK(std::vector<float>(got.begin() + v, got.end()) == std::vector<float>(flat.begin() + v, flat.end()));
    CHECK(got[1] == 0.25f);
    CHECK(got[4] == 0.25f);
    CHECK(got[0] == 0.5f);
  }
  // each other rule of penalty_context, broken for context 0 (both rows) or row 0's suffix
  const auto broken = [&](auto change, std::int32_t row) {
    arrays c;
    change(c);
    const auto [s, got] = run_with(flat, c);
    CHECK(s[0] == static_cast<std::int32_t>(specdec::device_error::context));
    CHECK(s[1] == 0);  // the rows' context
    if (row < 0) {  // both rows read context 0: either may report first; neither is written
      CHECK((s[2] == 0 || s[2] == 1));
      CHECK(got == flat);
    } else {  // that row reported and left as it was
      CHECK(s[2] == row);
      CHECK(std::equal(got.begin() + row * v, got.begin() + (row + 1) * v, flat.begin() + row * v));
    }
  };
  broken([](arrays& c) { c.indptr = {0, 3}; }, -1);             // a range past the pairs
  broken([](arrays& c) { c.length = {1}; }, -1);                // more pairs than the length
  broken([](arrays& c) { c.last = {3, 1}; }, -1);               // a last position outside the length
  broken([](arrays& c) { c.distinct = {1, 6}; }, -1);           // a token outside [0, V)
  broken([](arrays& c) { c.path_indptr = {0, 1, 2}; }, 1);     // row 1's suffix range past the path
  broken([](arrays& c) { c.path = {6}; }, 0);                   // a suffix token outside [0, V)
  {  // (min * r) * theta overflows where min * (r * theta) does not (found by review): reported, untouched
    auto q = params;
    params[0] = specdec::sampling_params{};
    params[0].temperature = 0.0f, params[0].repetition_penalty = 0x1.0033dcp+0f, params[0].contextual_penalty = 0x1.66c9cap+0f;
    params[0].penalty_window = 4, params[0].contextual_sign_aware = true;
    std::vector<float> l(static_cast<std::size_t>(rows * v), sb_ninf);
    l[1] = -0x1.6d079ap+127f, l[static_cast<std::size_t>(v)] = 1.0f;
    arrays c;
    c.path = {1};
    const auto [s, got] = run_with(l, c);
    CHECK(s == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::row), -1, 0});
    CHECK(std::vector<float>(got.begin(), got.begin() + v) == std::vector<float>(l.begin(), l.begin() + v));
    params = q;
  }
  {  // row 0: every admissible logit (tokens 1, 3, 4 at -FLT_MAX) overflows; row 1 keeps token 4
    std::vector<float> l(static_cast<std::size_t>(rows * v), sb_ninf);
    for (const int t : {1, 3, 4}) l[static_cast<std::size_t>(t)] = l[static_cast<std::size_t>(v + t)] = -std::numeric_limits<float>::max();
    const auto [s, got] = run(l, distinct, {0, 0});
    CHECK(s == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::row), -1, 0});
    CHECK(std::vector<float>(got.begin(), got.begin() + v) == std::vector<float>(l.begin(), l.begin() + v));
    CHECK(got[static_cast<std::size_t>(v + 4)] == -std::numeric_limits<float>::max());
    CHECK(got[static_cast<std::size_t>(v + 1)] == sb_ninf);
  }
}

TEST_CASE("cuda penalized_argmax_batch equals the host backend, reading the rows in place", "[cuda][sampling]") {
  // no weights involved: compared whatever the host's level. V up to 2^20 (the bitmap's shared memory
  // past the default 48 KiB from 2^18 + 1 tokens on)
  specdec::philox_stream rng(47, 2);
  const bool small = specdec_test::sanitizer_sized();
  int compared = 0;
  for (const std::int64_t v : {3, 50, 4000, 131075, 262147, 1048576}) {
    if (small && v > 4000) continue;
    for (int round = 0; round < (v > 131075 ? 1 : 4); ++round) {
      const sb_penalized_batch pb(rng, v);
      const std::int64_t rows = pb.b.rows();
      std::vector<std::int32_t> want(static_cast<std::size_t>(rows)), hst(3);
      // (sb_row plants a 1 in every row: no row is emptied by the penalties; the report case below has those)
      specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(pb.logits.data(), {rows, v}),
                                      specdec::make_view<1>(pb.params.data(), {pb.requests}),
                                      specdec::make_view<1>(pb.row_params.data(), {rows}), pb.b.view(),
                                      specdec::make_view<1>(want.data(), {rows}), specdec::make_view<1>(hst.data(), {3}));
      const specdec_test::device_penalty_context dc(pb.b);
      device_buffer<float> dl(pb.logits);
      device_buffer<specdec::sampling_params> dp(pb.params);
      device_buffer<std::int32_t> drp(pb.row_params), dam(std::vector<std::int32_t>(static_cast<std::size_t>(rows), -7)),
          st(std::vector<std::int32_t>{5, 5, 5});
      specdec::penalized_argmax_batch(specdec::cuda{},
                                      specdec::make_view<2>(static_cast<const float*>(dl.data()), {rows, v}, memory_space::device),
                                      dv(dp), dv(drp), dc.view(), dv(dam), dv(st));
      specdec_test::sync_check("penalized_argmax_batch");
      INFO("V " << v << " round " << round << ", " << rows << " rows");
      CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
      CHECK(dam.download() == want);
      CHECK(sb_same_bits(dl.download(), pb.logits));  // read, never written
      ++compared;
    }
  }
  CHECK(compared == (small ? 12 : 18));  // 4 rounds at each V <= 131075, 1 at the two above
}

TEST_CASE("cuda penalized_argmax_batch reports a bad row, entry or context and gives that row -1", "[cuda][sampling]") {
  const std::int64_t rows = 3, v = 6;
  std::vector<specdec::sampling_params> params(1);
  params[0].temperature = 0.0f, params[0].repetition_penalty = 2.0f;
  // rows 0-2 read context 0 (committed {1, 3, 1}): tokens 1 and 3 halved
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  const auto c0 = b.add_context(std::vector<std::int32_t>{1, 3, 1});
  for (int r = 0; r < rows; ++r) b.add_row(c0, {});
  std::vector<float> l(static_cast<std::size_t>(rows * v), 0.5f);
  l[1] = 2.0f, l[3] = 1.5f, l[4] = 0.9f;  // row 0: 2 / 2 = 1 > 0.9 > 1.5 / 2
  const auto run = [&](const std::vector<float>& logits, const std::vector<std::int32_t>& row_params) {
    const specdec_test::device_penalty_context dc(b);
    device_buffer<float> dl(logits);
    device_buffer<specdec::sampling_params> dp(params);
    device_buffer<std::int32_t> drp(row_params), dam(std::vector<std::int32_t>(static_cast<std::size_t>(rows), -7)),
        st(std::vector<std::int32_t>{5, 5, 5});
    specdec::penalized_argmax_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                    dv(dp), dv(drp), dc.view(), dv(dam), dv(st));
    specdec_test::sync_check("penalized_argmax_batch (reports)");
    return std::pair{st.download(), dam.download()};
  };
  {
    auto bad = l;
    bad[static_cast<std::size_t>(v + 2)] = std::numeric_limits<float>::quiet_NaN();  // row 1: NaN
    for (int t = 0; t < v; ++t) bad[static_cast<std::size_t>(2 * v + t)] = sb_ninf;    // row 2: ...
    bad[static_cast<std::size_t>(2 * v + 1)] = -std::numeric_limits<float>::max();       // ... emptied by the penalty
    const auto [s, am] = run(bad, {0, 0, 0});
    CHECK(s[0] == static_cast<std::int32_t>(specdec::device_error::row));
    CHECK((s[2] == 1 || s[2] == 2));
    CHECK(am == std::vector<std::int32_t>{1, -1, -1});
  }
  {
    const auto [s, am] = run(l, {0, 1, 0});  // row 1's entry out of range
    CHECK(s == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::params), 1, 1});
    CHECK(am == std::vector<std::int32_t>{1, -1, 0});
  }
  {  // a suffix token outside [0, V) (it must never index the bitmap): that row reported, the others not
    specdec::penalty_context_builder bad(static_cast<std::int32_t>(v));
    const auto cb = bad.add_context(std::vector<std::int32_t>{1, 3, 1});
    bad.add_row(-1, std::vector<std::int32_t>{5});  // row 0's suffix, made 6 on the device below
    bad.add_row(cb, {});
    bad.add_row(-1, {});
    specdec_test::device_penalty_context dc(bad);
    dc.path.upload(std::vector<std::int32_t>{6});
    device_buffer<float> dl(l);
    device_buffer<specdec::sampling_params> dp(params);
    device_buffer<std::int32_t> drp(std::vector<std::int32_t>{0, 0, 0}),
        dam(std::vector<std::int32_t>(static_cast<std::size_t>(rows), -7)), st(std::vector<std::int32_t>{5, 5, 5});
    specdec::penalized_argmax_batch(specdec::cuda{}, specdec::make_view<2>(dl.data(), {rows, v}, memory_space::device),
                                    dv(dp), dv(drp), dc.view(), dv(dam), dv(st));
    specdec_test::sync_check("penalized_argmax_batch (bad context)");
    CHECK(st.download() == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::context), -1, 0});
    CHECK(dam.download() == std::vector<std::int32_t>{-1, 0, 0});  // row 1: tokens 1, 3 halved; row 2: no context
  }
}

TEST_CASE("cuda process_logits_batch and logits_to_probs_batch refuse host memory before any CUDA call",
          "[cuda][sampling][nogpu]") {
  std::vector<float> l(4 * 8);
  std::vector<specdec::sampling_params> p(1);
  std::vector<std::int32_t> rp(4), st(3);
  const auto dev = memory_space::device;
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}),
                                                  specdec::make_view<1>(p.data(), {1}, dev),
                                                  specdec::make_view<1>(rp.data(), {4}, dev),
                                                  specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'logits'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                  specdec::make_view<1>(p.data(), {1}), specdec::make_view<1>(rp.data(), {4}, dev),
                                                  specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'params'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                  specdec::make_view<1>(p.data(), {1}, dev),
                                                  specdec::make_view<1>(rp.data(), {3}, dev),
                                                  specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'row_params'") && Catch::Contains("extent(0) == 4"));
  CHECK_THROWS_WITH(specdec::logits_to_probs_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                   specdec::make_view<2>(l.data(), {4, 8}),
                                                   specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'probs'") && Catch::Contains("device-accessible"));
  specdec::penalty_context_builder b(8);
  b.add_tree_rows(b.add_context(std::vector<std::int32_t>{1, 2}), std::vector<std::int32_t>{3, 4, 5},
                  std::vector<std::int32_t>{-1, 0, 0});
  auto c = b.view();
  const auto on_device = [&](specdec::strided_view<const std::int32_t, 1> a) {
    return specdec::strided_view<const std::int32_t, 1>(a.data(), {a.extent(0)}, {1}, dev);
  };
  c.distinct = on_device(c.distinct), c.last = on_device(c.last), c.context_indptr = on_device(c.context_indptr);
  c.context_length = on_device(c.context_length), c.row_context = on_device(c.row_context);
  c.path_indptr = on_device(c.path_indptr);  // c.path stays in host memory
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                  specdec::make_view<1>(p.data(), {1}, dev),
                                                  specdec::make_view<1>(rp.data(), {4}, dev), c,
                                                  specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'context.path'") && Catch::Contains("device-accessible"));
  c.path = on_device(c.path);
  c.row_context = on_device(specdec::make_view<1>(rp.data(), {3}));
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                  specdec::make_view<1>(p.data(), {1}, dev),
                                                  specdec::make_view<1>(rp.data(), {4}, dev), c,
                                                  specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'context.row_context'") && Catch::Contains("extent(0) == 4"));
  // penalized_argmax_batch: its output in device memory, V <= 2^20 on this backend
  c.row_context = on_device(b.view().row_context);
  std::vector<std::int32_t> am(4);
  CHECK_THROWS_WITH(specdec::penalized_argmax_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {4, 8}, dev),
                                                    specdec::make_view<1>(p.data(), {1}, dev),
                                                    specdec::make_view<1>(rp.data(), {4}, dev), c,
                                                    specdec::make_view<1>(am.data(), {4}),
                                                    specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("specdec::penalized_argmax_batch") && Catch::Contains("'argmax'") &&
                        Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::penalized_argmax_batch(specdec::cuda{}, specdec::make_view<2>(l.data(), {1, (1 << 20) + 1}, dev),
                                                    specdec::make_view<1>(p.data(), {1}, dev),
                                                    specdec::make_view<1>(rp.data(), {1}, dev), c,
                                                    specdec::make_view<1>(am.data(), {1}, dev),
                                                    specdec::make_view<1>(st.data(), {3}, dev)),
                    Catch::Contains("'logits'") && Catch::Contains("2^20"));
}
