// Compiled by compile_fail.cmake (never built as part of the project): every public entry point that
// takes a KV layout, called with a user's layout type.
//   NOT_A_LAYOUT  the type lacks length(), k_row() and space() (and capacity()): the compiler must
//                 report check_kv_layout's messages for all three (not an overload-resolution failure
//                 naming only the first unsatisfied requirement) and no other error.
//   READ_ONLY     a complete kv_layout over const rows without capacity(), passed to the commit entry
//                 points: only check_writable_kv_layout's two messages.
//   (none)        the positive control: the same calls with a complete, writable layout compile.
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/attention/cross_attention.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/kv_layout.hpp"
#include "specdec/kv/partial_kv.hpp"

struct user_layout {
#ifdef READ_ONLY
  using value_type = const float;
#else
  using value_type = float;
#endif
  value_type* k = nullptr;
  int num_requests() const { return 1; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 64; }
#ifndef NOT_A_LAYOUT
  int length(int) const { return 0; }
  value_type* k_row(int, int t, int) const { return k + 64 * t; }
  specdec::memory_space space() const { return specdec::memory_space::host; }
#endif
#if !defined(NOT_A_LAYOUT) && !defined(READ_ONLY)
  int capacity(int) const { return 4; }
#endif
  value_type* v_row(int, int t, int) const { return k + 64 * t; }
};

namespace sd = specdec;

void layout_calls(const user_layout& cache) {
  std::vector<float> q(8 * 64), out(8 * 64), lse(8), scores(4);
  std::vector<std::int32_t> indptr{0, 1}, committed{0};
  std::vector<sd::mask_word> mask{1};
  const auto qv = sd::make_view<3>(q.data(), {1, 8, 64});
  const auto ov = sd::make_view<3>(out.data(), {1, 8, 64});
  const auto lv = sd::make_view<2>(lse.data(), {1, 8});
  const auto iv = sd::make_view<1>(indptr.data(), {2});
  const auto kv = sd::make_view<3>(q.data(), {1, 1, 64});
  const auto mv = sd::make_view<1>(mask.data(), {1});
  sd::validate_kv_layout(cache, "f", "cache");
  sd::decode_attention(sd::host{}, qv, cache, iv, ov, lv);
  (void)sd::decode_attention_workspace_bytes(sd::host{}, qv, cache, iv);
  sd::hybrid_tree_attention(sd::host{}, qv, cache, kv, kv, iv, mv, ov, lv);
  (void)sd::hybrid_tree_attention_workspace_bytes(sd::host{}, qv, cache, iv);
  sd::cross_attention(sd::host{}, qv, cache, iv, ov, lv);
  sd::cross_attention(sd::host{}, qv, cache, std::span<const std::int32_t>(committed), iv, ov, lv);
  (void)sd::cross_attention_workspace_bytes(sd::host{}, qv, cache, iv);
  sd::kv_importance(sd::host{}, sd::make_view<2>(q.data(), {1, 64}), cache, 0, sd::make_view<2>(scores.data(), {1, 4}));
  sd::partial_kv_index index(1, 1, 4, 1);
  index.rebuild(sd::host{}, 0, sd::make_view<2>(q.data(), {1, 64}), cache);
  (void)index.layout(cache);
  sd::compact_partial_kv<float> compact(1, 1, 4, 64);
  (void)compact.sync(index, cache, 0);
}

void commit_calls(user_layout& cache) {
  std::vector<std::int32_t> none, zero{0}, sizes{0}, zeros{0, 0};
  const std::vector<sd::strided_view<const float, 3>> spec;
  (void)sd::kv_commit_in_place(std::span<user_layout>(&cache, 1), 0, 0, 0, std::span<const std::int32_t>(none));
  (void)sd::kv_commit_from_buffer(std::span<user_layout>(&cache, 1), 0, 0, std::span(spec), std::span(spec),
                                  std::span<const std::int32_t>(none));
  (void)sd::kv_commit_in_place_batch(std::span<user_layout>(&cache, 1), std::span<const std::int32_t>(zero),
                                     std::span<const std::int32_t>(sizes), std::span<const std::int32_t>(zeros),
                                     std::span<const std::int32_t>(none));
}

int main() { return 0; }
