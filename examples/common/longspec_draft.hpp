#pragma once
//! \file longspec_draft.hpp
//! The LongSpec draft model matching llama_model (LongSpec §3.1, Figure 1; GLIDE's layer mapping):
//! per draft layer, sliding-window self-attention over its own constant-size ring cache of the last
//! `window` tokens, then cache-free cross-attention whose keys and values are the target's KV cache of
//! one target layer (GLIDE: draft layer j reads target layer layer_map[j], by default the top layers),
//! then a SwiGLU FFN. The embedding, final norm and LM head are the target's own (shared, not copied).
//!
//! Weights: the examples have no trained draft, so derive_longspec_draft() copies the draft's blocks
//! from the target (self-attention from target layer j, cross-attention query/output projections and
//! FFN from the mapped target layer). Together with the shared embedding and head this makes the draft
//! an approximation of the target whose agreement rate is meaningful (it is NOT a trained LongSpec draft).
//!
//! Memory: ring K/V = layers x window x kv_heads x head_dim x 2 elements per request, whatever the
//! context length (specdec::ring_kv_cache); cross-attention keeps nothing per token (it reads the
//! target's cache in place). The speculative chain's rows (a few tokens) are scratch of the step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <utility>

#include "llama.hpp"
#include "model_math.hpp"
#include "specdec/attention/cross_attention.hpp"
#include "specdec/attention/sliding_window_attention.hpp"
#include "specdec/draft/chain_drafter.hpp"
#include "specdec/draft/longspec_drafter.hpp"
#include "specdec/kv/ring_kv.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/cross_attention.hpp"

namespace specdec::examples {

//! Draft geometry.
struct longspec_draft_config {
  int layers = 1;     //!< draft layers (LongSpec uses 1)
  int window = 512;   //!< sliding-window size of the self-attention (LongSpec: 512)
  //! Target layer each draft layer's cross-attention reads (GLIDE); empty = the top `layers` target layers.
  std::vector<int> layer_map;
};

//! The draft's own weights (its embedding, final norm and LM head are the target's).
template <class T>
struct longspec_draft_weights {
  struct layer {
    std::vector<T> attn_norm, wq, wk, wv, wo;   // sliding-window self-attention
    std::vector<T> cross_norm, cq, co;          // cross-attention: query and output projections only
    std::vector<T> ffn_norm, w_gate, w_up, w_down;
  };
  std::vector<layer> layers;
};

//! GLIDE's default layer mapping (§4.1, specdec::glide_target_layer_index): draft layer j reads target
//! layer target_layers - draft_layers + j (the top layers, in order). O(draft_layers).
[[nodiscard]] inline std::vector<int> glide_layer_map(int target_layers, int draft_layers) {
  std::vector<int> m;  // j = 0 is always asked for, so a bad draft_layers throws (naming it) even when <= 0
  for (int j = 0; j < std::max(draft_layers, 1); ++j) m.push_back(glide_target_layer_index(target_layers, draft_layers, j));
  return m;
}

//! Derives untrained draft weights from the target (see the file comment). O(draft parameters).
template <class T>
[[nodiscard]] longspec_draft_weights<T> derive_longspec_draft(const llama_weights<T>& t, longspec_draft_config& c) {
  const int tl = static_cast<int>(t.layers.size());
  if (c.layer_map.empty()) c.layer_map = glide_layer_map(tl, c.layers);
  require_equal("specdec::examples::derive_longspec_draft", "config.layer_map.size()",
                static_cast<std::size_t>(c.layers), c.layer_map.size());
  longspec_draft_weights<T> w;
  for (int j = 0; j < c.layers; ++j) {
    const int src = c.layer_map[static_cast<std::size_t>(j)];
    require_in_range("specdec::examples::derive_longspec_draft", "config.layer_map[j]", src, 0, tl - 1);
    const auto& self = t.layers[static_cast<std::size_t>(j % tl)];
    const auto& top = t.layers[static_cast<std::size_t>(src)];
    w.layers.push_back({self.attn_norm, self.wq, self.wk, self.wv, self.wo, top.attn_norm, top.wq, top.wo,
                        top.ffn_norm, top.w_gate, top.w_up, top.w_down});
  }
  return w;
}

//! The draft model. Per draft layer it owns a specdec::ring_kv_cache (kv/ring_kv.hpp) of the last
//! `window` committed tokens' self-attention K/V for every request (constant size, allocated once),
//! and per request the speculative chain of the current step (the tokens step() was given with
//! commit = false since the last discard_speculation), which never reaches the ring.
//!
//! Attention (all through the library; no attention loop here):
//!  - self-attention: specdec::sliding_window_attention (attention/sliding_window_attention.hpp) with
//!    tree-structured queries: the chain is the draft tree, each of its tokens sees the ring's window
//!    (the W newest committed tokens) plus its ancestors and itself (LongSpec §3.1, §3.3). A committed
//!    token is a one-node tree; its K/V go to the ring after the attention (ring_kv_cache::append).
//!  - cross-attention: specdec::cross_attention (attention/cross_attention.hpp), cache-free, reading
//!    the target's KV cache of layer layer_map[j] in place through the target's own kv_layout
//!    (contiguous or paged), limited to the positions before the query (committed lengths).
//! The optimized primitives take float, half and bfloat16; a double model (the lossless tests) runs the
//! same calls through their double references (reference::hybrid_tree_attention over the same ring
//! layout, reference::cross_attention over the same target layout).
template <class T>
class longspec_draft_model {
 public:
  using value_type = T;
  using logit_type = T;

