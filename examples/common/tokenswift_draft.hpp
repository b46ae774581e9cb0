#pragma once
//! \file tokenswift_draft.hpp
//! TokenSwift self-drafting for llama_model (TokenSwift §3.1-3.3): the target itself, run on the
//! root token over a partial view of its own KV cache (specdec::partial_kv_index per layer: |S| sink
//! tokens plus the |B| - |S| most important ones by Eq. 2, refreshed by Algorithm 1's rule), then
//! gamma residual heads (specdec::residual_heads, Eq. 1) on its last hidden state and the target's
//! own LM head on each. Implements specdec::self_draft_model for specdec::self_drafter.
//!
//! The draft keeps no K/V of its own: the partial view reads the target's cache in place and the
//! root's K/V are used for its own attention only (the target's verification forward computes and
//! commits them). Per request and layer it keeps |B| int32 indices per kv head (plus, with
//! partial_cache_config::compact, a dense copy of those |B| tokens' K/V), so its memory is constant
//! however long the context grows.
//!
//! Heads: the examples have no trained TokenSwift heads, so fit_residual_heads() fits them by ridge
//! regression on hidden states of the target's own greedy text (h_i ~ the hidden state i positions
//! later): a small stand-in for TokenSwift's training (§3.2, Appendix B.1), NOT its recipe.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "llama.hpp"
#include "model_math.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/draft/self_drafter.hpp"
#include "specdec/draft/residual_heads.hpp"
#include "specdec/kv/partial_kv.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/residual_heads.hpp"

namespace specdec::examples {

//! Residual-head weights for a hidden size H: w [gamma, H, H] (row-major, out x in), b [gamma, H].
template <class T>
struct residual_head_weights {
  int gamma = 0;
  std::vector<T> w, b;
};

//! Partial-cache geometry (TokenSwift §3.3): budget |B| tokens per kv head, the first |S| kept.
struct partial_cache_config {
  int budget = 4096;
  int sink = 64;
  //! Attend over a dense copy of each layer's view (specdec::compact_partial_kv, |B| tokens of K/V
  //! per layer, what TokenSwift keeps) instead of reading the target's cache in place.
  bool compact = false;
};

//! The self-drafting target (see the file comment). Holds a reference to the target (which must
//! outlive it) and per layer a partial_kv_index over the target's requests.
template <class T>
class tokenswift_self_draft {
 public:
  using logit_type = T;

  tokenswift_self_draft(llama_model<T>& target, partial_cache_config pc, residual_head_weights<T> heads)
      : target_(&target), pc_(pc), heads_(std::move(heads)) {
    constexpr std::string_view fn = "specdec::examples::tokenswift_self_draft";
    const auto& c = target.config();
    require(heads_.gamma >= 0, fn, "heads.gamma", ">= 0", heads_.gamma);
    require_equal(fn, "heads.w.size()", static_cast<std::size_t>(heads_.gamma) * c.hidden * c.hidden, heads_.w.size());
    require_equal(fn, "heads.b.size()", static_cast<std::size_t>(heads_.gamma) * c.hidden, heads_.b.size());
    for (int l = 0; l < c.layers; ++l) {
      index_.emplace_back(target.max_requests(), c.kv_heads, pc.budget, pc.sink);
      if (pc.compact) copies_.emplace_back(target.max_requests(), c.kv_heads, pc.budget, c.head_dim);
    }
    built_.assign(static_cast<std::size_t>(target.max_requests()), 0);
  }

