// byo_kv_cache: bring your own KV-cache type. `block_list_kv` keeps each request's tokens in
// separately allocated blocks reached through a block table (think: a custom allocator or a cache
// shared with another runtime). It satisfies specdec::kv_layout, so (1) hybrid_tree_attention reads it
// in place and matches the same data in a contiguous layout, and (2) a small attention-only target
// model built on it runs under speculative_decoder, losslessly. Exit code 0 = both checks pass.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/kv/contiguous_kv.hpp"

// ---- the user's cache ---------------------------------------------------------------------------
struct block_list_kv {
  using value_type = float;
  static constexpr int block = 16;                       // tokens per block
  std::vector<std::vector<std::unique_ptr<float[]>>>* k_blocks;  // [request][block] -> [block, heads, dim]
  std::vector<std::vector<std::unique_ptr<float[]>>>* v_blocks;
  const std::int32_t* lengths;
  int requests, heads, dim;
  int num_requests() const { return requests; }
  int num_kv_heads() const { return heads; }
  int head_dim() const { return dim; }
  int length(int r) const { return lengths[r]; }
  specdec::memory_space space() const { return specdec::memory_space::host; }
  float* row(std::vector<std::vector<std::unique_ptr<float[]>>>* b, int r, int t, int h) const {
    return (*b)[r][t / block].get() + (static_cast<std::size_t>(t % block) * heads + h) * dim;
  }
  const float* k_row(int r, int t, int h) const { return row(k_blocks, r, t, h); }
  const float* v_row(int r, int t, int h) const { return row(v_blocks, r, t, h); }
};
static_assert(specdec::check_kv_layout<block_list_kv>());

// ---- a one-layer attention-only language model over that cache (a target_model) -----------------
struct toy_target {
  using logit_type = float;
  static constexpr int V = 64, D = 64;
  std::vector<float> embed = std::vector<float>(V * D), unembed = std::vector<float>(V * D);
  std::vector<std::vector<std::unique_ptr<float[]>>> kb{1}, vb{1};
  std::vector<std::int32_t> len{0};
  std::vector<float> spec_k, mask_dummy;
  toy_target() {
    specdec::philox_stream rng(3, 0);
    for (auto& x : embed) x = rng.uniform() - 0.5f;
    for (int v = 0; v < V; ++v)  // token v mostly predicts (5v + 1) mod V; attention adds context
      for (int d = 0; d < D; ++d) unembed[((5 * v + 1) % V) * D + d] = 8.0f * embed[v * D + d] + rng.uniform() - 0.5f;
  }
  int vocab_size() const { return V; }
  int max_requests() const { return 1; }
  block_list_kv layout() { return {&kb, &vb, len.data(), 1, 1, D}; }
  void append(std::int32_t tok) {  // K = V = embedding of the token
    if (len[0] % block_list_kv::block == 0) {
      kb[0].emplace_back(new float[block_list_kv::block * D]);
      vb[0].emplace_back(new float[block_list_kv::block * D]);
    }
    std::copy_n(&embed[tok * D], D, layout().row(&kb, 0, len[0], 0));
    std::copy_n(&embed[tok * D], D, layout().row(&vb, 0, len[0], 0));
    ++len[0];
  }
  void prefill(int, std::span<const std::int32_t> p) {
    len[0] = 0, kb[0].clear(), vb[0].clear();
    for (std::size_t i = 0; i + 1 < p.size(); ++i) append(p[i]);
  }
  std::vector<std::int32_t> last;  // root + tree tokens of the last forward
  void forward(int, std::int32_t root, const specdec::token_tree& tree, std::span<float> logits) {
    using namespace specdec;
    const int m = tree.size() + 1;
    last.assign(1, root);
    for (auto t : tree.tokens()) last.push_back(t);
    std::vector<float> q(m * D), k(m * D), out(m * D), lse(m);
    for (int i = 0; i < m; ++i) std::copy_n(&embed[last[i] * D], D, &q[i * D]);
    k = q;
    std::vector<std::int32_t> parents{-1};
    for (auto p : tree.parents()) parents.push_back(p + 1);
    const auto full = token_tree::from_parents(last, parents).ancestor_mask();
    const std::int32_t indptr[2] = {0, m};
    hybrid_tree_attention(host{}, make_view<3>(q.data(), {m, 1, D}), layout(), make_view<3>(k.data(), {m, 1, D}),
                          make_view<3>(k.data(), {m, 1, D}), make_view<1>(indptr, {2}),
                          make_view<1>(full.words().data(), {static_cast<std::int64_t>(full.words().size())}),
                          make_view<3>(out.data(), {m, 1, D}), make_view<2>(lse.data(), {m, 1}));
    for (int i = 0; i < m; ++i)
      for (int v = 0; v < V; ++v) {
        float s = 0;
        for (int d = 0; d < D; ++d) s += unembed[v * D + d] * (q[i * D + d] + out[i * D + d]);
        logits[static_cast<std::size_t>(i) * V + v] = s;
      }
  }
  void commit(int, std::span<const std::int32_t> accepted) {
    append(last[0]);
    for (auto n : accepted) append(last[static_cast<std::size_t>(n) + 1]);
  }
};
static_assert(specdec::check_target_model<toy_target>());

