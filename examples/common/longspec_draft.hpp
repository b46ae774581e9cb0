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
//! target's cache in place). The speculative nodes' rows (a chain or a beam tree: tens of tokens) are
//! scratch of the step.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <tuple>
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

  //! Every tensor has the size a draft of `draft_layers` layers over a target of geometry `t` reads:
  //! throws specdec::invalid_argument naming the first tensor that does not.
  void validate(const llama_config& t, int draft_layers, std::string_view fn) const {
    require_equal(fn, "weights.layers.size()", static_cast<std::size_t>(draft_layers), layers.size());
    const auto H = static_cast<std::size_t>(t.hidden), F = static_cast<std::size_t>(t.ffn_hidden),
               Dq = static_cast<std::size_t>(t.heads) * t.head_dim, Dk = static_cast<std::size_t>(t.kv_heads) * t.head_dim;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& L = layers[l];
      const std::string at = "weights.layers[" + std::to_string(l) + "].";
      for (const auto& [name, got, want] :
           {std::tuple{"attn_norm", L.attn_norm.size(), H}, {"wq", L.wq.size(), Dq * H}, {"wk", L.wk.size(), Dk * H},
            {"wv", L.wv.size(), Dk * H}, {"wo", L.wo.size(), H * Dq}, {"cross_norm", L.cross_norm.size(), H},
            {"cq", L.cq.size(), Dq * H}, {"co", L.co.size(), H * Dq}, {"ffn_norm", L.ffn_norm.size(), H},
            {"w_gate", L.w_gate.size(), F * H}, {"w_up", L.w_up.size(), F * H}, {"w_down", L.w_down.size(), H * F}})
        require_equal(fn, at + name + ".size()", want, got);
    }
  }
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

//! Loads trained draft weights (examples/training/train.py's names: "draft.layers.{j}." followed by
//! input_layernorm, self_attn.{q,k,v,o}_proj, cross_attn_layernorm, cross_attn.{q,o}_proj,
//! post_attention_layernorm, mlp.{gate,up,down}_proj, each ".weight") for a target of geometry `t`.
//! The metadata gives draft_layers, window and layer_map (comma-separated target layers), which are
//! written to `c`. Throws naming the missing or mis-shaped tensor or metadata entry. O(draft parameters).
template <class T>
[[nodiscard]] longspec_draft_weights<T> load_longspec_draft(const safetensors_file& f, const llama_config& t,
                                                           longspec_draft_config& c) {
  constexpr std::string_view fn = "specdec::examples::load_longspec_draft";
  c.layers = f.metadata_int("draft_layers", 1, t.layers);
  c.window = f.metadata_int("window", 1, INT_MAX);
  c.layer_map.clear();
  const std::string& map = f.metadata_entry("layer_map");
  for (std::size_t at = 0; at <= map.size();) {  // comma-separated target layers
    const std::size_t comma = std::min(map.find(',', at), map.size());
    c.layer_map.push_back(safetensors_file::parse_metadata_int(map.substr(at, comma - at), "layer_map", 0, t.layers - 1));
    at = comma + 1;
  }
  require_equal(fn, "metadata layer_map entries", static_cast<std::size_t>(c.layers), c.layer_map.size());
  const std::int64_t H = t.hidden, Dq = t.heads * t.head_dim, Dk = t.kv_heads * t.head_dim, F = t.ffn_hidden;
  longspec_draft_weights<T> w;
  for (int j = 0; j < c.layers; ++j) {
    const std::string p = "draft.layers." + std::to_string(j) + ".";
    w.layers.push_back({f.read<T>(p + "input_layernorm.weight", {H}), f.read<T>(p + "self_attn.q_proj.weight", {Dq, H}),
                        f.read<T>(p + "self_attn.k_proj.weight", {Dk, H}), f.read<T>(p + "self_attn.v_proj.weight", {Dk, H}),
                        f.read<T>(p + "self_attn.o_proj.weight", {H, Dq}), f.read<T>(p + "cross_attn_layernorm.weight", {H}),
                        f.read<T>(p + "cross_attn.q_proj.weight", {Dq, H}), f.read<T>(p + "cross_attn.o_proj.weight", {H, Dq}),
                        f.read<T>(p + "post_attention_layernorm.weight", {H}), f.read<T>(p + "mlp.gate_proj.weight", {F, H}),
                        f.read<T>(p + "mlp.up_proj.weight", {F, H}), f.read<T>(p + "mlp.down_proj.weight", {H, F})});
  }
  return w;
}