  [[nodiscard]] int vocab_size() const noexcept { return target_->vocab_size(); }
  [[nodiscard]] int num_draft_heads() const noexcept { return heads_.gamma; }
  //! The partial index of one layer (tests read its size and rebuild state).
  [[nodiscard]] const partial_kv_index& index(int layer) const { return index_.at(static_cast<std::size_t>(layer)); }
  //! h_0 of the last self_draft call (the final-normed hidden state of the root).
  [[nodiscard]] std::span<const T> last_hidden() const noexcept { return h_; }
  //! Bytes the draft keeps besides the target: every layer's partial index and, with
  //! partial_cache_config::compact, its dense K/V copy. Fixed at construction.
  [[nodiscard]] std::size_t draft_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& i : index_) b += i.index_bytes();
    for (const auto& c : copies_) b += c.bytes();
    return b;
  }
  //! Number of partial-cache rebuilds so far (all layers, all requests).
  [[nodiscard]] long rebuilds() const noexcept { return rebuilds_; }

  void reset_draft(int r) {
    require_in_range("specdec::examples::tokenswift_self_draft::reset_draft", "request", r, 0,
                     target_->max_requests() - 1);
    forget(r);
  }

  //! Root = tokens.back() at position cache_length(r); writes gamma + 1 logit rows (see
  //! specdec::self_draft_model). O(layers * (params + |B| * heads * head_dim) + gamma * (H^2 + V H)).
  void self_draft(int r, std::span<const std::int32_t> tokens, std::span<T> rows) {
    constexpr std::string_view fn = "specdec::examples::tokenswift_self_draft::self_draft";
    const auto& c = target_->config();
    const auto& w = target_->weights();
    require_in_range(fn, "request", r, 0, target_->max_requests() - 1);
    const int L = target_->cache_length(r);
    require_equal(fn, "tokens.size() (the cached tokens plus the root)", static_cast<std::size_t>(L) + 1, tokens.size());
    require_equal(fn, "rows.size()", static_cast<std::size_t>(heads_.gamma + 1) * c.vocab_size, rows.size());
    const std::int32_t root = tokens.back();
    require_in_range(fn, "tokens.back()", root, 0, c.vocab_size - 1);
    const int H = c.hidden, D = c.head_dim, Hq = c.heads, Hkv = c.kv_heads, F = c.ffn_hidden;
    x_.assign(w.embed.begin() + static_cast<std::ptrdiff_t>(root) * H, w.embed.begin() + static_cast<std::ptrdiff_t>(root + 1) * H);
    xn_.resize(H), q_.resize(static_cast<std::size_t>(Hq) * D), k_.resize(static_cast<std::size_t>(Hkv) * D);
    v_.resize(k_.size()), att_.resize(q_.size()), g_.resize(F), u_.resize(F);
    const std::int32_t pos[1] = {L};
    const rope_params rp{.theta = c.rope_theta};
    // Other slots whose cache the target released (a finished request: length back to 0) still have
    // their selection, pointing at rows the cache no longer has; the attention call below checks the
    // whole partial layout, every request's rows included, so forget those first.
    for (int s = 0; s < target_->max_requests(); ++s)
      if (s != r && built_[static_cast<std::size_t>(s)] != 0 && target_->cache_length(s) < index_.front().seen(s)) forget(s);
    const bool build = built_[static_cast<std::size_t>(r)] == 0;
    for (int l = 0; l < c.layers; ++l) {
      const auto& W = w.layers[static_cast<std::size_t>(l)];
      rms_norm<T>(x_, W.attn_norm, xn_, 1, H, c.norm_eps);
      matmul_nt<T>(xn_, W.wq, q_, 1, Hq * D, H);
      matmul_nt<T>(xn_, W.wk, k_, 1, Hkv * D, H);
      matmul_nt<T>(xn_, W.wv, v_, 1, Hkv * D, H);
      apply_rope(host{}, rp, make_view<3>(q_.data(), {1, Hq, D}), std::span<const std::int32_t>(pos));
      apply_rope(host{}, rp, make_view<3>(k_.data(), {1, Hkv, D}), std::span<const std::int32_t>(pos));
      target_->with_layer_kv(l, [&](const auto& full) { attend(l, r, L, build, full); });
      matmul_nt_add<T>(att_, W.wo, x_, 1, H, Hq * D);
      rms_norm<T>(x_, W.ffn_norm, xn_, 1, H, c.norm_eps);
      matmul_nt<T>(xn_, W.w_gate, g_, 1, F, H);
      matmul_nt<T>(xn_, W.w_up, u_, 1, F, H);
      for (int i = 0; i < F; ++i) {
        const accum_t<T> a = g_[i];
        g_[i] = static_cast<T>(a / (accum_t<T>(1) + std::exp(-a)) * u_[i]);
      }
      matmul_nt_add<T>(g_, W.w_down, x_, 1, H, F);
    }
    built_[static_cast<std::size_t>(r)] = 1;
    // h_0 = the final-normed hidden state; l_0 = g(h_0), l_i = g(h_i) with h_i from the heads (Eq. 1).
    h_.resize(static_cast<std::size_t>(H));
    rms_norm<T>(x_, w.final_norm, h_, 1, H, c.norm_eps);
    hs_.assign(static_cast<std::size_t>(heads_.gamma + 1) * H, T(0));
    std::copy(h_.begin(), h_.end(), hs_.begin());
    if (heads_.gamma > 0) {
      if constexpr (std::is_same_v<T, double>) {
        const auto out = reference::residual_heads(h_, heads_.w, heads_.b, 1, H, heads_.gamma);
        std::copy(out.begin(), out.end(), hs_.begin() + H);
      } else {
        residual_heads(host{}, make_view<2>(std::as_const(h_).data(), {1, H}),
                       make_view<3>(std::as_const(heads_.w).data(), {heads_.gamma, H, H}),
                       make_view<2>(std::as_const(heads_.b).data(), {heads_.gamma, H}),
                       make_view<3>(hs_.data() + H, {heads_.gamma, 1, H}));
      }
    }
    matmul_nt<T>(hs_, w.lm_head, rows, heads_.gamma + 1, c.vocab_size, H);
  }

 private:
  // Slot r's draft state as before its first draft: no selection in any layer (nothing shown), and
  // the next self_draft rebuilds it (Algorithm 1, line 2).
  void forget(int r) {
    for (auto& idx : index_) idx.clear(r);
    for (auto& copy : copies_) copy.invalidate(r);
    built_[static_cast<std::size_t>(r)] = 0;
  }

  // Attention of the root's queries over layer l's partial view plus the root itself (a one-node
  // tree): Algorithm 1's line 2 (first draft of the request) or line 5-6 (rebuild) first.
  template <class Full>
  void attend(int l, int r, int L, bool build, const Full& full) {
    const auto& c = target_->config();
    const int D = c.head_dim, Hq = c.heads;
    auto& idx = index_[static_cast<std::size_t>(l)];
    const auto qv = make_view<2>(std::as_const(q_).data(), {Hq, D});
    if (build) {
      idx.rebuild(host{}, r, qv, full);
      ++rebuilds_;
    } else {
      idx.append(r, L);
      if (idx.needs_rebuild(r)) {
        idx.rebuild(host{}, r, qv, full);
        ++rebuilds_;
      }
    }
    if (pc_.compact) {
      auto& copy = copies_[static_cast<std::size_t>(l)];
      if (build) copy.invalidate(r);
      copy.sync(idx, full, r);
      attend_over(copy.layout(), r);
    } else {
      attend_over(idx.layout(full), r);
    }
  }

  template <class View>
  void attend_over(const View& view, int r) {
    const auto& c = target_->config();
    const int D = c.head_dim, Hq = c.heads, Hkv = c.kv_heads, R = target_->max_requests();
    indptr_.resize(static_cast<std::size_t>(R) + 1);
    for (int i = 0; i <= R; ++i) indptr_[static_cast<std::size_t>(i)] = i > r ? 1 : 0;
    const mask_word mask[1] = {1};
    const auto q3 = make_view<3>(std::as_const(q_).data(), {1, Hq, D});
    const auto kv = make_view<3>(std::as_const(k_).data(), {1, Hkv, D});
    const auto vv = make_view<3>(std::as_const(v_).data(), {1, Hkv, D});
    const auto iv = make_view<1>(std::as_const(indptr_).data(), {R + 1});
    const auto mv = make_view<1>(static_cast<const mask_word*>(mask), {1});
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::hybrid_tree_attention(q3, view, kv, vv, iv, mv);
      std::copy(res.out.begin(), res.out.end(), att_.begin());
    } else {
      lse_.resize(static_cast<std::size_t>(Hq));
      hybrid_tree_attention(host{}, q3, view, kv, vv, iv, mv, make_view<3>(att_.data(), {1, Hq, D}),
                            make_view<2>(lse_.data(), {1, Hq}));
    }
  }

  llama_model<T>* target_;
  partial_cache_config pc_;
  residual_head_weights<T> heads_;
  std::vector<partial_kv_index> index_;
  std::vector<compact_partial_kv<T>> copies_;  // per layer, when partial_cache_config::compact
  std::vector<char> built_;
  std::vector<T> x_, xn_, q_, k_, v_, att_, g_, u_, h_, hs_;
  std::vector<float> lse_;
  std::vector<std::int32_t> indptr_;
  long rebuilds_ = 0;
};