int main() {
  using namespace specdec;
  // (1) The same K/V in the user's layout and in a contiguous one give the same attention.
  toy_target t;
  std::vector<std::int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 7) % 64);
  t.prefill(0, prompt);
  std::vector<float> flat_k(t.len[0] * 64), flat_v(flat_k.size());
  for (int i = 0; i < t.len[0]; ++i) {
    std::copy_n(t.layout().k_row(0, i, 0), 64, &flat_k[i * 64]);
    std::copy_n(t.layout().v_row(0, i, 0), 64, &flat_v[i * 64]);
  }
  const contiguous_kv<const float> flat{flat_k.data(), flat_v.data(), t.len.data(), 1, t.len[0], 1, 64};
  std::vector<float> q(2 * 64, 0.1f), sk(2 * 64, 0.2f), o1(2 * 64), o2(2 * 64), lse(2);
  const mask_word mask[2] = {1, 3};
  const std::int32_t indptr[2] = {0, 2};
  auto run = [&](const auto& cache, std::vector<float>& o) {
    hybrid_tree_attention(host{}, make_view<3>(q.data(), {2, 1, 64}), cache, make_view<3>(sk.data(), {2, 1, 64}),
                          make_view<3>(sk.data(), {2, 1, 64}), make_view<1>(indptr, {2}), make_view<1>(mask, {2}),
                          make_view<3>(o.data(), {2, 1, 64}), make_view<2>(lse.data(), {2, 1}));
  };
  run(t.layout(), o1);
  run(flat, o2);
  double diff = 0;
  for (std::size_t i = 0; i < o1.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(o1[i] - o2[i])));

  // (2) The toy model under speculative_decoder (prompt lookup drafts) vs its own greedy decoding.
  toy_target ar;
  ar.prefill(0, prompt);
  std::vector<std::int32_t> want;
  std::vector<float> logits(64);
  std::int32_t root = prompt.back();
  for (int i = 0; i < 200; ++i) {
    ar.forward(0, root, token_tree{}, logits);
    ar.commit(0, {});
    want.push_back(root = greedy_token(logits));
  }
  speculative_decoder<toy_target, ngram_drafter, trie_tree_builder, greedy_verifier> dec(t);
  const auto got = dec.generate(prompt, {.max_new_tokens = 200, .draft_depth = 5});
  const bool ok = diff < 1e-5 && got.tokens == want;
  std::printf("user layout vs contiguous: max |diff| = %g; decoder: %zu tokens, tau %.2f, lossless: %s\n", diff,
              got.tokens.size(), dec.stats().tau(), got.tokens == want ? "yes" : "NO");
  return ok ? 0 : 1;
}
