// Flash noisy training (LongSpec §3.2, Algorithm 2) and GLIDE's block-wise mask (§4.1): the
// definitions checked exactly, a small attention computed by slicing equals the same attention
// computed with the mask, and bad inputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "specdec/position/glide_block_mask.hpp"
#include "specdec/position/noisy_training.hpp"

namespace {

// Naive single-head attention in double: out[t] = softmax_s(q_t . k_s, s visible(t, s)) v; zero row
// when nothing is visible.
template <class Visible>
std::vector<double> masked_attention(int nq, int nk, int d, const double* q, const double* k, const double* v,
                                     Visible visible) {
  std::vector<double> out(static_cast<std::size_t>(nq) * d, 0.0);
  for (int t = 0; t < nq; ++t) {
    double mx = -std::numeric_limits<double>::infinity();
    std::vector<double> s(static_cast<std::size_t>(nk), -std::numeric_limits<double>::infinity());
    for (int j = 0; j < nk; ++j)
      if (visible(t, j)) {
        double dot = 0;
        for (int x = 0; x < d; ++x) dot += q[t * d + x] * k[j * d + x];
        s[j] = dot;
        mx = std::max(mx, dot);
      }
    if (mx == -std::numeric_limits<double>::infinity()) continue;
    double z = 0;
    for (int j = 0; j < nk; ++j) z += std::exp(s[j] - mx);
    for (int j = 0; j < nk; ++j)
      for (int x = 0; x < d; ++x) out[t * d + x] += std::exp(s[j] - mx) / z * v[j * d + x];
  }
  return out;
}

}  // namespace

TEST_CASE("flash noisy slice: Q[j:], K[:l-j], j pad rows") {
  const auto s = specdec::flash_noisy_slice_for(10, 3);
  CHECK(s.shift == 3);
  CHECK(s.query_begin == 3);
  CHECK(s.query_end == 10);
  CHECK(s.key_begin == 0);
  CHECK(s.key_end == 7);
  CHECK(s.pad_rows == 3);
  CHECK(s.num_queries() == 7);
  CHECK(s.num_keys() == 7);
  // causal visibility in original coordinates: query t >= 3 sees keys 0..t-3
  const auto m = specdec::flash_noisy_visibility(s);
  for (int t = 0; t < 10; ++t)
    for (int k = 0; k < 10; ++k) CHECK(m.test(t, k) == (t >= 3 && k <= t - 3));
  const auto full = specdec::flash_noisy_visibility(s, false);
  for (int t = 0; t < 10; ++t)
    for (int k = 0; k < 10; ++k) CHECK(full.test(t, k) == (t >= 3 && k < 7));
}

TEST_CASE("flash noisy shift is uniform on [1, gamma) and reproducible") {
  for (int gamma : {2, 3, 5, 8}) {
    specdec::philox_stream rng(11, specdec::stream_id(0, static_cast<std::uint32_t>(gamma)));
    std::map<int, int> hist;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) {
      const auto s = specdec::flash_noisy_training(64, gamma, rng);
      REQUIRE(s.shift >= 1);
      REQUIRE(s.shift < gamma);
      REQUIRE(s == specdec::flash_noisy_slice_for(64, s.shift));
      ++hist[s.shift];
    }
    REQUIRE(static_cast<int>(hist.size()) == gamma - 1);
    const double e = static_cast<double>(draws) / (gamma - 1);
    double chi2 = 0;
    for (auto [j, c] : hist) chi2 += (c - e) * (c - e) / e;
    CHECK(chi2 < 24.3);  // <= 7 degrees of freedom, p = 0.001
  }
  // gamma = 5 is Algorithm 2's RandomInt(1, 4)
  const std::vector<std::int32_t> lens{8, 5, 100};
  const auto a = specdec::flash_noisy_training_batch(3, 1, 5, lens);
  const auto b = specdec::flash_noisy_training_batch(3, 1, 5, lens);
  REQUIRE(a == b);
  for (std::size_t i = 0; i < lens.size(); ++i) {
    specdec::philox_stream rng(3, specdec::stream_id(static_cast<std::uint32_t>(i), 1));
    CHECK(a[i] == specdec::flash_noisy_training(lens[i], 5, rng));
    CHECK(a[i].query_end == lens[i]);
  }
}