static_assert(self_draft_model<tokenswift_self_draft<double>> && self_draft_model<tokenswift_self_draft<float>>);

//! Fits gamma residual heads (identity activation) by ridge regression on a sequence of hidden
//! states z_0 .. z_{N-1} (the target's h_0 at consecutive positions of some text): head i, given
//! h_{i-1}(t) from the heads before it (h_0(t) = z_t), minimises
//! sum_t |W_i h_{i-1}(t) + b_i + h_{i-1}(t) - z_{t+i}|^2 + ridge |W_i|^2, so that h_i(t) ~ z_{t+i},
//! whose LM-head logits predict the token i + 1 positions after t. O(gamma N H^2 + gamma H^3).
//! Loads trained residual heads (examples/training/train.py: "tokenswift.heads.weight" [gamma, H, H]
//! and "tokenswift.heads.bias" [gamma, H], identity activation) for hidden size `hidden`. O(gamma H^2).
template <class T>
[[nodiscard]] residual_head_weights<T> load_residual_heads(const safetensors_file& f, int hidden) {
  constexpr std::string_view fn = "specdec::examples::load_residual_heads";
  const auto& e = f.entry("tokenswift.heads.weight");  // throws naming it when absent
  require(e.shape.size() == 3 && e.shape[0] >= 0 && e.shape[0] < 1024, fn, "tokenswift.heads.weight",
          "shape [gamma, hidden, hidden], gamma < 1024", e.shape.size());
  const std::int64_t g = e.shape[0], H = hidden;
  residual_head_weights<T> w;
  w.gamma = static_cast<int>(g);
  w.w = f.read<T>("tokenswift.heads.weight", {g, H, H});
  w.b = f.read<T>("tokenswift.heads.bias", {g, H});
  return w;
}

