#pragma once
// Shared by the two translation units of attention.isa_mixed_flags: the test's main file (built
// with the project's default flags) and isa_mixed_flags_v3.cpp (built with -march=x86-64-v3). Each
// file calls the host primitives on the same deterministic inputs through run_in_this_file(). All
// the helpers below but file_result have internal linkage (anonymous namespace), so each file keeps
// its own copy: the test itself must not break the rule it checks.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/position/rope.hpp"

namespace isa_mixed {

// What one file computed, and the addresses its calls resolved to.
struct file_result {
  std::string isa;                         // specdec::host_isa_name() in that file
  std::uintptr_t decode_entry = 0;         // &specdec::decode_attention<...> as that file sees it
  std::uintptr_t merge_entry = 0;          // &specdec::lse_merge<...> (two-way)
  std::uintptr_t rope_entry = 0;           // &specdec::apply_rope<...>
  std::uintptr_t shape_check = 0;          // &specdec::require_shape<...>: a core helper on the path
  std::uintptr_t layout_check = 0;         // &specdec::validate_kv_layout<...>: a kv helper on the path
  std::vector<specdec::half> out;          // decode_attention: [tokens, hq, d]
  std::vector<float> lse;                  // [tokens, hq]
  std::vector<specdec::half> merged;       // lse_merge of (out, lse) with (out, lse - ln 2)
  std::vector<float> merged_lse;
  std::vector<specdec::half> roped;        // apply_rope on fp16 rows
};

file_result run_default_flags();  // defined in the main file
file_result run_x86_64_v3();      // defined in isa_mixed_flags_v3.cpp

namespace {

// The problem both files solve: GQA 4 (8 query heads, 2 KV heads), head_dim 128, fp16 contiguous
// cache and queries; request 0 has 1 query token (4 rows per KV head: the row kernel), request 1 has 5 (20
// rows: the tile kernel). Values from a fixed linear congruential sequence.
inline constexpr int hq = 8, hkv = 2, dim = 128, requests = 2, capacity = 300;
inline const std::vector<std::int32_t>& cache_lens() {
  static const std::vector<std::int32_t> v{37, 290};
  return v;
}
inline const std::vector<std::int32_t>& q_indptr() {
  static const std::vector<std::int32_t> v{0, 1, 6};
  return v;
}

struct inputs {
  std::vector<specdec::half> q, k, v;
  inputs() {
    std::uint64_t s = 12345;
    auto next = [&] {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    };
    q.resize(static_cast<std::size_t>(q_indptr().back()) * hq * dim);
    for (auto& x : q) x = specdec::half(next());
    k.resize(static_cast<std::size_t>(requests) * capacity * hkv * dim);
    v.resize(k.size());
    for (auto& x : k) x = specdec::half(next());
    for (auto& x : v) x = specdec::half(next());
  }
  specdec::contiguous_kv<specdec::half> cache() {
    return {k.data(), v.data(), cache_lens().data(), requests, capacity, hkv, dim};
  }
};

template <class F>
std::uintptr_t address_of(F* f) {
  return reinterpret_cast<std::uintptr_t>(f);
}
template <class T>
using plain = std::remove_cv_t<T>;

file_result run_in_this_file() {
  file_result r;
  r.isa = std::string(specdec::host_isa_name());
  inputs in;
  const int tokens = q_indptr().back();
  const auto q = specdec::make_view<3>(static_cast<const specdec::half*>(in.q.data()), {tokens, hq, dim});
  const auto ind = specdec::make_view<1>(q_indptr().data(), {requests + 1});
  const auto cache = in.cache();
  r.out.assign(static_cast<std::size_t>(tokens) * hq * dim, specdec::half(-7.0f));
  r.lse.assign(static_cast<std::size_t>(tokens) * hq, -7.0f);
  const auto out = specdec::make_view<3>(r.out.data(), {tokens, hq, dim});
  const auto lse = specdec::make_view<2>(r.lse.data(), {tokens, hq});
  specdec::decode_attention(specdec::host{1}, q, cache, ind, out, lse);
  r.decode_entry = address_of(&specdec::decode_attention<specdec::host, plain<decltype(q)>, plain<decltype(cache)>,
                                                         plain<decltype(ind)>, plain<decltype(out)>,
                                                         plain<decltype(lse)>>);
  r.shape_check = address_of(&specdec::require_shape<plain<decltype(q)>>);
  r.layout_check = address_of(&specdec::validate_kv_layout<plain<decltype(cache)>>);

  // Two-way merge of the decode result with a copy whose LSE is shifted by ln 2.
  std::vector<specdec::half> o_b(r.out);
  std::vector<float> lse_b(r.lse);
  for (auto& x : lse_b) x -= 0.6931471805599453f;
  r.merged.assign(r.out.size(), specdec::half(0.0f));
  r.merged_lse.assign(r.lse.size(), 0.0f);
  const auto oa = specdec::make_view<3>(static_cast<const specdec::half*>(r.out.data()), {tokens, hq, dim});
  const auto la = specdec::make_view<2>(static_cast<const float*>(r.lse.data()), {tokens, hq});
  const auto ob = specdec::make_view<3>(static_cast<const specdec::half*>(o_b.data()), {tokens, hq, dim});
  const auto lb = specdec::make_view<2>(static_cast<const float*>(lse_b.data()), {tokens, hq});
  const auto mo = specdec::make_view<3>(r.merged.data(), {tokens, hq, dim});
  const auto ml = specdec::make_view<2>(r.merged_lse.data(), {tokens, hq});
  specdec::lse_merge(specdec::host{1}, oa, la, ob, lb, mo, ml);
  r.merge_entry = address_of(&specdec::lse_merge<specdec::host, plain<decltype(oa)>, plain<decltype(la)>,
                                                 plain<decltype(ob)>, plain<decltype(lb)>, plain<decltype(mo)>,
                                                 plain<decltype(ml)>>);

  // RoPE on the fp16 K rows of request 1 (the F16C path where the file has it).
  r.roped.assign(in.k.begin(), in.k.begin() + static_cast<std::ptrdiff_t>(40) * hkv * dim);
  const auto x = specdec::make_view<3>(r.roped.data(), {40, hkv, dim});
  std::vector<std::int32_t> pos(40);
  for (int t = 0; t < 40; ++t) pos[t] = 1000 + 37 * t;
  const auto pv = specdec::make_view<1>(static_cast<const std::int32_t*>(pos.data()), {40});
  specdec::apply_rope(specdec::host{1}, specdec::rope_params{.theta = 500000.0}, x, pv);
  using X = plain<decltype(x)>;
  using P = plain<decltype(pv)>;
  r.rope_entry = address_of(static_cast<void (*)(const specdec::host&, const specdec::rope_params&, const X&, const P&)>(
      &specdec::apply_rope<specdec::host, X, P>));
  return r;
}

}  // namespace

}  // namespace isa_mixed