TEST_CASE("slicing (Algorithm 2) equals masked causal attention with the visibility mask") {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd;
  const int l = 12, d = 8;
  std::vector<double> q(l * d), k(l * d), v(l * d);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = nd(rng);
  for (int j = 1; j < 5; ++j) {
    const auto s = specdec::flash_noisy_slice_for(l, j);
    // Algorithm 2: causal attention over the slices (same length, so row i sees keys 0..i), then pad.
    const auto sliced =
        masked_attention(s.num_queries(), s.num_keys(), d, q.data() + s.query_begin * d, k.data() + s.key_begin * d,
                         v.data() + s.key_begin * d, [](int t, int kk) { return kk <= t; });
    std::vector<double> padded(static_cast<std::size_t>(s.pad_rows) * d, 0.0);
    padded.insert(padded.end(), sliced.begin(), sliced.end());
    const auto m = specdec::flash_noisy_visibility(s);
    const auto masked =
        masked_attention(l, l, d, q.data(), k.data(), v.data(), [&](int t, int kk) { return m.test(t, kk); });
    REQUIRE(padded.size() == masked.size());
    for (std::size_t i = 0; i < masked.size(); ++i) REQUIRE(padded[i] == Approx(masked[i]).margin(1e-12));
  }
}

TEST_CASE("GLIDE block mask: bit (j, k) iff block(j) > block(k), L = 5") {
  // hand example, 12 tokens: rows 0-4 see nothing, rows 5-9 see keys 0-4, rows 10-11 see keys 0-9
  const auto m = specdec::glide_block_mask(12);
  REQUIRE(m.rows() == 12);
  REQUIRE(m.cols() == 12);
  for (int j = 0; j < 12; ++j)
    for (int k = 0; k < 12; ++k) {
      const bool want = j < 5 ? false : j < 10 ? k < 5 : k < 10;
      REQUIRE(m.test(j, k) == want);
    }
  CHECK(m.row(7)[0] == 0x1Fu);
  CHECK(m.row(11)[0] == 0x3FFu);
  // the definition for other lengths / block sizes, including multi-word rows
  for (int L : {1, 3, 5, 64, 70})
    for (int n : {0, 1, 63, 64, 65, 200}) {
      const auto b = specdec::glide_block_mask(n, L);
      REQUIRE(b.row_stride() == specdec::words_per_row(n));
      for (int j = 0; j < n; ++j) {
        int count = 0;
        for (int k = 0; k < n; ++k) {
          REQUIRE(b.test(j, k) == (specdec::glide_block_of(j, L) > specdec::glide_block_of(k, L)));
          count += b.test(j, k);
        }
        REQUIRE(count == (j / L) * L);
        // no bit set beyond the row's columns (padding bits stay clear)
        for (int k = n; k < b.row_stride() * 64; ++k) REQUIRE(!specdec::test_bit(b.row(j), k));
      }
    }
  CHECK(specdec::glide_block_of(9) == 1);
  CHECK(specdec::glide_block_of(10) == 2);
}

TEST_CASE("training-mask generators reject bad inputs") {
  specdec::philox_stream rng(1, 1);
  CHECK_THROWS_AS(specdec::flash_noisy_training(10, 1, rng), specdec::invalid_argument);
  CHECK_THROWS_WITH(specdec::flash_noisy_training(10, 1, rng), Catch::Contains("gamma"));
  CHECK_THROWS_WITH(specdec::flash_noisy_training(4, 5, rng), Catch::Contains("seq_len"));
  CHECK_THROWS_WITH(specdec::flash_noisy_draw_shift(0, rng), Catch::Contains("gamma"));
  CHECK_THROWS_WITH(specdec::flash_noisy_slice_for(10, 0), Catch::Contains("shift"));
  CHECK_THROWS_WITH(specdec::flash_noisy_slice_for(10, 10), Catch::Contains("shift"));
  CHECK_THROWS_WITH(specdec::flash_noisy_slice_for(1, 1), Catch::Contains("seq_len"));
  const std::vector<std::int32_t> lens{8, 3};
  CHECK_THROWS_WITH(specdec::flash_noisy_training_batch(1, 0, 4, lens), Catch::Contains("seq_lens"));
  CHECK_THROWS_WITH(specdec::flash_noisy_training_batch(1, 0, 1, lens), Catch::Contains("gamma"));
  auto bad = specdec::flash_noisy_slice_for(10, 2);
  bad.key_end = 9;
  CHECK_THROWS_WITH(specdec::flash_noisy_visibility(bad), Catch::Contains("slice"));
  CHECK_THROWS_WITH(specdec::flash_noisy_visibility(specdec::flash_noisy_slice{}), Catch::Contains("query_end"));
  CHECK_THROWS_WITH(specdec::glide_block_mask(-1), Catch::Contains("seq_len"));
  CHECK_THROWS_WITH(specdec::glide_block_mask(10, 0), Catch::Contains("block_length"));
  CHECK_THROWS_WITH(specdec::glide_block_of(-1), Catch::Contains("'x'"));
  CHECK_THROWS_WITH(specdec::glide_block_of(3, 0), Catch::Contains("block_length"));
  CHECK_THROWS_AS(specdec::glide_block_mask(10, 0), specdec::invalid_argument);
}