template <class T>
[[nodiscard]] residual_head_weights<T> fit_residual_heads(const std::vector<std::vector<T>>& z, int gamma, double ridge = 1e-3) {
  constexpr std::string_view fn = "specdec::examples::fit_residual_heads";
  require(gamma >= 0, fn, "gamma", ">= 0", gamma);
  require(z.size() > static_cast<std::size_t>(gamma) + 1, fn, "z.size()", "> gamma + 1", z.size());
  const int H = static_cast<int>(z.front().size()), P = H + 1, N = static_cast<int>(z.size());
  residual_head_weights<T> out{gamma, std::vector<T>(static_cast<std::size_t>(gamma) * H * H), std::vector<T>(static_cast<std::size_t>(gamma) * H)};
  std::vector<std::vector<double>> h(z.size());
  for (std::size_t t = 0; t < z.size(); ++t) h[t].assign(z[t].begin(), z[t].end());
  for (int i = 1; i <= gamma; ++i) {
    // Normal equations A B = C: A = X^T X + ridge I (P x P), C = X^T Y (P x H), X_t = [h(t), 1].
    std::vector<double> A(static_cast<std::size_t>(P) * P, 0.0), C(static_cast<std::size_t>(P) * H, 0.0);
    for (int t = 0; t + i < N; ++t) {
      const auto& x = h[static_cast<std::size_t>(t)];
      for (int a = 0; a < P; ++a) {
        const double xa = a < H ? x[a] : 1.0;
        for (int b = 0; b < P; ++b) A[static_cast<std::size_t>(a) * P + b] += xa * (b < H ? x[b] : 1.0);
        for (int j = 0; j < H; ++j)
          C[static_cast<std::size_t>(a) * H + j] += xa * (static_cast<double>(z[static_cast<std::size_t>(t + i)][j]) - x[j]);
      }
    }
    for (int a = 0; a < H; ++a) A[static_cast<std::size_t>(a) * P + a] += ridge;
    // Gaussian elimination with partial pivoting (A is symmetric positive definite up to the bias row).
    for (int col = 0; col < P; ++col) {
      int piv = col;
      for (int a = col + 1; a < P; ++a)
        if (std::abs(A[static_cast<std::size_t>(a) * P + col]) > std::abs(A[static_cast<std::size_t>(piv) * P + col])) piv = a;
      for (int b = 0; b < P; ++b) std::swap(A[static_cast<std::size_t>(col) * P + b], A[static_cast<std::size_t>(piv) * P + b]);
      for (int j = 0; j < H; ++j) std::swap(C[static_cast<std::size_t>(col) * H + j], C[static_cast<std::size_t>(piv) * H + j]);
      const double d = A[static_cast<std::size_t>(col) * P + col];
      require(std::abs(d) > 1e-300, fn, "z", "hidden states that span a regression (non-singular normal equations)", d);
      for (int a = 0; a < P; ++a) {
        if (a == col) continue;
        const double f = A[static_cast<std::size_t>(a) * P + col] / d;
        if (f == 0.0) continue;
        for (int b = col; b < P; ++b) A[static_cast<std::size_t>(a) * P + b] -= f * A[static_cast<std::size_t>(col) * P + b];
        for (int j = 0; j < H; ++j) C[static_cast<std::size_t>(a) * H + j] -= f * C[static_cast<std::size_t>(col) * H + j];
      }
    }
    // B[a][j] = C[a][j] / A[a][a]; W_i[j][c] = B[c][j], b_i[j] = B[H][j].
    for (int j = 0; j < H; ++j) {
      for (int cc = 0; cc < H; ++cc)
        out.w[(static_cast<std::size_t>(i - 1) * H + j) * H + cc] =
            static_cast<T>(C[static_cast<std::size_t>(cc) * H + j] / A[static_cast<std::size_t>(cc) * P + cc]);
      out.b[static_cast<std::size_t>(i - 1) * H + j] = static_cast<T>(C[static_cast<std::size_t>(H) * H + j] / A[static_cast<std::size_t>(H) * P + H]);
    }
    // h_i(t) for the next head (with the stored, rounded weights).
    for (auto& x : h) {
      std::vector<double> y(x);
      for (int j = 0; j < H; ++j) {
        double s = static_cast<double>(out.b[static_cast<std::size_t>(i - 1) * H + j]);
        for (int cc = 0; cc < H; ++cc) s += static_cast<double>(out.w[(static_cast<std::size_t>(i - 1) * H + j) * H + cc]) * x[cc];
        y[j] += s;
      }
      x = std::move(y);
    }
  }
  return out;
}

