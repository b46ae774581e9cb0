#pragma once
//! \file array_llama.hpp
//! The reference LLaMA (llama.hpp's architecture and weights) written the way a GPU engine holds a
//! step: every per-step value in flat arrays in the backend's memory, and the step's work done by the
//! library's array-form primitives under one execution policy:
//!   build_tree_batch        masks and positions of the step's rows (tree_batch_rows::root_and_nodes:
//!                           each entry's root row, then its nodes', from the plain trees)
//!   apply_rope              Q and K at those positions
//!   hybrid_tree_attention   the committed cache read in place plus the step's own rows, masked
//!   kv_commit_in_place_batch  the accepted rows moved down in every layer (commit_batch)
//! with the model's own dense parts (embedding, RMSNorm, the matmuls, SwiGLU) from an `Ops` backend:
//! host_ops below (the examples' host math, std::vector memory), cuda_ops in array_llama.cuh (cuBLAS
//! and small kernels, device memory). The same class is therefore a host target, run by the tests in
//! CI, and a GPU target whose logits stay on the device (examples/gpu_decode.cu).
//!
//! Layout. Each layer's K and V caches are [slots, capacity, kv_heads, head_dim] in the backend's
//! memory; a slot caches its committed tokens except the last (the root, speculative_batch's
//! convention). A step writes each entry's rows -- its root, then its tree's nodes -- at cache rows
//! length, length + 1, ... (root at position length = committed - 1, node i at committed + depth(i)),
//! attends over the first `length` rows plus those rows (spec K/V), and commit_batch keeps the root
//! and moves each accepted node down (kv_commit_in_place_batch, committed lengths = length + 1).
//! The step's attention reads the cache through a mapping over the batch's entries (`entry_slots`:
//! entry e -> its slot's rows), so one call covers any set of slots, in place.
//!
//! Batch invariance. A row's logits do not depend on which other requests share its step: attention
//! uses a fixed KV split (llama.hpp's attention_kv_split) and, on CUDA, a fixed number of cache
//! parts (attention_options::kv_chunks), and the backends' matmuls compute each output row the same
//! way whatever the row count (host_ops: one row at a time; cuda_ops: every matmul over the same
//! padded row count, padded_rows(); see there). What still differs in the last bits is a token's
//! own context: reached as a tree node, its ancestors are the step's rows (the attention's tree
//! part); reached autoregressively, they are cached rows (its cache part), summed in another order
//! (about 1e-6 relative in float). So greedy speculative decoding reproduces greedy autoregressive
//! decoding except where two logits are that close (the tests' models have no such ties;
//! gpu_decode.cu tells a tie from a real difference).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "llama.hpp"
#include "model_math.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/kv_cache.hpp"
#include "specdec/position/rope.hpp"
#include "specdec/tree/tree_batch.hpp"

namespace specdec::examples {

//! The attention's and the commit's view of the cache: entry e of the step reads slot slots[e]'s
//! rows, the first lengths[e] of them visible. Arrays in the backend's memory (device-callable).
struct entry_slots {
  const std::int32_t* slots = nullptr;
  const std::int32_t* lengths = nullptr;
  int tokens = 0;  //!< each slot's capacity
  [[nodiscard]] SPECDEC_HOST_DEVICE std::int64_t offset(int e, int t, int h, const kv_geometry& g) const noexcept {
    return ((static_cast<std::int64_t>(slots[e]) * tokens + t) * g.num_kv_heads + h) * g.head_dim;
  }
  [[nodiscard]] SPECDEC_HOST_DEVICE int length(int e) const noexcept { return lengths[e]; }
  [[nodiscard]] SPECDEC_HOST_DEVICE int capacity(int) const noexcept { return tokens; }
};

//! The host backend: the examples' host math (model_math.hpp) over std::vector memory; KV is the
//! element type of the cache and of the attention's operands (float, half or bfloat16; cuda_ops
//! uses half, the CUDA attention's tensor-core types).
template <class KV = float>
struct host_ops {
  using policy_type = host;
  using kv_type = KV;
  static constexpr memory_space space = memory_space::host;
  template <class T>
  using array = std::vector<T>;

