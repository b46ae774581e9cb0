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
//! context length; cross-attention allocates nothing per token (it reads the target's cache).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "llama.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/decoder/drafters.hpp"
#include "model_math.hpp"

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

//! GLIDE's default layer mapping: draft layer j reads target layer (target_layers - draft_layers + j).
[[nodiscard]] inline std::vector<int> glide_layer_map(int target_layers, int draft_layers) {
  require(draft_layers >= 1 && draft_layers <= target_layers, "specdec::examples::glide_layer_map", "draft_layers",
          "in [1, target_layers = " + std::to_string(target_layers) + "]", draft_layers);
  std::vector<int> m(static_cast<std::size_t>(draft_layers));
  for (int j = 0; j < draft_layers; ++j) m[static_cast<std::size_t>(j)] = target_layers - draft_layers + j;
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

//! The draft model. Per request it holds a ring of the last `window` committed tokens' self-attention
//! K/V and a small buffer for the tokens it speculates in the current step (dropped by the next step).
template <class T>
class longspec_draft_model {
 public:
  using value_type = T;
  using logit_type = T;

  longspec_draft_model(const llama_model<T>& target, longspec_draft_config c, longspec_draft_weights<T> w)
      : target_(&target), cfg_(std::move(c)), w_(std::move(w)) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model";
    require(cfg_.window >= 1, fn, "config.window", ">= 1", cfg_.window);
    require_equal(fn, "weights.layers.size()", static_cast<std::size_t>(cfg_.layers), w_.layers.size());
    require_equal(fn, "config.layer_map.size()", static_cast<std::size_t>(cfg_.layers), cfg_.layer_map.size());
    require(target.config().heads <= 512, fn, "target heads", "<= 512", target.config().heads);
    const auto& tc = target.config();
    const std::size_t ring = static_cast<std::size_t>(cfg_.window) * tc.kv_heads * tc.head_dim;
    state_.resize(static_cast<std::size_t>(target.max_requests()));
    for (auto& s : state_) {
      s.ring_k.assign(static_cast<std::size_t>(cfg_.layers), std::vector<T>(ring));
      s.ring_v = s.ring_k;
      s.ring_pos.assign(static_cast<std::size_t>(cfg_.window), -1);
    }
  }

  [[nodiscard]] const longspec_draft_config& config() const noexcept { return cfg_; }
  [[nodiscard]] int vocab_size() const noexcept { return target_->vocab_size(); }
  [[nodiscard]] int max_requests() const noexcept { return target_->max_requests(); }
  //! Bytes of draft-owned KV state per request: constant in the context length.
  [[nodiscard]] std::size_t state_bytes() const noexcept {
    const auto& tc = target_->config();
    return static_cast<std::size_t>(cfg_.layers) * cfg_.window * tc.kv_heads * tc.head_dim * 2 * sizeof(T);
  }

  //! Forgets request r's context.
  void reset(int r) {
    auto& s = at(r);
    std::fill(s.ring_pos.begin(), s.ring_pos.end(), -1);
    s.spec_k.clear();
    s.spec_v.clear();
    s.spec_pos.clear();
    s.absorbed = 0;
  }
  //! Tokens before position p - receptive_field() cannot influence any prediction at p or later (each
  //! layer sees `window` tokens back; cross-attention reads the target's cache, not draft state), so a
  //! drafter may start absorbing a long prompt there with an identical result.
  [[nodiscard]] int receptive_field() const noexcept { return cfg_.layers * cfg_.window; }
  //! Committed tokens whose K/V are in the ring's history (the next absorbed token's position).
  [[nodiscard]] int absorbed(int r) const { return state_[static_cast<std::size_t>(r)].absorbed; }

  //! Runs one token at `position`; `commit` = true stores its K/V in the ring (a committed token),
  //! false in the step's speculative buffer. Writes vocab_size logits when non-empty.
  //! O(layers (params + (window + target cache) kv_heads head_dim)).
  void step(int r, std::int32_t token, int position, bool commit, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model::step";
    auto& s = at(r);
    const auto& tc = target_->config();
    const auto& tw = target_->weights();
    require_in_range(fn, "token", token, 0, tc.vocab_size - 1);
    require(logits.empty() || logits.size() == static_cast<std::size_t>(tc.vocab_size), fn, "logits.size()",
            "0 or vocab_size", logits.size());
    const int H = tc.hidden, D = tc.head_dim, Hq = tc.heads, Hkv = tc.kv_heads, F = tc.ffn_hidden;
    const std::size_t kvrow = static_cast<std::size_t>(Hkv) * D;
    std::vector<T> x(tw.embed.begin() + static_cast<std::ptrdiff_t>(token) * H,
                     tw.embed.begin() + static_cast<std::ptrdiff_t>(token + 1) * H);
    std::vector<T> xn(static_cast<std::size_t>(H)), q(static_cast<std::size_t>(Hq) * D), att(q.size()), k(kvrow),
        v(kvrow), g(static_cast<std::size_t>(F)), u(g.size());
    const std::int32_t pos[1] = {position};
    const int slot = position % cfg_.window;
    if (!commit && s.spec_pos.size() == 0) {
      s.spec_k.assign(static_cast<std::size_t>(cfg_.layers), {});
      s.spec_v.assign(static_cast<std::size_t>(cfg_.layers), {});
    }
    for (int l = 0; l < cfg_.layers; ++l) {
      const auto& W = w_.layers[static_cast<std::size_t>(l)];
      // Sliding-window self-attention: keys at positions (position - window, position].
      rms_norm<T>(x, W.attn_norm, xn, 1, H, tc.norm_eps);
      matmul_nt<T>(xn, W.wq, q, 1, Hq * D, H);
      matmul_nt<T>(xn, W.wk, k, 1, Hkv * D, H);
      matmul_nt<T>(xn, W.wv, v, 1, Hkv * D, H);
      apply_rope(host{}, rope_params{.theta = tc.rope_theta}, make_view<3>(q.data(), {1, Hq, D}), std::span<const std::int32_t>(pos));
      apply_rope(host{}, rope_params{.theta = tc.rope_theta}, make_view<3>(k.data(), {1, Hkv, D}), std::span<const std::int32_t>(pos));
      // Store this token's K/V first (the slot it overwrites, position - window, is outside every
      // window from here on); a committed token whose output nobody reads stops after its last K/V.
      if (commit) {
        std::copy(k.begin(), k.end(), s.ring_k[l].begin() + slot * static_cast<std::ptrdiff_t>(kvrow));
        std::copy(v.begin(), v.end(), s.ring_v[l].begin() + slot * static_cast<std::ptrdiff_t>(kvrow));
      } else {
        s.spec_k[l].insert(s.spec_k[l].end(), k.begin(), k.end());
        s.spec_v[l].insert(s.spec_v[l].end(), v.begin(), v.end());
      }
      if (l == cfg_.layers - 1 && logits.empty()) break;
      keys_.clear();
      for (int j = 0; j < cfg_.window; ++j) {
        const int p = s.ring_pos[static_cast<std::size_t>(j)];
        if (p >= 0 && p < position && p > position - cfg_.window)
          keys_.push_back({s.ring_k[l].data() + j * kvrow, s.ring_v[l].data() + j * kvrow});
      }
      if (!commit)
        for (std::size_t j = 0; j < s.spec_pos.size(); ++j)
          if (s.spec_pos[j] > position - cfg_.window)
            keys_.push_back({s.spec_k[l].data() + j * kvrow, s.spec_v[l].data() + j * kvrow});
      keys_.push_back({k.data(), v.data()});
      attend(q, Hq, Hkv, D, att);
      matmul_nt_add<T>(att, W.wo, x, 1, H, Hq * D);
      // Cache-free cross-attention into the target's cache of the mapped layer, positions < position.
      const auto cache = target_->layer_kv(cfg_.layer_map[static_cast<std::size_t>(l)]);
      const int visible = std::min(cache.length(r), position);
      if (visible > 0) {
        rms_norm<T>(x, W.cross_norm, xn, 1, H, tc.norm_eps);
        matmul_nt<T>(xn, W.cq, q, 1, Hq * D, H);
        apply_rope(host{}, rope_params{.theta = tc.rope_theta}, make_view<3>(q.data(), {1, Hq, D}), std::span<const std::int32_t>(pos));
        if constexpr (std::is_same_v<T, double>) {  // the attention primitives take float, half, bfloat16
          keys_.clear();
          for (int j = 0; j < visible; ++j) keys_.push_back({cache.k_row(r, j, 0), cache.v_row(r, j, 0)});
          attend(q, Hq, Hkv, D, att);
        } else {  // cache-free: the target's rows are read in place through a one-request layout
          const contiguous_kv<const T> one{cache.k + cache.row_offset(r, 0, 0), cache.v + cache.row_offset(r, 0, 0),
                                           &visible, 1, cache.max_tokens, Hkv, D, memory_space::host};
          const std::int32_t indptr[2] = {0, 1};
          float lse[512];
          const auto qv = make_view<3>(q.data(), {1, Hq, D});
          const auto iv = make_view<1>(indptr, {2});
          workspace_.reserve(decode_attention_workspace_bytes(host{}, qv, one, iv));
          decode_attention(host{}, qv, one, iv, make_view<3>(att.data(), {1, Hq, D}), make_view<2>(lse, {1, Hq}),
                           {.workspace = &workspace_});
        }
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
    if (commit) {
      s.ring_pos[static_cast<std::size_t>(slot)] = position;
      s.absorbed = position + 1;
    } else {
      s.spec_pos.push_back(position);
    }
    if (!logits.empty()) {
      rms_norm<T>(x, tw.final_norm, xn, 1, H, tc.norm_eps);
      matmul_nt<T>(xn, tw.lm_head, logits, 1, tc.vocab_size, H);
    }
  }

  //! Drops the speculative tokens of the current step (their K/V never reach the ring).
  void discard_speculation(int r) {
    auto& s = at(r);
    s.spec_pos.clear();
    s.spec_k.clear();
    s.spec_v.clear();
  }

 private:
  struct request_state {
    std::vector<std::vector<T>> ring_k, ring_v, spec_k, spec_v;  // per layer
    std::vector<int> ring_pos, spec_pos;
    int absorbed = 0;
  };
  struct kv_ptr {
    const T* k;
    const T* v;
  };
  request_state& at(int r) {
    require_in_range("specdec::examples::longspec_draft_model", "request", r, 0, static_cast<int>(state_.size()) - 1);
    return state_[static_cast<std::size_t>(r)];
  }
  // Softmax attention of one token's Hq heads over keys_ (rows of [Hkv, D]).
  void attend(std::span<const T> q, int Hq, int Hkv, int D, std::span<T> out) {
    using A = accum_t<T>;
    const A scale = A(1) / std::sqrt(static_cast<A>(D));
    std::vector<A> sc(keys_.size()), acc(static_cast<std::size_t>(D));
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / (Hq / Hkv);
      const T* qh = q.data() + static_cast<std::ptrdiff_t>(h) * D;
      A mx = -INFINITY;
      for (std::size_t j = 0; j < keys_.size(); ++j)
        mx = std::max(mx, sc[j] = dot(qh, keys_[j].k + static_cast<std::ptrdiff_t>(hk) * D, D) * scale);
      std::fill(acc.begin(), acc.end(), A(0));
      A den = 0;
      for (std::size_t j = 0; j < keys_.size(); ++j) {
        const A p = std::exp(sc[j] - mx);
        den += p;
        const T* vr = keys_[j].v + static_cast<std::ptrdiff_t>(hk) * D;
        for (int d = 0; d < D; ++d) acc[d] += p * static_cast<A>(vr[d]);
      }
      for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(h) * D + d] = static_cast<T>(acc[d] / den);
    }
  }

  const llama_model<T>* target_;
  longspec_draft_config cfg_;
  longspec_draft_weights<T> w_;
  std::vector<request_state> state_;
  std::vector<kv_ptr> keys_;
  attention_workspace workspace_;
};

static_assert(incremental_draft_model<longspec_draft_model<float>>);
static_assert(check_drafter<longspec_drafter<longspec_draft_model<float>>>());
static_assert(check_drafter<chain_drafter<llama_model<float>>>());

}  // namespace specdec::examples