//! Hidden states h_0 of the target's own greedy continuation of `prompt` (steps positions), for
//! fit_residual_heads: a scratch copy of the model (one request, full-budget partial view, so the
//! view is the whole cache) drafts with no heads and commits its greedy token each step.
template <class T>
[[nodiscard]] std::vector<std::vector<T>> greedy_hidden_states(const llama_config& cfg, const llama_weights<T>& weights,
                                                               std::span<const std::int32_t> prompt, int steps) {
  const int cap = static_cast<int>(prompt.size()) + steps + 1;
  llama_model<T> m(cfg, weights, 1, cap);
  tokenswift_self_draft<T> d(m, {.budget = cap, .sink = 0}, {});
  m.prefill(0, prompt);
  std::vector<std::int32_t> tokens(prompt.begin(), prompt.end());
  std::vector<T> row(static_cast<std::size_t>(cfg.vocab_size)), logits(row.size());
  std::vector<std::vector<T>> z;
  const token_tree empty;
  for (int s = 0; s < steps; ++s) {
    d.self_draft(0, tokens, row);
    z.emplace_back(d.last_hidden().begin(), d.last_hidden().end());
    m.forward(0, tokens.back(), empty, logits);
    m.commit(0, {});
    tokens.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return z;
}

}  // namespace specdec::examples