  template <class T>
  static array<T> make(std::size_t n) {
    return array<T>(n);
  }
  template <class T>
  void upload(array<T>& to, std::span<const T> from) {
    require(from.size() <= to.size(), "specdec::examples::host_ops::upload", "from.size()", "<= the array's", from.size());
    std::copy(from.begin(), from.end(), to.begin());
  }
  template <class T>
  void download(const array<T>& from, std::span<T> to) {
    std::copy_n(from.begin(), to.size(), to.begin());
  }
  [[nodiscard]] policy_type policy() const noexcept { return {}; }
  void synchronize() {}
  //! Rows an activation of m rows is allocated with (cuda_ops pads its matmuls; the host does not).
  [[nodiscard]] std::size_t padded_rows(int m) const noexcept { return static_cast<std::size_t>(m); }

  //! x[t] = table[tokens[t]], rows of `hidden`.
  void embed(const std::int32_t* tokens, int m, const float* table, int hidden, float* x) {
    for (int t = 0; t < m; ++t)
      std::copy_n(table + static_cast<std::ptrdiff_t>(tokens[t]) * hidden, hidden, x + static_cast<std::ptrdiff_t>(t) * hidden);
  }
  void rms_norm(const float* x, const float* w, float* y, int m, int hidden, double eps) {
    const auto n = static_cast<std::size_t>(m) * hidden;
    examples::rms_norm<float>({x, n}, {w, static_cast<std::size_t>(hidden)}, {y, n}, m, hidden, eps);
  }
  //! y[m, out] = x[m, in] W[out, in]^T (+= when add), one row at a time (batch invariant).
  void matmul_nt(const float* x, const float* W, float* y, int m, int out, int in, bool add) {
    const std::span<const float> w{W, static_cast<std::size_t>(out) * in};
    for (int t = 0; t < m; ++t) {
      const std::span<const float> xr{x + static_cast<std::ptrdiff_t>(t) * in, static_cast<std::size_t>(in)};
      const std::span<float> yr{y + static_cast<std::ptrdiff_t>(t) * out, static_cast<std::size_t>(out)};
      if (add) examples::matmul_nt_add<float>(xr, w, yr, 1, out, in);
      else examples::matmul_nt<float>(xr, w, yr, 1, out, in);
    }
  }
  //! g = silu(g) * u (llama.hpp's SwiGLU, in float).
  void silu_mul(float* g, const float* u, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  //! to[i] = KV(from[i]) and back, n elements.
  void to_kv(const float* from, KV* to, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<KV>(from[i]);
  }
  void from_kv(const KV* from, float* to, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<float>(from[i]);
  }
  //! cache row rows[t] (of `width` elements) = src row t, for K and V alike.
  void scatter_rows(const KV* k_src, const KV* v_src, KV* k_cache, KV* v_cache, const std::int64_t* rows, int m,
                    int width) {
    for (int t = 0; t < m; ++t) {
      std::copy_n(k_src + static_cast<std::ptrdiff_t>(t) * width, width, k_cache + rows[t] * width);
      std::copy_n(v_src + static_cast<std::ptrdiff_t>(t) * width, width, v_cache + rows[t] * width);
    }
  }
};

//! The target (decoder/concepts.hpp: forward_batch, commit_batch, commit, prefill, release) over an
//! `Ops` backend; see the file comment. float weights, activations and logits; the cache, and the
//! attention's operands, in Ops::kv_type (converted around the attention call).
template <class Ops>
class array_llama {
 public:
  using logit_type = float;
  using kv_type = typename Ops::kv_type;
  template <class T>
  using array = typename Ops::template array<T>;