  //! Preconditions (checked): window >= 1, one weight block and one layer_map entry per draft layer.
  longspec_draft_model(const llama_model<T>& target, longspec_draft_config c, longspec_draft_weights<T> w)
      : target_(&target), cfg_(std::move(c)), w_(std::move(w)) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model";
    require(cfg_.window >= 1, fn, "config.window", ">= 1", cfg_.window);
    require_equal(fn, "weights.layers.size()", static_cast<std::size_t>(cfg_.layers), w_.layers.size());
    require_equal(fn, "config.layer_map.size()", static_cast<std::size_t>(cfg_.layers), cfg_.layer_map.size());
    for (int m : cfg_.layer_map) require_in_range(fn, "config.layer_map[j]", m, 0, target.config().layers - 1);
    const auto& tc = target.config();
    for (int l = 0; l < cfg_.layers; ++l)
      rings_.emplace_back(ring_kv_config{.requests = target.max_requests(), .kv_heads = tc.kv_heads,
                                         .head_dim = tc.head_dim, .window = cfg_.window, .speculative_capacity = 0});
    state_.resize(static_cast<std::size_t>(target.max_requests()));
    for (auto& s : state_) s.q.resize(rings_.size()), s.k.resize(rings_.size()), s.v.resize(rings_.size());
  }

