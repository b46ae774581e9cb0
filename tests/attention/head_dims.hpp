#pragma once
// Shared by the two translation units of attention.head_dims: the test's main file (all head dims,
// SPECDEC_HOST_HEAD_DIMS undefined) and head_dims_hd64.cpp (SPECDEC_HOST_HEAD_DIMS=64). Each runs
// the same decode attention at head_dim 64 and 128 through run_in_this_file(); the helpers have
// internal linkage, so each file keeps its own copy.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/kv/contiguous_kv.hpp"

namespace head_dims {

// One file's results: at head_dim 64 and 128, the output or the error message.
struct file_result {
  std::string isa;                  // specdec::host_isa_name() in that file
  bool compiled[3] = {};            // host_head_dim_compiled(64, 128, 256) in that file
  std::uintptr_t decode_entry = 0;  // &specdec::decode_attention<...> as that file sees it
  std::vector<float> out[2];        // [tokens, hq, d] at d = 64, 128 (empty when the call threw)
  std::vector<float> lse[2];
  std::string error[2];             // invalid_argument::what() when the call threw
};

file_result run_all_dims();  // defined in the main file
file_result run_hd64();      // defined in head_dims_hd64.cpp

// The problem: GQA 2 (4 query heads, 2 KV heads), fp32, two requests of 1 and 3 query tokens over
// caches of 50 and 130 tokens. Values from a fixed linear congruential sequence.
inline constexpr int hq = 4, hkv = 2, requests = 2, capacity = 140, tokens = 4;
inline constexpr int dims[2] = {64, 128};

struct problem {
  int d;
  std::vector<float> q, k, v;
  std::vector<std::int32_t> lens{50, 130}, indptr{0, 1, 4};
  explicit problem(int dim) : d(dim) {
    std::uint64_t s = 777u + static_cast<std::uint64_t>(dim);
    auto next = [&] {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    };
    q.resize(static_cast<std::size_t>(tokens) * hq * d);
    k.resize(static_cast<std::size_t>(requests) * capacity * hkv * d);
    v.resize(k.size());
    for (auto& x : q) x = next();
    for (auto& x : k) x = next();
    for (auto& x : v) x = next();
  }
  auto q_view() const { return specdec::make_view<3>(q.data(), {tokens, hq, d}); }
  auto indptr_view() const { return specdec::make_view<1>(indptr.data(), {requests + 1}); }
  specdec::contiguous_kv<const float> cache() const {
    return {k.data(), v.data(), lens.data(), requests, capacity, hkv, d};
  }
};

namespace {

file_result run_in_this_file() {
  file_result r;
  r.isa = std::string(specdec::host_isa_name());
  r.compiled[0] = specdec::host_head_dim_compiled(64);
  r.compiled[1] = specdec::host_head_dim_compiled(128);
  r.compiled[2] = specdec::host_head_dim_compiled(256);
  for (int i = 0; i < 2; ++i) {
    const problem p(dims[i]);
    std::vector<float> out(static_cast<std::size_t>(tokens) * hq * p.d, -7.0f), lse(static_cast<std::size_t>(tokens) * hq, -7.0f);
    const auto q = p.q_view();
    const auto cache = p.cache();
    const auto ind = p.indptr_view();
    const auto o = specdec::make_view<3>(out.data(), {tokens, hq, p.d});
    const auto l = specdec::make_view<2>(lse.data(), {tokens, hq});
    try {
      specdec::decode_attention(specdec::host{1}, q, cache, ind, o, l);
      r.out[i] = std::move(out);
      r.lse[i] = std::move(lse);
    } catch (const std::invalid_argument& e) {
      r.error[i] = e.what();
    }
    using Q = std::remove_cv_t<decltype(q)>;
    using C = std::remove_cv_t<decltype(cache)>;
    using I = std::remove_cv_t<decltype(ind)>;
    using O = std::remove_cv_t<decltype(o)>;
    using L = std::remove_cv_t<decltype(l)>;
    r.decode_entry = reinterpret_cast<std::uintptr_t>(&specdec::decode_attention<specdec::host, Q, C, I, O, L>);
  }
  return r;
}

}  // namespace

}  // namespace head_dims