  //! `max_requests` slots of `capacity` cached tokens each. Throws invalid_argument on a bad config.
  array_llama(const llama_config& cfg, const llama_weights<float>& w, int max_requests, int capacity, Ops ops = {})
      : cfg_(cfg), ops_(std::move(ops)), max_requests_(max_requests), capacity_(capacity) {
    constexpr std::string_view fn = "specdec::examples::array_llama";
    w.validate(cfg, fn);  // the config, then every tensor's size
    require(max_requests >= 1, fn, "max_requests", ">= 1", max_requests);
    require(capacity >= 2, fn, "capacity", ">= 2", capacity);
    const auto up = [&](const std::vector<float>& h, std::size_t n, std::string_view) {
      auto a = Ops::template make<float>(n);
      ops_.upload(a, std::span<const float>(h));
      return a;
    };
    const std::size_t H = cfg.hidden, V = cfg.vocab_size, F = cfg.ffn_hidden, q = std::size_t(cfg.heads) * cfg.head_dim,
                      kv = std::size_t(cfg.kv_heads) * cfg.head_dim;
    // the cache's size in int64, checked: it wrapped size_t for large slots x capacity x heads
    const auto cache_elems = static_cast<std::size_t>(checked_size_product(
        "specdec::examples::array_llama", "capacity", {max_requests, capacity, cfg.kv_heads, cfg.head_dim}));
    embed_ = up(w.embed, V * H, "weights.embed");
    final_norm_ = up(w.final_norm, H, "weights.final_norm");
    lm_head_ = up(w.lm_head, V * H, "weights.lm_head");
    for (const auto& l : w.layers)
      layers_.push_back({up(l.attn_norm, H, "attn_norm"), up(l.wq, q * H, "wq"), up(l.wk, kv * H, "wk"),
                         up(l.wv, kv * H, "wv"), up(l.wo, H * q, "wo"), up(l.ffn_norm, H, "ffn_norm"),
                         up(l.w_gate, F * H, "w_gate"), up(l.w_up, F * H, "w_up"), up(l.w_down, H * F, "w_down"),
                         Ops::template make<kv_type>(cache_elems), Ops::template make<kv_type>(cache_elems)});
    length_.assign(static_cast<std::size_t>(max_requests), 0);
  }

  [[nodiscard]] int vocab_size() const noexcept { return cfg_.vocab_size; }
  [[nodiscard]] int max_requests() const noexcept { return max_requests_; }
  [[nodiscard]] int capacity() const noexcept { return capacity_; }
  //! Tokens cached for slot r (its committed tokens but the root).
  [[nodiscard]] int cached(int r) const { return length_.at(static_cast<std::size_t>(r)); }
  [[nodiscard]] Ops& ops() noexcept { return ops_; }

  //! Caches prompt[0 .. n - 1) in slot r (the last token is the first step's root): chains of up to
  //! 64 tokens, each a root and its chain, run and committed whole.
  void prefill(int r, std::span<const std::int32_t> prompt) {
    constexpr std::string_view fn = "specdec::examples::array_llama::prefill";
    check_slot(r, fn);
    require(!prompt.empty(), fn, "prompt", "at least one token", 0);
    require(static_cast<int>(prompt.size()) <= capacity_, fn, "prompt", "at most capacity() tokens", prompt.size());
    specdec::detail::check_context(prompt, cfg_.vocab_size, fn, "prompt");
    length_[static_cast<std::size_t>(r)] = 0;
    for (std::size_t s = 0; s + 1 < prompt.size();) {
      const std::size_t n = std::min<std::size_t>(63, prompt.size() - 2 - s);  // root + n nodes, all kept
      std::vector<std::int32_t> parents(n);
      for (std::size_t i = 0; i < n; ++i) parents[i] = static_cast<std::int32_t>(i) - 1;
      const std::int32_t indptr[] = {0, static_cast<std::int32_t>(n)};
      const int slot[] = {r};
      run(slot, prompt.subspan(s, 1), indptr, prompt.subspan(s + 1, n), parents, false);
      std::vector<std::int32_t> all(n);
      for (std::size_t i = 0; i < n; ++i) all[i] = static_cast<std::int32_t>(i);
      const std::int32_t acc_indptr[] = {0, static_cast<std::int32_t>(n)};
      commit_entries(indptr, all, acc_indptr, -1);
      s += n + 1;
    }
  }

  //! The step's rows (decoder/concepts.hpp): [batch.total_rows(), vocab] in the backend's memory,
  //! valid until the next forward or commit. Everything is checked before anything changes (as
  //! llama_model::forward_batch checks it): roots, trees and row_indptr one per slot, slots in range
  //! and distinct, row_indptr[e + 1] - row_indptr[e] = nodes + 1 from 0, committed lengths = the
  //! slots' cached tokens + 1, each entry within its slot's capacity, tokens in the vocabulary.
  strided_view<const float, 2> forward_batch(const target_batch& b) {
    constexpr std::string_view fn = "specdec::examples::array_llama::forward_batch";
    const int B = b.size();
    std::vector<unsigned char> seen;
    check_target_batch_shape(fn, b, max_requests_, seen);
    for (int e = 0; e < B; ++e) {
      const int r = b.slots[static_cast<std::size_t>(e)];
      require(b.trees.committed_length(e) == length_[static_cast<std::size_t>(r)] + 1, fn, "batch.trees",
              "committed lengths of the slots' cached tokens + 1 (the root)", b.trees.committed_length(e));
    }
    run(b.slots, b.roots, b.trees.node_indptr(), b.trees.tokens(), b.trees.parents(), true);
    return make_view<2>(static_cast<const float*>(logits_.data()), {rows_, cfg_.vocab_size}, Ops::space);
  }