  [[nodiscard]] const longspec_draft_config& config() const noexcept { return cfg_; }
  [[nodiscard]] int vocab_size() const noexcept { return target_->vocab_size(); }
  [[nodiscard]] int max_requests() const noexcept { return target_->max_requests(); }
  //! Bytes of draft-owned KV state per request (the rings): constant in the context length.
  [[nodiscard]] std::size_t state_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& ring : rings_) b += ring.bytes();
    return b / static_cast<std::size_t>(max_requests());
  }

  //! Forgets request r's context.
  void reset(int r) {
    discard_speculation(r);
    for (auto& ring : rings_) ring.reset(r);
    state_[static_cast<std::size_t>(r)].absorbed = 0;
  }
  //! Tokens before position p - receptive_field() cannot influence any prediction at p or later (each
  //! layer sees `window` tokens back; cross-attention reads the target's cache, not draft state), so a
  //! drafter may start absorbing a long prompt there with an identical result.
  [[nodiscard]] int receptive_field() const noexcept { return cfg_.layers * cfg_.window; }
  //! Committed tokens absorbed so far (the next committed token's position).
  [[nodiscard]] int absorbed(int r) const { return state_[check_r(r)].absorbed; }

  //! Runs one token at `position`. commit = true: a committed token (position >= absorbed(r); it drops
  //! the current speculation, and a jump past absorbed(r) forgets the older ring contents, which by
  //! receptive_field() cannot matter); its K/V enter the rings. commit = false: extends the speculative
  //! chain (position == absorbed(r) + chain length). Writes vocab_size logits when non-empty.
  //! O(layers (params + n (window + n) + target cache) kv_heads head_dim), n = chain length + 1.
  void step(int r, std::int32_t token, int position, bool commit, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model::step";
    auto& s = state_[check_r(r)];
    const auto& tc = target_->config();
    const auto& tw = target_->weights();
    require_in_range(fn, "token", token, 0, tc.vocab_size - 1);
    require(logits.empty() || logits.size() == static_cast<std::size_t>(tc.vocab_size), fn, "logits.size()",
            "0 or vocab_size", logits.size());
    if (commit) {
      require(position >= s.absorbed, fn, "position", ">= absorbed(request) = " + std::to_string(s.absorbed), position);
      discard_speculation(r);
      if (position > s.absorbed)
        for (auto& ring : rings_) ring.reset(r);
    } else {
      require_equal(fn, "position", s.absorbed + s.chain, position);
    }
    const int n = s.chain + 1;  // tree size: the chain so far plus this token
    const int H = tc.hidden, D = tc.head_dim, Hq = tc.heads, Hkv = tc.kv_heads, F = tc.ffn_hidden;
    std::vector<T> x(tw.embed.begin() + static_cast<std::ptrdiff_t>(token) * H,
                     tw.embed.begin() + static_cast<std::ptrdiff_t>(token + 1) * H);
    std::vector<T> xn(static_cast<std::size_t>(H)), q(static_cast<std::size_t>(Hq) * D), att(q.size()),
        g(static_cast<std::size_t>(F)), u(g.size());
    const std::int32_t pos[1] = {position};
    const rope_params rope{.theta = tc.rope_theta};
    for (int l = 0; l < cfg_.layers; ++l) {
      const auto& W = w_.layers[static_cast<std::size_t>(l)];
      auto &sq = s.q[l], &sk = s.k[l], &sv = s.v[l];  // the chain's rows of this layer, + this token's
      sq.resize(static_cast<std::size_t>(n) * Hq * D);
      sk.resize(static_cast<std::size_t>(n) * Hkv * D);
      sv.resize(sk.size());
      T* qn = sq.data() + static_cast<std::ptrdiff_t>(n - 1) * Hq * D;
      T* kn = sk.data() + static_cast<std::ptrdiff_t>(n - 1) * Hkv * D;
      T* vn = sv.data() + static_cast<std::ptrdiff_t>(n - 1) * Hkv * D;
      rms_norm<T>(x, W.attn_norm, xn, 1, H, tc.norm_eps);
      matmul_nt<T>(xn, W.wq, {qn, static_cast<std::size_t>(Hq) * D}, 1, Hq * D, H);
      matmul_nt<T>(xn, W.wk, {kn, static_cast<std::size_t>(Hkv) * D}, 1, Hkv * D, H);
      matmul_nt<T>(xn, W.wv, {vn, static_cast<std::size_t>(Hkv) * D}, 1, Hkv * D, H);
      apply_rope(host{}, rope, make_view<3>(qn, {1, Hq, D}), std::span<const std::int32_t>(pos));
      apply_rope(host{}, rope, make_view<3>(kn, {1, Hkv, D}), std::span<const std::int32_t>(pos));
      // A committed token whose output nobody reads stops after its last K/V.
      if (!(l == cfg_.layers - 1 && logits.empty())) {
        self_attention(l, r, n, att);
        matmul_nt_add<T>(att, W.wo, x, 1, H, Hq * D);
        // Cache-free cross-attention into the target's cache of the mapped layer, positions < position.
        const int visible = std::min(target_->cache_length(r), position);
        if (visible > 0) {
          rms_norm<T>(x, W.cross_norm, xn, 1, H, tc.norm_eps);
          matmul_nt<T>(xn, W.cq, q, 1, Hq * D, H);
          apply_rope(host{}, rope, make_view<3>(q.data(), {1, Hq, D}), std::span<const std::int32_t>(pos));
          target_->with_layer_kv(cfg_.layer_map[static_cast<std::size_t>(l)],
                                 [&](const auto& cache) { cross(cache, r, visible, q, att); });
          matmul_nt_add<T>(att, W.co, x, 1, H, Hq * D);
        }
        rms_norm<T>(x, W.ffn_norm, xn, 1, H, tc.norm_eps);
        matmul_nt<T>(xn, W.w_gate, g, 1, F, H);
        matmul_nt<T>(xn, W.w_up, u, 1, F, H);
        for (std::size_t i = 0; i < g.size(); ++i) {
          const accum_t<T> a = g[i];
          g[i] = static_cast<T>(a / (accum_t<T>(1) + std::exp(-a)) * u[i]);
        }
        matmul_nt_add<T>(g, W.w_down, x, 1, H, F);
      }
      if (commit) {  // n == 1: the token's K/V enter the ring now (no later layer reads this layer's ring)
        rings_[static_cast<std::size_t>(l)].append(r, make_view<3>(std::as_const(sk).data(), {1, Hkv, D}),
                                                   make_view<3>(std::as_const(sv).data(), {1, Hkv, D}));
      }
    }
    if (commit) {
      s.absorbed = position + 1;
    } else {
      ++s.chain;
    }
    if (!logits.empty()) {
      rms_norm<T>(x, tw.final_norm, xn, 1, H, tc.norm_eps);
      matmul_nt<T>(xn, tw.lm_head, logits, 1, tc.vocab_size, H);
    }
  }

  //! Drops the speculative chain of the current step (its K/V never reached the rings). O(1).
  void discard_speculation(int r) { state_[check_r(r)].chain = 0; }

 private:
  struct request_state {
    std::vector<std::vector<T>> q, k, v;  // per layer: the speculative chain's rows [n, heads, head_dim]
    int chain = 0;                        // speculative tokens in the chain
    int absorbed = 0;
  };
  std::size_t check_r(int r) const {
    require_in_range("specdec::examples::longspec_draft_model", "request", r, 0, static_cast<int>(state_.size()) - 1);
    return static_cast<std::size_t>(r);
  }

  // Sliding-window self-attention of request r's n-token chain (queries, keys and values in the chain
  // buffers of layer l) over the ring's window; writes the last token's output row to `att`.
  void self_attention(int l, int r, int n, std::span<T> att) {
    const auto& tc = target_->config();
    const int D = tc.head_dim, Hq = tc.heads, Hkv = tc.kv_heads;
    const auto& s = state_[static_cast<std::size_t>(r)];
    const auto all = std::as_const(rings_[static_cast<std::size_t>(l)]).layout();
    const std::int64_t off = static_cast<std::int64_t>(r) * all.mapping.slots * Hkv * D;  // request r's slots only
    const ring_kv<const T> one{all.k + off, all.v + off, all.mapping.starts + r, all.mapping.lengths + r, 1,
                               all.mapping.slots, all.mapping.window, Hkv, D, memory_space::host};
    const int wpr = words_per_row(n);
    mask_.assign(static_cast<std::size_t>(n) * wpr, 0);  // a chain: row i sees nodes 0..i
    for (int i = 0; i < n; ++i)
      for (int j = 0; j <= i; ++j) set_bit(mask_.data() + static_cast<std::size_t>(i) * wpr, j);
    const std::int32_t indptr[2] = {0, n};
    const auto qv = make_view<3>(s.q[l].data(), {n, Hq, D});
    const auto kv = make_view<3>(s.k[l].data(), {n, Hkv, D});
    const auto vv = make_view<3>(s.v[l].data(), {n, Hkv, D});
    const auto iv = make_view<1>(indptr, {2});
    const auto mv = make_view<1>(std::as_const(mask_).data(), {static_cast<std::int64_t>(mask_.size())});
    const std::size_t last = static_cast<std::size_t>(n - 1) * Hq * D;
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::hybrid_tree_attention(qv, one, kv, vv, iv, mv);
      std::copy_n(res.out.begin() + static_cast<std::ptrdiff_t>(last), Hq * D, att.begin());
    } else {
      out_.resize(static_cast<std::size_t>(n) * Hq * D);
      lse_.resize(static_cast<std::size_t>(n) * Hq);
      workspace_.reserve(sliding_window_attention_workspace_bytes(host{}, qv, one, iv));
      sliding_window_attention(host{}, qv, one, kv, vv, iv, mv, make_view<3>(out_.data(), {n, Hq, D}),
                               make_view<2>(lse_.data(), {n, Hq}), {.workspace = &workspace_});
      std::copy_n(out_.begin() + static_cast<std::ptrdiff_t>(last), Hq * D, att.begin());
    }
  }

  // Cross-attention of one query (request r) into `cache`, limited to its first `visible` tokens.
  template <class Layout>
  void cross(const Layout& cache, int r, int visible, std::span<const T> q, std::span<T> att) {
    const int R = cache.num_requests(), Hq = target_->config().heads, D = cache.head_dim();
    committed_.assign(static_cast<std::size_t>(R), 0);  // other requests have no query here
    committed_[static_cast<std::size_t>(r)] = visible;
    q_indptr_.resize(static_cast<std::size_t>(R) + 1);
    for (int i = 0; i <= R; ++i) q_indptr_[static_cast<std::size_t>(i)] = i > r ? 1 : 0;
    const auto qv = make_view<3>(q.data(), {1, Hq, D});
    const auto iv = make_view<1>(std::as_const(q_indptr_).data(), {R + 1});
    const std::span<const std::int32_t> lengths(committed_);
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::cross_attention(qv, cache, lengths, iv);
      std::copy(res.out.begin(), res.out.end(), att.begin());
    } else {
      lse_.resize(static_cast<std::size_t>(Hq));
      workspace_.reserve(cross_attention_workspace_bytes(host{}, qv, kv_prefix<Layout>{cache, committed_.data()}, iv));
      cross_attention(host{}, qv, cache, lengths, iv, make_view<3>(att.data(), {1, Hq, D}), make_view<2>(lse_.data(), {1, Hq}),
                      {.workspace = &workspace_});
    }
  }

  const llama_model<T>* target_;
  longspec_draft_config cfg_;
  longspec_draft_weights<T> w_;
  std::vector<ring_kv_cache<T>> rings_;  // per draft layer, all requests
  std::vector<request_state> state_;
  std::vector<mask_word> mask_;
  std::vector<T> out_;
  std::vector<float> lse_;
  std::vector<std::int32_t> committed_, q_indptr_;
  attention_workspace workspace_;
};

static_assert(incremental_draft_model<longspec_draft_model<float>>);
static_assert(check_drafter<longspec_drafter<longspec_draft_model<float>>>());
static_assert(check_drafter<chain_drafter<llama_model<float>>>());

}  // namespace specdec::examples
