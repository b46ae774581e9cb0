// byo_kv_cache: bring your own KV-cache type. The user writes only a *mapping*: where row (request,
// token, kv_head) lives and each request's length. Here each request keeps a list of 16-token blocks
// of a shared pool (think: a custom allocator, or a cache shared with another runtime); the library's
// kv_cache supplies geometry, k_row/v_row and validation. So (1) hybrid_tree_attention reads it in
// place and matches the same data in a contiguous layout, and (2) a small attention-only target model
// built on it runs under speculative_decoder, losslessly. Exit code 0 = both checks pass.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/kv_cache.hpp"

// ---- the user's cache: a mapping (host-only: a CUDA one marks its members SPECDEC_HOST_DEVICE) ---
struct block_list_map {
  const std::vector<std::vector<int>>* blocks;  // [request] -> block ids in the pool, in token order
  const std::int32_t* lengths;
  std::int64_t offset(int r, int t, int h, const specdec::kv_geometry& g) const {  // pool [block, 16, heads, dim]
    return ((std::int64_t{(*blocks)[r][t / 16]} * 16 + t % 16) * g.num_kv_heads + h) * g.head_dim;
  }
  int length(int r) const { return lengths[r]; }
};
using block_list_kv = specdec::kv_cache<float, block_list_map>;

// ---- a one-layer attention-only language model over that cache (a target_model) -----------------
struct toy_target {
  using logit_type = float;
  static constexpr int V = 64, D = 64;
  std::vector<float> embed = std::vector<float>(V * D), unembed = std::vector<float>(V * D);
  static constexpr int pool_blocks = 32;  // handed out last first, so a request's blocks are scattered
  std::vector<float> kpool = std::vector<float>(pool_blocks * 16 * D), vpool = kpool;
  std::vector<std::vector<int>> blocks{1};
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
  block_list_kv layout() { return {kpool.data(), vpool.data(), {&blocks, len.data()}, 1, 1, D}; }
  void append(std::int32_t tok) {  // K = V = embedding of the token
    if (len[0] % 16 == 0) {
      if (blocks[0].size() == pool_blocks) throw std::length_error("byo_kv_cache: block pool exhausted");
      blocks[0].push_back(pool_blocks - 1 - static_cast<int>(blocks[0].size()));
    }
    ++len[0];
    std::copy_n(&embed[tok * D], D, layout().k_row(0, len[0] - 1, 0));
    std::copy_n(&embed[tok * D], D, layout().v_row(0, len[0] - 1, 0));
  }
  void prefill(int, std::span<const std::int32_t> p) {
    len[0] = 0, blocks[0].clear();
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