  //! Keeps every entry's root and accepted nodes (result.accepted_nodes(e), a root path) of the last
  //! forward_batch, all entries checked before any write.
  void commit_batch(const target_batch& b, const verify_batch_result& res) {
    constexpr std::string_view fn = "specdec::examples::array_llama::commit_batch";
    require(res.num_requests() == b.size() && b.size() == static_cast<int>(last_slots_.size()), fn, "result",
            "one entry per entry of the last forward_batch", res.num_requests());
    require(std::equal(b.trees.node_indptr().begin(), b.trees.node_indptr().end(), last_node_indptr_.begin(),
                       last_node_indptr_.end()),
            fn, "batch", "the last forward_batch's trees", "other trees");
    // each entry's nodes through accepted_nodes (which checks the result's offsets), packed from 0
    std::vector<std::int32_t> acc_indptr{0}, acc;
    for (int e = 0; e < b.size(); ++e) {
      const auto a = res.accepted_nodes(e);
      acc.insert(acc.end(), a.begin(), a.end());
      acc_indptr.push_back(static_cast<std::int32_t>(acc.size()));
    }
    commit_entries(b.trees.node_indptr(), acc, acc_indptr, -1);
  }

  //! commit_batch for one slot of the last forward_batch (the per-request form of the concept).
  void commit(int r, std::span<const std::int32_t> accepted) {
    constexpr std::string_view fn = "specdec::examples::array_llama::commit";
    const auto it = std::find(last_slots_.begin(), last_slots_.end(), r);
    require(it != last_slots_.end(), fn, "request", "a slot of the last forward_batch", r);
    const auto e = static_cast<std::size_t>(it - last_slots_.begin());
    // only entry e: the others commit nothing (their roots are kept, as every step keeps its roots)
    std::vector<std::int32_t> acc(accepted.begin(), accepted.end()), acc_indptr(last_slots_.size() + 1, 0);
    for (std::size_t i = e + 1; i < acc_indptr.size(); ++i) acc_indptr[i] = static_cast<std::int32_t>(acc.size());
    const std::vector<std::int32_t> node_indptr = last_node_indptr_;
    commit_entries(node_indptr, acc, acc_indptr, static_cast<int>(e));
  }

  //! Slot r is free again (and its entry of the last forward_batch can no longer be committed).
  void release(int r) {
    check_slot(r, "specdec::examples::array_llama::release");
    length_[static_cast<std::size_t>(r)] = 0;
    for (std::size_t e = 0; e < last_slots_.size(); ++e)
      if (last_slots_[e] == r) pending_[e] = 0;
  }

 private:
  struct layer {
    array<float> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    array<kv_type> k, v;
  };
  using cache_t = kv_cache<kv_type, entry_slots>;

  void check_slot(int r, std::string_view fn) const {
    require(r >= 0 && r < max_requests_, fn, "request", "a slot in [0, max_requests())", r);
  }

  template <class T>
  void grow(array<T>& a, std::size_t n) {  // at least n elements (contents not kept when it grows)
    if (a.size() < n) a = Ops::template make<T>(n);
  }
  template <class T>
  void put(array<T>& a, std::span<const T> h) {  // grown as needed, then h uploaded
    grow(a, h.size());
    ops_.upload(a, h);
  }
  template <class T>
  strided_view<const T, 1> view(const array<T>& a, std::size_t n) const {
    return make_view<1>(static_cast<const T*>(a.data()), {static_cast<std::int64_t>(n)}, Ops::space);
  }
  template <class T>
  strided_view<T, 1> out_view(array<T>& a, std::size_t n) {
    return make_view<1>(a.data(), {static_cast<std::int64_t>(n)}, Ops::space);
  }
  cache_t cache_of(layer& l, const array<std::int32_t>& lengths) {
    const entry_slots m{slots_d_.data(), lengths.data(), capacity_};
    return cache_t{l.k.data(), l.v.data(), m, static_cast<int>(last_slots_.size()), cfg_.kv_heads, cfg_.head_dim, Ops::space};
  }