//! The draft model. Per draft layer it owns a specdec::ring_kv_cache (kv/ring_kv.hpp) of the last
//! `window` committed tokens' self-attention K/V for every request (constant size, allocated once),
//! and per request the speculative tree of the current step (the nodes step() with commit = false and
//! step_tree() ran since the last discard_speculation), which never reaches the ring.
//!
//! Attention (all through the library; no attention loop here):
//!  - self-attention: specdec::sliding_window_attention (attention/sliding_window_attention.hpp) with
//!    tree-structured queries: the speculative nodes are the draft tree, each sees the ring's window
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

  //! Preconditions (checked): window >= 1, one weight block of the target's geometry and one
  //! layer_map entry per draft layer. A window longer than the target's capacity is cut to it (the
  //! ring could never hold more; the rings are allocated for the window).
  longspec_draft_model(const llama_model<T>& target, longspec_draft_config c, longspec_draft_weights<T> w)
      : target_(&target), cfg_(std::move(c)), w_(std::move(w)) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model";
    require(cfg_.window >= 1, fn, "config.window", ">= 1", cfg_.window);
    cfg_.window = std::min(cfg_.window, target.capacity());
    w_.validate(target.config(), cfg_.layers, fn);
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
  //! receptive_field() cannot matter); its K/V enter the rings. commit = false: a speculative token
  //! whose parent is the newest speculative node (-1 = the committed context when there is none), so
  //! step() alone extends a chain (position == absorbed(r) + chain length; in general absorbed(r) +
  //! the new node's depth). Writes vocab_size logits when non-empty.
  //! O(layers (params + n (window + n) + target cache) kv_heads head_dim), n = speculative nodes + 1.
  void step(int r, std::int32_t token, int position, bool commit, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model::step";
    auto& s = state_[check_r(r)];
    const auto& tc = target_->config();
    require_in_range(fn, "token", token, 0, tc.vocab_size - 1);
    require(logits.empty() || logits.size() == static_cast<std::size_t>(tc.vocab_size), fn, "logits.size()",
            "0 or vocab_size", logits.size());
    const std::int32_t tok[1] = {token}, pos[1] = {position};
    if (commit) {
      require(position >= s.absorbed && position < std::numeric_limits<int>::max(), fn, "position",
              "in [absorbed(request) = " + std::to_string(s.absorbed) + ", INT_MAX) (absorbed(request) becomes position + 1)",
              position);
      discard_speculation(r);
      if (position > s.absorbed)
        for (auto& ring : rings_) ring.reset(r);
      forward(r, tok, pos, true, logits);
      s.absorbed = position + 1;
      return;
    }
    const std::int32_t parent = s.nodes - 1;
    new_depth_.assign(1, depth_below(s, parent));
    require_equal(fn, "position", std::int64_t{s.absorbed} + new_depth_[0], std::int64_t{position});
    add_nodes(s, std::span<const std::int32_t>(&parent, 1));
    forward(r, tok, pos, false, logits);
    ++s.nodes;
  }

  //! Tree forward (the optional member longspec_drafter detects, see specdec::tree_draft_model): runs m
  //! = tokens.size() new speculative nodes of request r in ONE forward. Speculative nodes are numbered
  //! in the order they were run since the last discard_speculation(r) (step() with commit = false
  //! included), so this call's node i gets number speculative_nodes(r) + i. parents[i] is the number of
  //! an earlier speculative node (of an earlier call or an earlier entry of this one) or -1 (a child of
  //! the committed context); positions[i] must be absorbed(r) + depth, depth = 0 for a child of the
  //! context, parent's depth + 1 otherwise. Each node attends, per layer, to the ring window (the same
  //! window step() shows: the W newest committed tokens) plus its speculative ancestors and itself
  //! (the ancestor mask), and cross-attends to the target's cache before its position; every node's K/V
  //! stay for the nodes run after it, until discard_speculation(r). Writes m x vocab_size logits (row i
  //! = node i) when logits is non-empty. A node's row equals what step() gives when its root path is
  //! run token by token: exactly for double, up to the attention kernels' rounding for float (the
  //! batched calls may pick other host kernels than one-token ones).
  //! O(layers (m params + n (window + n) + m target cache) kv_heads head_dim), n = speculative nodes + m.
  void step_tree(int r, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                 std::span<const std::int32_t> positions, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::longspec_draft_model::step_tree";
    auto& s = state_[check_r(r)];
    const auto& tc = target_->config();
    const std::size_t m = tokens.size();
    require_equal(fn, "parents.size()", m, parents.size());
    require_equal(fn, "positions.size()", m, positions.size());
    require(logits.empty() || logits.size() == m * static_cast<std::size_t>(tc.vocab_size), fn, "logits.size()",
            "0 or tokens.size() * vocab_size = " + std::to_string(m * static_cast<std::size_t>(tc.vocab_size)),
            logits.size());
    new_depth_.resize(m);
    for (std::size_t i = 0; i < m; ++i) {  // all checked before any state changes
      require_in_range(fn, "tokens[i]", tokens[i], 0, tc.vocab_size - 1);
      require_in_range(fn, "parents[i]", parents[i], -1, s.nodes + static_cast<int>(i) - 1);
      new_depth_[i] = depth_below(s, parents[i]);
      require_equal(fn, "positions[i]", std::int64_t{s.absorbed} + new_depth_[i], std::int64_t{positions[i]});
    }
    if (m == 0) return;
    add_nodes(s, parents);
    forward(r, tokens, positions, false, logits);
    s.nodes += static_cast<int>(m);
  }

  //! Speculative nodes of request r since the last discard_speculation(r).
  [[nodiscard]] int speculative_nodes(int r) const { return state_[check_r(r)].nodes; }

  //! Drops all speculative nodes of request r (their K/V never reached the rings). O(1).
  void discard_speculation(int r) { state_[check_r(r)].nodes = 0; }

 private:
  struct request_state {
    std::vector<std::vector<T>> q, k, v;  // per layer: the speculative nodes' rows [n, heads, head_dim]
    std::vector<std::int32_t> parent, depth;  // per speculative node
    int nodes = 0;                        // speculative nodes (the first `nodes` rows above)
    int absorbed = 0;
  };
  std::size_t check_r(int r) const {
    require_in_range("specdec::examples::longspec_draft_model", "request", r, 0, static_cast<int>(state_.size()) - 1);
    return static_cast<std::size_t>(r);
  }
  // Depth of a new child of speculative node p (p >= s.nodes: a node of the call being validated,
  // whose depth is in new_depth_).
  int depth_below(const request_state& s, int p) const {
    if (p < 0) return 0;
    return (p < s.nodes ? s.depth[static_cast<std::size_t>(p)] : new_depth_[static_cast<std::size_t>(p - s.nodes)]) + 1;
  }
  // Records the parents and depths (new_depth_) of validated new nodes s.nodes, s.nodes + 1, ...
  // (s.nodes itself moves only after their forward).
  void add_nodes(request_state& s, std::span<const std::int32_t> parents) const {
    const std::size_t n0 = static_cast<std::size_t>(s.nodes);
    s.parent.resize(n0 + parents.size());
    s.depth.resize(n0 + parents.size());
    std::copy(parents.begin(), parents.end(), s.parent.begin() + static_cast<std::ptrdiff_t>(n0));
    std::copy_n(new_depth_.begin(), parents.size(), s.depth.begin() + static_cast<std::ptrdiff_t>(n0));
  }

  // The one forward of step() and step_tree(): m = tokens.size() new nodes. commit: m == 1, a committed
  // token (speculation already dropped) whose K/V go to the rings; otherwise the new speculative nodes
  // s.nodes .. s.nodes + m - 1 (parents recorded by add_nodes), whose K/V rows stay in the request's
  // speculative buffers. Every row goes through the same code whatever m (model_math.hpp's matmuls are
  // row-invariant; the attention calls see all speculative nodes under the ancestor mask).
  void forward(int r, std::span<const std::int32_t> tokens, std::span<const std::int32_t> positions, bool commit,
               std::span<logit_type> logits) {
    auto& s = state_[static_cast<std::size_t>(r)];
    const auto& tc = target_->config();
    const auto& tw = target_->weights();
    const int m = static_cast<int>(tokens.size());
    const int n = commit ? 1 : s.nodes + m;  // tree size: the speculative nodes plus the new ones
    const int first = n - m;
    const int H = tc.hidden, D = tc.head_dim, Hq = tc.heads, Hkv = tc.kv_heads, F = tc.ffn_hidden;
    const std::size_t mm = static_cast<std::size_t>(m);
    std::vector<T> x(mm * H);
    for (int i = 0; i < m; ++i)
      std::copy_n(tw.embed.begin() + static_cast<std::ptrdiff_t>(tokens[static_cast<std::size_t>(i)]) * H, H,
                  x.begin() + static_cast<std::ptrdiff_t>(i) * H);
    std::vector<T> xn(mm * H), q(mm * Hq * D), att(q.size()), g(mm * F), u(g.size());
    const rope_params rope{.theta = tc.rope_theta};
    // The ancestor mask of the n nodes (row i: i and its ancestors), shared by every layer.
    const int wpr = words_per_row(n);
    mask_.assign(static_cast<std::size_t>(n) * wpr, 0);
    for (int i = 0; i < n; ++i) {
      mask_word* row = mask_.data() + static_cast<std::size_t>(i) * wpr;
      const int p = commit ? -1 : s.parent[static_cast<std::size_t>(i)];
      if (p >= 0) std::copy_n(mask_.data() + static_cast<std::size_t>(p) * wpr, wpr, row);
      set_bit(row, i);
    }
    for (int l = 0; l < cfg_.layers; ++l) {
      const auto& W = w_.layers[static_cast<std::size_t>(l)];
      auto &sq = s.q[l], &sk = s.k[l], &sv = s.v[l];  // the speculative nodes' rows of this layer, + the new ones
      sq.resize(static_cast<std::size_t>(n) * Hq * D);
      sk.resize(static_cast<std::size_t>(n) * Hkv * D);
      sv.resize(sk.size());
      T* qn = sq.data() + static_cast<std::ptrdiff_t>(first) * Hq * D;
      T* kn = sk.data() + static_cast<std::ptrdiff_t>(first) * Hkv * D;
      T* vn = sv.data() + static_cast<std::ptrdiff_t>(first) * Hkv * D;
      rms_norm<T>(x, W.attn_norm, xn, m, H, tc.norm_eps);
      matmul_nt<T>(xn, W.wq, {qn, mm * Hq * D}, m, Hq * D, H);
      matmul_nt<T>(xn, W.wk, {kn, mm * Hkv * D}, m, Hkv * D, H);
      matmul_nt<T>(xn, W.wv, {vn, mm * Hkv * D}, m, Hkv * D, H);
      apply_rope(host{}, rope, make_view<3>(qn, {m, Hq, D}), positions);
      apply_rope(host{}, rope, make_view<3>(kn, {m, Hkv, D}), positions);
      // A committed token whose output nobody reads stops after its last K/V.
      if (!(l == cfg_.layers - 1 && logits.empty())) {
        self_attention(l, r, n, first, att);
        matmul_nt_add<T>(att, W.wo, x, m, H, Hq * D);
        // Cache-free cross-attention into the target's cache of the mapped layer, positions < the
        // node's own: one call per run of nodes with the same visible length (a beam level is one run).
        for (int a = 0; a < m;) {
          const int visible = std::min(target_->cache_length(r), positions[static_cast<std::size_t>(a)]);
          int b = a + 1;
          while (b < m && std::min(target_->cache_length(r), positions[static_cast<std::size_t>(b)]) == visible) ++b;
          if (visible > 0) {
            const std::size_t c = static_cast<std::size_t>(b - a);
            const auto rows = [&](std::vector<T>& v, int width) {
              return std::span<T>(v).subspan(static_cast<std::size_t>(a) * width, c * width);
            };
            rms_norm<T>(rows(x, H), W.cross_norm, rows(xn, H), b - a, H, tc.norm_eps);
            matmul_nt<T>(rows(xn, H), W.cq, rows(q, Hq * D), b - a, Hq * D, H);
            apply_rope(host{}, rope, make_view<3>(rows(q, Hq * D).data(), {b - a, Hq, D}), positions.subspan(static_cast<std::size_t>(a), c));
            target_->with_layer_kv(cfg_.layer_map[static_cast<std::size_t>(l)],
                                   [&](const auto& cache) { cross(cache, r, visible, rows(q, Hq * D), rows(att, Hq * D)); });
            matmul_nt_add<T>(rows(att, Hq * D), W.co, rows(x, H), b - a, H, Hq * D);
          }
          a = b;
        }
        rms_norm<T>(x, W.ffn_norm, xn, m, H, tc.norm_eps);
        matmul_nt<T>(xn, W.w_gate, g, m, F, H);
        matmul_nt<T>(xn, W.w_up, u, m, F, H);
        for (std::size_t i = 0; i < g.size(); ++i) {
          const accum_t<T> a = g[i];
          g[i] = static_cast<T>(a / (accum_t<T>(1) + std::exp(-a)) * u[i]);
        }
        matmul_nt_add<T>(g, W.w_down, x, m, H, F);
      }
      if (commit) {  // n == 1: the token's K/V enter the ring now (no later layer reads this layer's ring)
        rings_[static_cast<std::size_t>(l)].append(r, make_view<3>(std::as_const(sk).data(), {1, Hkv, D}),
                                                   make_view<3>(std::as_const(sv).data(), {1, Hkv, D}));
      }
    }
    if (!logits.empty()) {
      rms_norm<T>(x, tw.final_norm, xn, m, H, tc.norm_eps);
      matmul_nt<T>(xn, tw.lm_head, logits, m, tc.vocab_size, H);
    }
  }

  // Sliding-window self-attention of request r's n speculative nodes (queries, keys and values in the
  // node buffers of layer l, ancestor mask in mask_) over the ring's window; writes the output rows of
  // nodes first .. n - 1 to `att`.
  void self_attention(int l, int r, int n, int first, std::span<T> att) {
    const auto& tc = target_->config();
    const int D = tc.head_dim, Hq = tc.heads, Hkv = tc.kv_heads;
    const auto& s = state_[static_cast<std::size_t>(r)];
    const auto all = std::as_const(rings_[static_cast<std::size_t>(l)]).layout();
    const std::int64_t off = static_cast<std::int64_t>(r) * all.mapping.slots * Hkv * D;  // request r's slots only
    const ring_kv<const T> one{all.k + off, all.v + off, all.mapping.starts + r, all.mapping.lengths + r, 1,
                               all.mapping.slots, all.mapping.window, Hkv, D, memory_space::host};
    const std::int32_t indptr[2] = {0, n};
    const auto qv = make_view<3>(s.q[l].data(), {n, Hq, D});
    const auto kv = make_view<3>(s.k[l].data(), {n, Hkv, D});
    const auto vv = make_view<3>(s.v[l].data(), {n, Hkv, D});
    const auto iv = make_view<1>(indptr, {2});
    const auto mv = make_view<1>(std::as_const(mask_).data(), {static_cast<std::int64_t>(mask_.size())});
    const std::size_t from = static_cast<std::size_t>(first) * Hq * D, count = static_cast<std::size_t>(n - first) * Hq * D;
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::hybrid_tree_attention(qv, one, kv, vv, iv, mv);
      std::copy_n(res.out.begin() + static_cast<std::ptrdiff_t>(from), count, att.begin());
    } else {
      out_.resize(static_cast<std::size_t>(n) * Hq * D);
      lse_.resize(static_cast<std::size_t>(n) * Hq);
      workspace_.reserve(sliding_window_attention_workspace_bytes(host{}, qv, one, iv));
      sliding_window_attention(host{}, qv, one, kv, vv, iv, mv, make_view<3>(out_.data(), {n, Hq, D}),
                               make_view<2>(lse_.data(), {n, Hq}), {.workspace = &workspace_});
      std::copy_n(out_.begin() + static_cast<std::ptrdiff_t>(from), count, att.begin());
    }
  }

  // Cross-attention of q.size() / (heads head_dim) queries of request r into `cache`, limited to its
  // first `visible` tokens.
  template <class Layout>
  void cross(const Layout& cache, int r, int visible, std::span<const T> q, std::span<T> att) {
    const int R = cache.num_requests(), Hq = target_->config().heads, D = cache.head_dim();
    const int m = static_cast<int>(q.size() / (static_cast<std::size_t>(Hq) * D));
    committed_.assign(static_cast<std::size_t>(R), 0);  // other requests have no query here
    committed_[static_cast<std::size_t>(r)] = visible;
    q_indptr_.resize(static_cast<std::size_t>(R) + 1);
    for (int i = 0; i <= R; ++i) q_indptr_[static_cast<std::size_t>(i)] = i > r ? m : 0;
    const auto qv = make_view<3>(q.data(), {m, Hq, D});
    const auto iv = make_view<1>(std::as_const(q_indptr_).data(), {R + 1});
    const std::span<const std::int32_t> lengths(committed_);
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::cross_attention(qv, cache, lengths, iv);
      std::copy(res.out.begin(), res.out.end(), att.begin());
    } else {
      lse_.resize(static_cast<std::size_t>(m) * Hq);
      workspace_.reserve(cross_attention_workspace_bytes(host{}, qv, kv_prefix<Layout>{cache, committed_.data()}, iv));
      cross_attention(host{}, qv, cache, lengths, iv, make_view<3>(att.data(), {m, Hq, D}), make_view<2>(lse_.data(), {m, Hq}),
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
  std::vector<std::int32_t> committed_, q_indptr_, new_depth_;
  attention_workspace workspace_;
};

static_assert(incremental_draft_model<longspec_draft_model<float>>);
static_assert(tree_draft_model<longspec_draft_model<float>> && tree_draft_model<longspec_draft_model<double>>);
static_assert(check_drafter<longspec_drafter<longspec_draft_model<float>>>());
static_assert(check_drafter<chain_drafter<llama_model<float>>>());

}  // namespace specdec::examples