  // One step over entries e (slot slots[e], root roots[e], tree e of the arrays): each entry's rows
  // are its root, then its nodes; logits only when `logits`.
  void run(std::span<const int> slots, std::span<const std::int32_t> roots, std::span<const std::int32_t> node_indptr,
           std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents, bool logits) {
    constexpr std::string_view fn = "specdec::examples::array_llama::forward_batch";
    const auto B = slots.size();
    const int H = cfg_.hidden, D = cfg_.head_dim, Hq = cfg_.heads, Hkv = cfg_.kv_heads, F = cfg_.ffn_hidden;
    // the step's host arrays: rows (each entry's root, then its nodes), tokens, cache rows; every
    // check before the first change
    std::vector<std::int32_t> ai{0}, len32, committed, tok, slot32;
    std::vector<std::int64_t> rows;
    std::size_t mask_words = 0;
    for (std::size_t e = 0; e < B; ++e) {
      const auto r = static_cast<std::size_t>(slots[e]);
      const int lo = node_indptr[e], n = node_indptr[e + 1] - lo, len = length_[r];
      require(len + 1 + n <= capacity_, fn, "batch", "trees that fit the slot's capacity (" + std::to_string(capacity_) +
                                                         " tokens) at slot " + std::to_string(r), len + 1 + n);
      ai.push_back(ai.back() + n + 1);
      tok.push_back(roots[e]);
      tok.insert(tok.end(), tokens.begin() + lo, tokens.begin() + lo + n);
      len32.push_back(len);          // the attention's cache: the rows before the root
      committed.push_back(len + 1);  // the root at position len, then the nodes (build_tree_batch, commit)
      slot32.push_back(slots[e]);
      for (int j = 0; j <= n; ++j) rows.push_back(static_cast<std::int64_t>(r) * capacity_ + len + j);
      mask_words += static_cast<std::size_t>(n + 1) * static_cast<std::size_t>(words_per_row(n + 1));
    }
    specdec::detail::check_context(tok, cfg_.vocab_size, fn, "tokens");
    last_slots_.assign(slots.begin(), slots.end());
    last_node_indptr_.assign(node_indptr.begin(), node_indptr.end());
    pending_.assign(B, 0);  // committable once the run completes
    const int M = ai.back();
    rows_ = M;
    const auto N = static_cast<std::size_t>(node_indptr[B]);
    put(ai_d_, std::span<const std::int32_t>(ai)), put(ni_d_, node_indptr), put(par_d_, parents.first(N));
    put(len_d_, std::span<const std::int32_t>(len32)), put(tok_d_, std::span<const std::int32_t>(tok));
    put(slots_d_, std::span<const std::int32_t>(slot32)), put(committed_d_, std::span<const std::int32_t>(committed));
    put(rows_d_, std::span<const std::int64_t>(rows));
    // masks and positions of the verification rows: root at len, node i at len + 1 + depth(i)
    grow(depth_d_, M), grow(pos_d_, M), grow(mask_indptr_d_, B + 1), grow(mask_d_, mask_words), grow(status_d_, 3);
    const auto policy = ops_.policy();
    build_tree_batch(policy, view(ni_d_, B + 1), view(par_d_, N), view(committed_d_, B), out_view(depth_d_, M),
                     out_view(pos_d_, M), out_view(mask_indptr_d_, B + 1), out_view(mask_d_, mask_words),
                     out_view(status_d_, 3), tree_batch_rows::root_and_nodes);
    // activations
    const std::size_t q_w = std::size_t(Hq) * D, kv_w = std::size_t(Hkv) * D;
    const std::size_t P = ops_.padded_rows(M);  // the matmuls' rows (cuda_ops: a fixed bucket)
    grow(x_, P * H), grow(xn_, P * H), grow(q_, P * q_w), grow(att_, P * q_w), grow(kb_, P * kv_w), grow(vb_, P * kv_w);
    grow(g_, P * F), grow(u_, P * F), grow(lse_, std::size_t(M) * Hq);
    grow(qh_, M * q_w), grow(atth_, M * q_w), grow(kh_, M * kv_w), grow(vh_, M * kv_w);
    ops_.embed(tok_d_.data(), M, embed_.data(), H, x_.data());
    const rope_params rp{.theta = cfg_.rope_theta};
    const auto pos = view(pos_d_, M);
    // the attention's workspace: the same shapes in every layer, so sized once a step
    const auto cq = make_view<3>(static_cast<const kv_type*>(qh_.data()), {M, Hq, D}, Ops::space);
    attention_options ao{.kv_split_size = attention_kv_split, .kv_chunks = attention_kv_chunks};
    grow(ws_mem_, hybrid_tree_attention_workspace_bytes(policy, cq, cache_of(layers_.front(), len_d_),
                                                        view(ai_d_, B + 1), ao));
    attention_workspace ws(ws_mem_.data(), ws_mem_.size(), Ops::space);
    ao.workspace = &ws;
    for (auto& L : layers_) {
      ops_.rms_norm(x_.data(), L.attn_norm.data(), xn_.data(), M, H, cfg_.norm_eps);
      ops_.matmul_nt(xn_.data(), L.wq.data(), q_.data(), M, Hq * D, H, false);
      ops_.matmul_nt(xn_.data(), L.wk.data(), kb_.data(), M, Hkv * D, H, false);
      ops_.matmul_nt(xn_.data(), L.wv.data(), vb_.data(), M, Hkv * D, H, false);
      const auto qv = make_view<3>(q_.data(), {M, Hq, D}, Ops::space);
      const auto kv = make_view<3>(kb_.data(), {M, Hkv, D}, Ops::space);
      apply_rope(policy, rp, qv, pos);
      apply_rope(policy, rp, kv, pos);
      ops_.to_kv(q_.data(), qh_.data(), M * q_w);
      ops_.to_kv(kb_.data(), kh_.data(), M * kv_w);
      ops_.to_kv(vb_.data(), vh_.data(), M * kv_w);
      // the step's rows into the cache (root at len, the nodes after it) for the commit ...
      ops_.scatter_rows(kh_.data(), vh_.data(), L.k.data(), L.v.data(), rows_d_.data(), M, static_cast<int>(kv_w));
      // ... and as the attention's spec K/V over the `len` rows before the root
      const auto cache = cache_of(L, len_d_);
      const auto sk = make_view<3>(static_cast<const kv_type*>(kh_.data()), {M, Hkv, D}, Ops::space);
      const auto sv = make_view<3>(static_cast<const kv_type*>(vh_.data()), {M, Hkv, D}, Ops::space);
      hybrid_tree_attention(policy, cq, cache, sk, sv, view(ai_d_, B + 1), view(mask_d_, mask_words),
                            make_view<3>(atth_.data(), {M, Hq, D}, Ops::space),
                            make_view<2>(lse_.data(), {M, Hq}, Ops::space), ao);
      ops_.from_kv(atth_.data(), att_.data(), M * q_w);
      ops_.matmul_nt(att_.data(), L.wo.data(), x_.data(), M, H, Hq * D, true);
      ops_.rms_norm(x_.data(), L.ffn_norm.data(), xn_.data(), M, H, cfg_.norm_eps);
      ops_.matmul_nt(xn_.data(), L.w_gate.data(), g_.data(), M, F, H, false);
      ops_.matmul_nt(xn_.data(), L.w_up.data(), u_.data(), M, F, H, false);
      ops_.silu_mul(g_.data(), u_.data(), std::size_t(M) * F);
      ops_.matmul_nt(g_.data(), L.w_down.data(), x_.data(), M, H, F, true);
    }
    if (logits) {
      ops_.rms_norm(x_.data(), final_norm_.data(), xn_.data(), M, H, cfg_.norm_eps);
      grow(logits_, P * cfg_.vocab_size);
      ops_.matmul_nt(xn_.data(), lm_head_.data(), logits_.data(), M, cfg_.vocab_size, H, false);
    }
    pending_.assign(B, 1);
  }

  // Keeps each entry's root and its accepted nodes accepted[acc_indptr[e] ..) (local indices of tree
  // e of node_indptr) in every layer, the last run's rows; the cached lengths move for every entry,
  // or for entry `only` alone when it is >= 0 (commit()).
  void commit_entries(std::span<const std::int32_t> node_indptr, std::span<const std::int32_t> accepted,
                      std::span<const std::int32_t> acc_indptr, int only) {
    constexpr std::string_view fn = "specdec::examples::array_llama::commit_batch";
    const auto B = last_slots_.size();
    require(node_indptr.size() == B + 1 && acc_indptr.size() == B + 1, fn, "node_indptr", "the last forward's entries",
            node_indptr.size());
    // each entry once, and not after its slot was released: a second commit moved the moved rows
    // again and counted them twice
    for (std::size_t e = 0; e < B; ++e)
      if (only < 0 || static_cast<std::size_t>(only) == e)
        require(pending_[e] != 0, fn, "result", "entries of the last forward_batch not yet committed or released",
                "slot " + std::to_string(last_slots_[e]) + " again");
    const auto N = static_cast<std::size_t>(node_indptr[B]);
    // verify_greedy_batch's layout: entry e's accepted nodes from accepted[node_indptr[e]]
    std::vector<std::int32_t> acc(std::max<std::size_t>(N, 1), 0), num(B, 0);
    for (std::size_t e = 0; e < B; ++e) {
      const auto k = static_cast<std::size_t>(acc_indptr[e + 1] - acc_indptr[e]);
      require(k <= static_cast<std::size_t>(node_indptr[e + 1] - node_indptr[e]), fn, "accepted", "at most the tree's nodes", k);
      std::copy_n(accepted.begin() + acc_indptr[e], k, acc.begin() + node_indptr[e]);
      num[e] = static_cast<std::int32_t>(k);
    }
    put(cni_d_, node_indptr), put(acc_d_, std::span<const std::int32_t>(acc)), put(num_d_, std::span<const std::int32_t>(num));
    grow(new_len_d_, B), grow(commit_status_d_, 3);
    std::vector<cache_t> caches;
    for (auto& L : layers_) caches.push_back(cache_of(L, committed_d_));
    kv_commit_in_place_batch(ops_.policy(), std::span<const cache_t>(caches), view(committed_d_, B), view(cni_d_, B + 1),
                             view(acc_d_, N), view(num_d_, B), out_view(new_len_d_, B),
                             out_view(commit_status_d_, 3));
    // the step's statuses (the tree build's and the commit's) before the lengths move
    std::int32_t st[6];
    ops_.download(status_d_, std::span<std::int32_t>(st, 3));
    ops_.download(commit_status_d_, std::span<std::int32_t>(st + 3, 3));
    ops_.synchronize();
    require(st[0] == 0 && st[3] == 0, fn, "device status", "0 (the tree build's, then the commit's)",
            std::to_string(st[0]) + ", " + std::to_string(st[3]));
    for (std::size_t e = 0; e < B; ++e)
      if (only < 0 || static_cast<std::size_t>(only) == e)
        length_[static_cast<std::size_t>(last_slots_[e])] += 1 + num[e], pending_[e] = 0;
  }

  static constexpr int attention_kv_split = 256;  // llama.hpp's: a multiple of the 64-token tile
  static constexpr int attention_kv_chunks = 16;  // CUDA: fixed, for batch invariance (the host ignores it)

  llama_config cfg_;
  Ops ops_;
  int max_requests_, capacity_;
  array<float> embed_, final_norm_, lm_head_;
  std::vector<layer> layers_;
  std::vector<int> length_;
  // the last run (for commit) and the step's device arrays, grown as needed
  std::vector<int> last_slots_;
  std::vector<std::int32_t> last_node_indptr_;
  std::vector<unsigned char> pending_;  // per entry of the last run: its forward completed, not yet committed
  std::int64_t rows_ = 0;
  array<std::int32_t> ai_d_, ni_d_, par_d_, len_d_, tok_d_, slots_d_, committed_d_, depth_d_, pos_d_, status_d_,
      cni_d_, acc_d_, num_d_, new_len_d_, commit_status_d_;
  array<std::int64_t> rows_d_, mask_indptr_d_;
  array<mask_word> mask_d_;
  array<float> x_, xn_, q_, att_, kb_, vb_, g_, u_, lse_, logits_;
  array<kv_type> qh_, atth_, kh_, vh_;  // the attention's operands in the cache's type
  array<unsigned char> ws_mem_;
};

static_assert(check_target_model<array_llama<host_ops<>>>() && target_has_forward_batch<array_llama<host_ops<>>> &&
              target_has_commit_batch<array_llama<host_ops<>>> && target_has_release<array_llama<host_ops<>>>);

}  // namespace specdec::examples
