#pragma once
//! \file llama.hpp
//! A small reference LLaMA-style transformer (RMSNorm, RoPE, GQA attention, SwiGLU FFN, LM head),
//! templated on its scalar type (float or double). It is the "target model" of the examples, tests and
//! demo: it implements specdec::target_model (decoder/concepts.hpp) over a contiguous_kv or paged_kv
//! cache (llama_options::storage).
//!
//! Attention: float runs specdec::hybrid_tree_attention, double its double reference
//! (reference::hybrid_tree_attention), both over the same kv_layout of the model's cache, one call per
//! layer for all the requests of a forward_batch() (forward() is a batch of one).
//!
//! Forward pass over a speculation tree: the query tokens are the root (the last committed token,
//! whose K/V are not cached yet) followed by the tree's nodes; token 0 sits at position
//! cache_length(r), node i at cache_length(r) + 1 + depth(i). Every query attends to the committed
//! cache plus its tree ancestors (the ancestor mask with the root as an extra ancestor of every node),
//! which is exactly hybrid tree attention (LongSpec §3.3). Row 0 of the logits is the prediction after
//! the root, row i + 1 after node i. commit() appends the root and the accepted nodes' K/V.
//!
//! Weights come from a safetensors file with Hugging Face LLaMA names ("model.embed_tokens.weight",
//! "model.layers.{l}.self_attn.q_proj.weight", ..., "lm_head.weight") or from a seeded random init.
//! The random init is NOT a trained model: see random_llama_weights() for what it is.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "safetensors.hpp"
#include "model_math.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/position/rope.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::examples {

//! Model dimensions. head_dim must be 64, 128 or 256 (what the attention primitives accept).
struct llama_config {
  int vocab_size = 256;
  int hidden = 128;
  int layers = 2;
  int heads = 2;
  int kv_heads = 1;
  int head_dim = 64;
  int ffn_hidden = 256;
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;

  //! Throws specdec::invalid_argument naming the first bad field.
  void validate(std::string_view fn) const {
    require(vocab_size >= 2, fn, "config.vocab_size", ">= 2", vocab_size);
    require(hidden >= 1, fn, "config.hidden", ">= 1", hidden);
    require(layers >= 1, fn, "config.layers", ">= 1", layers);
    require(kv_heads >= 1, fn, "config.kv_heads", ">= 1", kv_heads);
    require(heads >= kv_heads && heads % kv_heads == 0, fn, "config.heads", "a positive multiple of kv_heads", heads);
    require(head_dim == 64 || head_dim == 128 || head_dim == 256, fn, "config.head_dim", "64, 128 or 256", head_dim);
    require(ffn_hidden >= 1, fn, "config.ffn_hidden", ">= 1", ffn_hidden);
    // the projections' widths are ints (heads * head_dim; kv_heads <= heads)
    require(static_cast<std::int64_t>(heads) * head_dim <= std::numeric_limits<std::int32_t>::max(), fn, "config.heads",
            "heads * head_dim <= INT32_MAX", heads);
    require(std::isfinite(rope_theta) && rope_theta > 1.0, fn, "config.rope_theta", "a finite value > 1", rope_theta);
    require(std::isfinite(norm_eps) && norm_eps > 0.0, fn, "config.norm_eps", "a finite value > 0 (RMSNorm's epsilon)",
            norm_eps);
  }
};

//! Row-major weights ([out, in] matrices as in PyTorch's nn.Linear).
template <class T>
struct llama_weights {
  struct layer {
    std::vector<T> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  };
  std::vector<T> embed;    //!< [vocab, hidden]
  std::vector<layer> layers;
  std::vector<T> final_norm;  //!< [hidden]
  std::vector<T> lm_head;     //!< [vocab, hidden]

  //! Every tensor has its config's size (a model reads them with the config's strides): throws
  //! specdec::invalid_argument naming the first tensor that does not. The config is validated first.
  void validate(const llama_config& c, std::string_view fn) const {
    c.validate(fn);
    const auto H = static_cast<std::size_t>(c.hidden), V = static_cast<std::size_t>(c.vocab_size),
               F = static_cast<std::size_t>(c.ffn_hidden), Dq = static_cast<std::size_t>(c.heads) * c.head_dim,
               Dk = static_cast<std::size_t>(c.kv_heads) * c.head_dim;
    require_equal(fn, "weights.layers.size()", static_cast<std::size_t>(c.layers), layers.size());
    require_equal(fn, "weights.embed.size()", V * H, embed.size());
    require_equal(fn, "weights.lm_head.size()", V * H, lm_head.size());
    require_equal(fn, "weights.final_norm.size()", H, final_norm.size());
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& L = layers[l];
      const std::string at = "weights.layers[" + std::to_string(l) + "].";
      for (const auto& [name, got, want] : {std::tuple{"attn_norm", L.attn_norm.size(), H}, {"ffn_norm", L.ffn_norm.size(), H},
                                            {"wq", L.wq.size(), Dq * H}, {"wk", L.wk.size(), Dk * H},
                                            {"wv", L.wv.size(), Dk * H}, {"wo", L.wo.size(), H * Dq},
                                            {"w_gate", L.w_gate.size(), F * H}, {"w_up", L.w_up.size(), F * H},
                                            {"w_down", L.w_down.size(), H * F}})
        require_equal(fn, at + name + ".size()", want, got);
    }
  }
};

//! Knobs of the synthetic random init.
struct random_init_options {
  //! Scale of the attention / FFN blocks' outputs relative to the token-embedding path (per layer it is
  //! block_scale * sqrt(2 / layers), so depth does not change the total). Small values
  //! make the next token mostly a function of the current token (easy to draft), large values make
  //! the context matter more.
  double block_scale = 1.0;
  //! Logit of the "successor" token before context perturbations (higher = peakier distributions).
  double logit_scale = 12.0;
  //! Fraction of the LM head that is random (the rest is the successor structure).
  double head_noise = 0.5;
};

//! A seeded random LLaMA. What it is: embeddings and all projections are Gaussian (Philox, Box-Muller)
//! with 1/sqrt(fan_in) scaling; the LM head is a scaled copy of the embedding rows under a random
//! permutation pi plus Gaussian noise, so that token x's own embedding votes for pi(x) and the
//! attention / FFN blocks (scaled by block_scale) perturb that vote depending on the context. Greedy
//! output therefore neither collapses to one token nor is pure noise, and a draft sharing the
//! embedding and LM head (LongSpec §3.1) predicts it often but not always. It has no linguistic content.
template <class T>
[[nodiscard]] llama_weights<T> random_llama_weights(const llama_config& c, std::uint64_t seed,
                                                    const random_init_options& o = {}) {
  c.validate("specdec::examples::random_llama_weights");
  philox_stream rng(seed, 0x11a3a);
  auto gauss = [&](std::size_t n, double sd) {
    std::vector<T> v(n);
    for (auto& x : v) {
      const double u1 = rng.uniform_double() + 1e-300, u2 = rng.uniform_double();
      x = static_cast<T>(sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    return v;
  };
  const auto H = static_cast<std::size_t>(c.hidden), V = static_cast<std::size_t>(c.vocab_size);
  const auto Dq = static_cast<std::size_t>(c.heads * c.head_dim), Dk = static_cast<std::size_t>(c.kv_heads * c.head_dim);
  const auto F = static_cast<std::size_t>(c.ffn_hidden);
  // Per-layer scale so the summed context perturbation of all layers does not grow with depth
  // (block_scale is calibrated for 2 layers).
  const double bs = o.block_scale * std::sqrt(2.0 / c.layers);
  llama_weights<T> w;
  w.embed = gauss(V * H, 1.0);
  for (int l = 0; l < c.layers; ++l) {
    typename llama_weights<T>::layer L;
    L.attn_norm.assign(H, T(1));
    L.ffn_norm.assign(H, T(1));
    L.wq = gauss(Dq * H, 1.0 / std::sqrt(double(H)));
    L.wk = gauss(Dk * H, 1.0 / std::sqrt(double(H)));
    L.wv = gauss(Dk * H, 1.0 / std::sqrt(double(H)));
    L.wo = gauss(H * Dq, bs / std::sqrt(double(Dq)));
    L.w_gate = gauss(F * H, 1.0 / std::sqrt(double(H)));
    L.w_up = gauss(F * H, 1.0 / std::sqrt(double(H)));
    L.w_down = gauss(H * F, 2.0 * bs / std::sqrt(double(F)));
    w.layers.push_back(std::move(L));
  }
  w.final_norm.assign(H, T(1));
  // Successor permutation (Fisher-Yates on Philox).
  std::vector<std::int32_t> pi(V);
  std::iota(pi.begin(), pi.end(), 0);
  for (std::size_t i = V - 1; i > 0; --i) std::swap(pi[i], pi[rng.below(static_cast<std::uint32_t>(i + 1))]);
  w.lm_head = gauss(V * H, o.head_noise * o.logit_scale / double(H));
  const double a = (1.0 - o.head_noise) * o.logit_scale / double(H);
  for (std::size_t x = 0; x < V; ++x)
    for (std::size_t i = 0; i < H; ++i)
      w.lm_head[static_cast<std::size_t>(pi[x]) * H + i] += static_cast<T>(a * static_cast<double>(w.embed[x * H + i]));
  return w;
}

//! The same weights in another element type (e.g. a double model's weights for its float twin).
template <class T, class U>
[[nodiscard]] llama_weights<T> convert_weights(const llama_weights<U>& w) {
  auto c = [](const std::vector<U>& v) {
    std::vector<T> o(v.size());
    std::transform(v.begin(), v.end(), o.begin(), [](U x) { return static_cast<T>(x); });
    return o;
  };
  llama_weights<T> o;
  o.embed = c(w.embed), o.lm_head = c(w.lm_head), o.final_norm = c(w.final_norm);
  for (const auto& L : w.layers)
    o.layers.push_back({c(L.attn_norm), c(L.wq), c(L.wk), c(L.wv), c(L.wo), c(L.ffn_norm), c(L.w_gate), c(L.w_up), c(L.w_down)});
  return o;
}

//! The geometry a safetensors file states in its metadata (keys vocab_size, hidden, layers, heads,
//! kv_heads, head_dim, ffn_hidden, rope_theta, norm_eps: what examples/training/train.py writes),
//! validated. Throws naming the missing or malformed key. O(1).
[[nodiscard]] inline llama_config llama_config_from_metadata(const safetensors_file& f) {
  constexpr std::string_view fn = "specdec::examples::llama_config_from_metadata";
  auto integer = [&](const std::string& key) { return f.metadata_int(key, 0, INT_MAX); };
  llama_config c{.vocab_size = integer("vocab_size"), .hidden = integer("hidden"), .layers = integer("layers"),
                 .heads = integer("heads"), .kv_heads = integer("kv_heads"), .head_dim = integer("head_dim"),
                 .ffn_hidden = integer("ffn_hidden"), .rope_theta = f.metadata_number("rope_theta"),
                 .norm_eps = f.metadata_number("norm_eps")};
  c.validate(fn);
  require(c.hidden == c.heads * c.head_dim, fn, "metadata hidden", "heads * head_dim", c.hidden);
  return c;
}

//! Loads Hugging Face LLaMA-named weights; dims are inferred from shapes and checked against `c`
//! (head_dim and rope_theta come from `c`). Throws naming the missing or mis-shaped tensor.
template <class T>
[[nodiscard]] llama_weights<T> load_llama_weights(const safetensors_file& f, const llama_config& c) {
  c.validate("specdec::examples::load_llama_weights");
  const std::int64_t H = c.hidden, V = c.vocab_size, Dq = c.heads * c.head_dim, Dk = c.kv_heads * c.head_dim,
                     F = c.ffn_hidden;
  llama_weights<T> w;
  w.embed = f.read<T>("model.embed_tokens.weight", {V, H});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    typename llama_weights<T>::layer L;
    L.attn_norm = f.read<T>(p + "input_layernorm.weight", {H});
    L.wq = f.read<T>(p + "self_attn.q_proj.weight", {Dq, H});
    L.wk = f.read<T>(p + "self_attn.k_proj.weight", {Dk, H});
    L.wv = f.read<T>(p + "self_attn.v_proj.weight", {Dk, H});
    L.wo = f.read<T>(p + "self_attn.o_proj.weight", {H, Dq});
    L.ffn_norm = f.read<T>(p + "post_attention_layernorm.weight", {H});
    L.w_gate = f.read<T>(p + "mlp.gate_proj.weight", {F, H});
    L.w_up = f.read<T>(p + "mlp.up_proj.weight", {F, H});
    L.w_down = f.read<T>(p + "mlp.down_proj.weight", {H, F});
    w.layers.push_back(std::move(L));
  }
  w.final_norm = f.read<T>("model.norm.weight", {H});
  w.lm_head = f.contains("lm_head.weight") ? f.read<T>("lm_head.weight", {V, H}) : w.embed;  // tied embeddings
  return w;
}

//! Writes weights under the names load_llama_weights reads (stored as `type`).
template <class T>
void add_llama_weights(safetensors_writer& out, const llama_config& c, const llama_weights<T>& w,
                       dtype type = dtype::f32) {
  const std::int64_t H = c.hidden, V = c.vocab_size, Dq = c.heads * c.head_dim, Dk = c.kv_heads * c.head_dim,
                     F = c.ffn_hidden;
  out.add("model.embed_tokens.weight", {V, H}, w.embed, type);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto& L = w.layers[static_cast<std::size_t>(l)];
    out.add(p + "input_layernorm.weight", {H}, L.attn_norm, type);
    out.add(p + "self_attn.q_proj.weight", {Dq, H}, L.wq, type);
    out.add(p + "self_attn.k_proj.weight", {Dk, H}, L.wk, type);
    out.add(p + "self_attn.v_proj.weight", {Dk, H}, L.wv, type);
    out.add(p + "self_attn.o_proj.weight", {H, Dq}, L.wo, type);
    out.add(p + "post_attention_layernorm.weight", {H}, L.ffn_norm, type);
    out.add(p + "mlp.gate_proj.weight", {F, H}, L.w_gate, type);
    out.add(p + "mlp.up_proj.weight", {F, H}, L.w_up, type);
    out.add(p + "mlp.down_proj.weight", {H, F}, L.w_down, type);
  }
  out.add("model.norm.weight", {H}, w.final_norm, type);
  out.add("lm_head.weight", {V, H}, w.lm_head, type);
}

//! How llama_model stores its per-layer KV cache.
enum class kv_storage : std::uint8_t {
  contiguous,  //!< specdec::contiguous_kv (NHD): one [capacity, kv_heads, head_dim] slab per request
  paged,       //!< specdec::paged_kv: a page pool and a block table (the vLLM / FlashInfer layout)
};

//! Construction options of llama_model (defaults: contiguous storage, the original behaviour).
struct llama_options {
  kv_storage storage = kv_storage::contiguous;
  //! Tokens per page (paged storage).
  int page_size = 16;
  //! Paged storage: the pool has max_requests * ceil(capacity / page_size) pages per layer, and every
  //! request's block table is taken from a Philox-shuffled order of the pool (seeded by this), so a
  //! request's pages are neither contiguous nor ascending and requests interleave in the pool: what a
  //! long-running engine's free list looks like, and what makes a paged-vs-contiguous test meaningful.
  std::uint64_t page_seed = 1;
};

//! The shape checks a batched target makes before anything changes (llama_model and array_llama):
//! roots, trees and row_indptr one per slot, row_indptr from 0 with trees.num_nodes(b) + 1 rows per
//! entry, slots in [0, max_requests) and distinct (`seen`: scratch, made max_requests long).
inline void check_target_batch_shape(std::string_view fn, const target_batch& b, int max_requests,
                                     std::vector<unsigned char>& seen) {
  const int B = b.size();
  require_equal(fn, "batch.roots.size()", b.slots.size(), b.roots.size());
  require_equal(fn, "batch.trees.num_requests()", B, b.trees.num_requests());
  require_equal(fn, "batch.row_indptr.size()", static_cast<std::size_t>(B) + 1, b.row_indptr.size());
  require(b.row_indptr[0] == 0, fn, "batch.row_indptr[0]", "0", b.row_indptr[0]);
  seen.assign(static_cast<std::size_t>(max_requests), 0);
  for (int e = 0; e < B; ++e) {
    const auto ue = static_cast<std::size_t>(e);
    const int r = b.slots[ue];
    require_in_range(fn, "batch.slots[b]", r, 0, max_requests - 1);
    require(seen[static_cast<std::size_t>(r)] == 0, fn, "batch.slots", "distinct slots", r);
    seen[static_cast<std::size_t>(r)] = 1;
    const int n = b.trees.num_nodes(e);
    const std::int64_t rows = static_cast<std::int64_t>(b.row_indptr[ue + 1]) - b.row_indptr[ue];
    if (rows != n + 1) [[unlikely]]
      throw_invalid_argument(fn, "batch.row_indptr",
                             "row_indptr[b + 1] - row_indptr[b] = trees.num_nodes(b) + 1 = " + std::to_string(n + 1) +
                                 " for b = " + std::to_string(e),
                             rows);
  }
}

//! The reference target model. Owns, per layer, a KV cache of `capacity` tokens for each of
//! `max_requests` requests, stored contiguously (contiguous_kv, NHD) or paged (paged_kv) as
//! llama_options::storage says; both give bit-identical results (the attention and the commit go
//! through the same library calls, templated on the layout).
template <class T>
class llama_model {
 public:
  using value_type = T;
  using logit_type = T;

  //! Preconditions (checked): valid config, max_requests >= 1, capacity >= 1, weights of the config's
  //! shapes, options.page_size >= 1. Allocates the whole cache (every layer, every request) up front.
  llama_model(const llama_config& c, llama_weights<T> w, int max_requests, int capacity, const llama_options& o = {})
      : cfg_(c), w_(std::move(w)), opt_(o), max_requests_(max_requests), capacity_(capacity) {
    constexpr std::string_view fn = "specdec::examples::llama_model";
    w_.validate(c, fn);
    require(max_requests >= 1, fn, "max_requests", ">= 1", max_requests);
    require(capacity >= 1, fn, "capacity", ">= 1", capacity);
    require(o.storage == kv_storage::contiguous || o.storage == kv_storage::paged, fn, "options.storage",
            "kv_storage::contiguous or kv_storage::paged", static_cast<int>(o.storage));
    require(o.page_size >= 1, fn, "options.page_size", ">= 1", o.page_size);
    // the cache's size in int64, checked (as array_llama's): the product wrapped size_t for large
    // max_requests x capacity x heads, and a wrapped size allocated a cache too small for the views
    std::size_t per_layer =
        static_cast<std::size_t>(checked_size_product(fn, "capacity", {max_requests, capacity, c.kv_heads, c.head_dim}));
    if (o.storage == kv_storage::paged) {
      const std::int64_t per_request = (static_cast<std::int64_t>(capacity) + o.page_size - 1) / o.page_size;
      require(per_request * max_requests <= INT32_MAX, fn, "capacity", "max_requests * pages per request <= INT32_MAX",
              capacity);
      num_pages_ = static_cast<int>(per_request * max_requests);
      per_layer = static_cast<std::size_t>(
          checked_size_product(fn, "options.page_size", {num_pages_, o.page_size, c.kv_heads, c.head_dim}));
      page_indptr_.resize(static_cast<std::size_t>(max_requests) + 1);
      for (int r = 0; r <= max_requests; ++r) page_indptr_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r * per_request);
      page_indices_.resize(static_cast<std::size_t>(num_pages_));  // one block table shared by all layers
      std::iota(page_indices_.begin(), page_indices_.end(), 0);
      philox_stream rng(o.page_seed, 0x9a9e);
      for (std::size_t i = page_indices_.size(); i > 1; --i)  // Fisher-Yates
        std::swap(page_indices_[i - 1], page_indices_[rng.below(static_cast<std::uint32_t>(i))]);
    }
    k_.assign(static_cast<std::size_t>(c.layers), std::vector<T>(per_layer));
    v_.assign(static_cast<std::size_t>(c.layers), std::vector<T>(per_layer));
    lengths_.assign(static_cast<std::size_t>(max_requests), 0);
    spec_.resize(static_cast<std::size_t>(max_requests));
  }

  [[nodiscard]] const llama_config& config() const noexcept { return cfg_; }
  [[nodiscard]] const llama_weights<T>& weights() const noexcept { return w_; }
  [[nodiscard]] int vocab_size() const noexcept { return cfg_.vocab_size; }
  [[nodiscard]] int max_requests() const noexcept { return max_requests_; }
  [[nodiscard]] int capacity() const noexcept { return capacity_; }
  //! The construction options (storage kind, page size, page order seed).
  [[nodiscard]] const llama_options& options() const noexcept { return opt_; }
  [[nodiscard]] kv_storage storage() const noexcept { return opt_.storage; }
  //! Tokens whose K/V are cached for request r (the committed tokens except the root).
  [[nodiscard]] int cache_length(int r) const { return lengths_[check_r(r, "cache_length")]; }
  //! Bytes of KV cache one cached token takes (all layers, K and V).
  [[nodiscard]] std::size_t kv_bytes_per_token() const noexcept {
    return static_cast<std::size_t>(cfg_.layers) * cfg_.kv_heads * cfg_.head_dim * 2 * sizeof(T);
  }
  //! Bytes of KV cache in use by request r (all layers).
  [[nodiscard]] std::size_t kv_bytes(int r) const { return static_cast<std::size_t>(cache_length(r)) * kv_bytes_per_token(); }

  //! Empties request r's cache (and forgets its last forward: a commit before the next one throws).
  void reset(int r) {
    lengths_[check_r(r, "reset")] = 0;
    spec_[static_cast<std::size_t>(r)].committable = false;
  }
  //! Shrinks request r's cache to its first `length` tokens (a draft model rolls back its speculation).
  void truncate(int r, int length) {
    const auto i = check_r(r, "truncate");
    require_in_range("specdec::examples::llama_model::truncate", "length", length, 0, lengths_[i]);
    lengths_[i] = length;
    spec_[i].committable = false;  // its rows were computed at positions past the new length
  }

  //! The cache of one layer as a read-only contiguous kv_layout over all requests. Contiguous storage
  //! only (throws otherwise); with_layer_kv() works for both.
  [[nodiscard]] contiguous_kv<const T> layer_kv(int layer) const {
    constexpr std::string_view fn = "specdec::examples::llama_model::layer_kv";
    require_in_range(fn, "layer", layer, 0, cfg_.layers - 1);
    require(opt_.storage == kv_storage::contiguous, fn, "storage", "kv_storage::contiguous (use with_layer_kv)",
            "kv_storage::paged");
    return contiguous_layer<const T>(layer);
  }
  //! The cache of one layer as a read-only paged_kv over all requests (block table shared by all
  //! layers). Paged storage only (throws otherwise).
  [[nodiscard]] paged_kv<const T> paged_layer_kv(int layer) const {
    constexpr std::string_view fn = "specdec::examples::llama_model::paged_layer_kv";
    require_in_range(fn, "layer", layer, 0, cfg_.layers - 1);
    require(opt_.storage == kv_storage::paged, fn, "storage", "kv_storage::paged (use with_layer_kv)",
            "kv_storage::contiguous");
    return paged_layer<const T>(layer);
  }
  //! Calls f(layout) with layer `layer`'s cache as a read-only kv_layout over all requests, of the
  //! model's storage kind (contiguous_kv<const T> or paged_kv<const T>; f must take both, e.g. a generic
  //! lambda). How the LongSpec draft's cross-attention reads the target cache in place. Returns f's result.
  template <class F>
  decltype(auto) with_layer_kv(int layer, F&& f) const {
    require_in_range("specdec::examples::llama_model::with_layer_kv", "layer", layer, 0, cfg_.layers - 1);
    if (opt_.storage == kv_storage::paged) return std::forward<F>(f)(paged_layer<const T>(layer));
    return std::forward<F>(f)(contiguous_layer<const T>(layer));
  }

  //! Forward over the root token and the tree `tree` for request r; writes (tree.size() + 1) rows of
  //! vocab_size logits (row 0 after the root, row i + 1 after node i) and keeps the K/V of the root and
  //! every node for commit(). A batch of one: the same transformer pass forward_batch() runs.
  //! O(layers * (m * params + m * (cache + m) * heads * head_dim)), m = nodes + 1.
  void forward(int r, std::int32_t root, const token_tree& tree, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::llama_model::forward";
    check_r(r, "forward");
    const int n = tree.size(), m = n + 1;
    require_equal(fn, "logits.size()", static_cast<std::size_t>(m) * cfg_.vocab_size, logits.size());
    require(lengths_[r] + m <= capacity_, fn, "tree.size()",
            "cache_length + tree.size() + 1 <= capacity = " + std::to_string(capacity_), n);
    require_in_range(fn, "root", root, 0, cfg_.vocab_size - 1);
    for (int i = 0; i < n; ++i) require_in_range(fn, "tree.token(i)", tree.token(i), 0, cfg_.vocab_size - 1);
    set_tree(r, root, tree.tokens(), tree.parents(), tree.depths());
    const int slot[1] = {r};
    run(slot, logits);
    spec_[static_cast<std::size_t>(r)].committable = true;
  }

  //! Batched forward (decoder/concepts.hpp, target_has_forward_batch): ONE transformer pass over the
  //! rows of every entry of `b` (entry e's root and tree nodes, rows [row_indptr[e], row_indptr[e + 1]),
  //! concatenated in batch order). Every RMSNorm, projection, RoPE, SwiGLU and the LM head runs once over
  //! all b.total_rows() rows, so each weight is read once per step, not once per request, and attention
  //! is one hybrid tree attention call per layer over every entry's cache and tree. Leaves
  //! each slot's speculative K/V exactly as forward(slots[e], roots[e], tree e, ...) would, so commit()
  //! works unchanged, and returns the logits [total_rows, vocab_size] as a view of a buffer this model
  //! owns, valid until the next forward_batch(). Rows are bit-identical to forward()'s, float included:
  //! the dense code computes each row alone (model_math.hpp) and the float attention's KV split is
  //! fixed (attention_kv_split), so no row depends on which other requests share the batch.
  //!
  //! Validates everything before doing any work (nothing changes on a throw): trees.num_requests(),
  //! roots.size() and row_indptr.size() - 1 equal slots.size(); slots in range and distinct; row_indptr[0]
  //! = 0 and row_indptr[e + 1] - row_indptr[e] = trees.num_nodes(e) + 1; trees.committed_length(e) =
  //! cache_length(slots[e]) + 1 (node i then sits at cache_length + 1 + depth(i)); every entry fits in
  //! its slot's capacity; root and node tokens in [0, vocab_size).
  [[nodiscard]] strided_view<T, 2> forward_batch(const target_batch& b) {
    constexpr std::string_view fn = "specdec::examples::llama_model::forward_batch";
    const int B = b.size();
    check_target_batch_shape(fn, b, max_requests_, seen_);
    for (int e = 0; e < B; ++e) {
      const auto ue = static_cast<std::size_t>(e);
      const int r = b.slots[ue];
      const int n = b.trees.num_nodes(e);
      if (static_cast<std::int64_t>(lengths_[static_cast<std::size_t>(r)]) + n + 1 > capacity_) [[unlikely]]
        throw_invalid_argument(fn, "batch.trees",
                               "cache_length(slots[b]) + num_nodes(b) + 1 <= capacity = " + std::to_string(capacity_) +
                                   " for b = " + std::to_string(e) + " (cache_length " +
                                   std::to_string(lengths_[static_cast<std::size_t>(r)]) + ")",
                               n);
      if (b.trees.committed_length(e) != lengths_[static_cast<std::size_t>(r)] + 1) [[unlikely]]
        throw_invalid_argument(fn, "batch.trees.committed_length(b)",
                               "cache_length(slots[b]) + 1 = " + std::to_string(lengths_[static_cast<std::size_t>(r)] + 1) +
                                   " for b = " + std::to_string(e),
                               b.trees.committed_length(e));
      require_in_range(fn, "batch.roots[b]", b.roots[ue], 0, cfg_.vocab_size - 1);
      for (auto t : b.tokens(e)) require_in_range(fn, "batch.trees token", t, 0, cfg_.vocab_size - 1);
    }
    for (int e = 0; e < B; ++e) {
      const auto ue = static_cast<std::size_t>(e);
      const auto node0 = static_cast<std::size_t>(b.trees.node_indptr()[ue]);
      set_tree(b.slots[ue], b.roots[ue], b.tokens(e), b.parents(e),
               b.trees.depths().subspan(node0, static_cast<std::size_t>(b.trees.num_nodes(e))));
    }
    const std::int64_t M = b.total_rows();
    logits_.resize(static_cast<std::size_t>(M) * cfg_.vocab_size);
    run(b.slots, logits_);
    for (int e = 0; e < B; ++e) spec_[static_cast<std::size_t>(b.slots[static_cast<std::size_t>(e)])].committable = true;
    return make_view<2>(logits_.data(), {M, static_cast<std::int64_t>(cfg_.vocab_size)});
  }

  //! The request in slot r left the batch: empties its cache and forgets its last forward (a commit
  //! before the next forward then throws). O(1).
  void release(int r) {
    auto& s = spec_[check_r(r, "release")];
    lengths_[static_cast<std::size_t>(r)] = 0;
    s.tokens.clear(), s.positions.clear(), s.parents.clear();
    s.committable = false;
  }

  //! Chain forward used for prefill: tokens[i] at position cache_length + i, causal mask. Writes
  //! tokens.size() logit rows when `logits` is non-empty (else only the K/V are computed).
  void forward_chain(int r, std::span<const std::int32_t> tokens, std::span<logit_type> logits) {
    constexpr std::string_view fn = "specdec::examples::llama_model::forward_chain";
    check_r(r, "forward_chain");
    const int m = static_cast<int>(tokens.size());
    require(m >= 1, fn, "tokens.size()", ">= 1", m);
    require(logits.empty() || logits.size() == static_cast<std::size_t>(m) * cfg_.vocab_size, fn, "logits.size()",
            "0 or tokens.size() * vocab_size", logits.size());
    require(lengths_[r] + m <= capacity_, fn, "tokens.size()", "cache_length + tokens.size() <= capacity", m);
    for (auto t : tokens) require_in_range(fn, "tokens[i]", t, 0, cfg_.vocab_size - 1);  // before any state changes
    auto& s = spec_[static_cast<std::size_t>(r)];
    s.committable = false;
    s.tokens.assign(tokens.begin(), tokens.end());
    s.positions.resize(static_cast<std::size_t>(m));
    s.parents.resize(static_cast<std::size_t>(m));
    for (int i = 0; i < m; ++i) s.positions[i] = lengths_[r] + i, s.parents[i] = i - 1;
    const int slot[1] = {r};
    run(slot, logits);
    s.committable = true;
  }

  //! Prefills request r with prompt[0 .. size-1) in chunks (the last prompt token becomes the root of
  //! the first speculation step). Precondition: empty cache, prompt non-empty.
  void prefill(int r, std::span<const std::int32_t> prompt, int chunk = 256) {
    constexpr std::string_view fn = "specdec::examples::llama_model::prefill";
    require(!prompt.empty(), fn, "prompt.size()", ">= 1", prompt.size());
    reset(r);
    const auto body = prompt.first(prompt.size() - 1);
    for (std::size_t b = 0; b < body.size(); b += static_cast<std::size_t>(chunk)) {
      const auto part = body.subspan(b, std::min(body.size() - b, static_cast<std::size_t>(chunk)));
      forward_chain(r, part, {});
      std::vector<std::int32_t> all(part.size());
      std::iota(all.begin(), all.end(), 0);
      commit_rows(r, all);
    }
  }

  //! Appends to request r's cache the root and the accepted nodes (node indices in root-to-leaf order,
  //! as a verifier reports them) from the last forward(). O(accepted * layers * kv_heads * head_dim).
  void commit(int r, std::span<const std::int32_t> accepted_nodes) {
    constexpr std::string_view fn = "specdec::examples::llama_model::commit";
    check_r(r, "commit");
    const auto& s = spec_[static_cast<std::size_t>(r)];
    require(s.committable, fn, "request", "a forward since its last commit, reset, truncate or release",
            "request " + std::to_string(r) + " without one");
    std::vector<std::int32_t> rows{0};
    std::int32_t prev = 0;
    for (auto node : accepted_nodes) {
      require(node >= 0 && node + 1 < static_cast<std::int32_t>(s.tokens.size()), fn, "accepted_nodes[i]",
              "a node of the last forward's tree", node);
      require(s.parents[static_cast<std::size_t>(node) + 1] == prev, fn, "accepted_nodes",
              "a root-to-leaf path (each node the child of the previous)", node);
      rows.push_back(node + 1);
      prev = node + 1;
    }
    commit_rows(r, rows);
  }

 private:
  struct spec_state {
    std::vector<std::int32_t> tokens, positions, parents;
    bool committable = false;  // a forward completed since the last commit, reset, truncate or release
    std::vector<std::vector<T>> k, v;  // per layer [m, kv_heads, head_dim]
  };

  std::size_t check_r(int r, const char* what) const {
    require_in_range(std::string("specdec::examples::llama_model::") + what, "request", r, 0, max_requests_ - 1);
    return static_cast<std::size_t>(r);
  }

  // Layer l's cache as a layout over all requests, element type E (T or const T).
  template <class E>
  contiguous_kv<E> contiguous_layer(int l) const {
    const auto i = static_cast<std::size_t>(l);
    return {const_cast<E*>(k_[i].data()), const_cast<E*>(v_[i].data()), lengths_.data(), max_requests_, capacity_,
            cfg_.kv_heads, cfg_.head_dim, memory_space::host};
  }
  template <class E>
  paged_kv<E> paged_layer(int l) const {
    const auto i = static_cast<std::size_t>(l);
    return {const_cast<E*>(k_[i].data()), const_cast<E*>(v_[i].data()), page_indptr_.data(), page_indices_.data(),
            lengths_.data(), max_requests_, num_pages_, opt_.page_size, cfg_.kv_heads, cfg_.head_dim,
            memory_space::host};
  }
  // Appends rows `rows` (a root path of the last forward's tokens: the root, then accepted nodes) of
  // every layer's speculative K/V to request r's cache through specdec::kv_commit_from_buffer
  // (kv/commit.hpp), which validates everything before writing and reaches the rows through the
  // layout (a paged commit writes into the request's own pages).
  void commit_rows(int r, std::span<const std::int32_t> rows) {
    auto& s = spec_[static_cast<std::size_t>(r)];
    s.committable = false;  // once: a second commit would append the same rows again
    const int L = lengths_[r];
    require(L + static_cast<int>(rows.size()) <= capacity_, "specdec::examples::llama_model::commit", "rows",
            "fits in the capacity", rows.size());
    const std::int64_t m = static_cast<std::int64_t>(s.tokens.size());
    spec_views_k_.clear();
    spec_views_v_.clear();
    for (int l = 0; l < cfg_.layers; ++l) {
      spec_views_k_.push_back(make_view<3>(std::as_const(s.k[l]).data(), {m, cfg_.kv_heads, cfg_.head_dim}));
      spec_views_v_.push_back(make_view<3>(std::as_const(s.v[l]).data(), {m, cfg_.kv_heads, cfg_.head_dim}));
    }
    const std::span<const spec_view> ks(spec_views_k_), vs(spec_views_v_);
    const std::span<const std::int32_t> parents(s.parents);
    if (opt_.storage == kv_storage::paged) {
      paged_layers_.clear();
      for (int l = 0; l < cfg_.layers; ++l) paged_layers_.push_back(paged_layer<T>(l));
      lengths_[r] = kv_commit_from_buffer(std::span<const paged_kv<T>>(paged_layers_), r, L, ks, vs, rows, parents);
    } else {
      contiguous_layers_.clear();
      for (int l = 0; l < cfg_.layers; ++l) contiguous_layers_.push_back(contiguous_layer<T>(l));
      lengths_[r] = kv_commit_from_buffer(std::span<const contiguous_kv<T>>(contiguous_layers_), r, L, ks, vs, rows,
                                          parents);
    }
  }

  // Request r's speculative tokens for a tree forward: the root becomes token 0 (position cache_length),
  // node i token i + 1 (position cache_length + 1 + depth(i), parent shifted by one). Validated by the caller.
  void set_tree(int r, std::int32_t root, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                std::span<const std::int32_t> depths) {
    auto& s = spec_[static_cast<std::size_t>(r)];
    s.committable = false;  // until the forward's run completes
    const std::int32_t L = lengths_[static_cast<std::size_t>(r)];
    s.tokens.assign(1, root);
    s.positions.assign(1, L);
    s.parents.assign(1, -1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      s.tokens.push_back(tokens[i]);
      s.positions.push_back(L + 1 + depths[i]);
      s.parents.push_back(parents[i] + 1);
    }
  }

  // The transformer itself, once over the speculative tokens of every slot in `slots` (spec_[slot], set by
  // the caller), their rows concatenated in that order: the dense parts (RMSNorm, projections, RoPE,
  // SwiGLU, LM head) run once over all rows, attention is one call per layer for the whole batch. Each
  // slot's roped K/V rows go to spec_[slot].k/v for commit(). Writes all rows' logits when non-empty.
  // forward(), forward_chain() and forward_batch() all come here.
  void run(std::span<const int> slots, std::span<logit_type> logits) {
    const int B = static_cast<int>(slots.size());
    const int H = cfg_.hidden, D = cfg_.head_dim, Hq = cfg_.heads, Hkv = cfg_.kv_heads, F = cfg_.ffn_hidden;
    const std::size_t kvw = static_cast<std::size_t>(Hkv) * D, qw = static_cast<std::size_t>(Hq) * D;
    row_off_.assign(1, 0);
    positions_.clear();
    mask_.clear();
    for (int e = 0; e < B; ++e) {
      auto& s = spec_[static_cast<std::size_t>(slots[static_cast<std::size_t>(e)])];
      const int m = static_cast<int>(s.tokens.size());
      row_off_.push_back(row_off_.back() + m);
      positions_.insert(positions_.end(), s.positions.begin(), s.positions.end());
      // Ancestor mask over the slot's m tokens (the root is every node's ancestor), the entries' masks
      // back to back (hybrid_tree_attention's mask argument).
      const int wpr = words_per_row(m);
      const std::size_t base = mask_.size();
      mask_.resize(base + static_cast<std::size_t>(m) * wpr, 0);
      mask_word* mk = mask_.data() + base;
      for (int i = 0; i < m; ++i) {
        mask_word* row = mk + static_cast<std::size_t>(i) * wpr;
        if (s.parents[i] >= 0) std::copy_n(mk + static_cast<std::size_t>(s.parents[i]) * wpr, wpr, row);
        set_bit(row, i);
      }
      s.k.resize(static_cast<std::size_t>(cfg_.layers));
      s.v.resize(static_cast<std::size_t>(cfg_.layers));
    }
    const int M = row_off_.back();
    if (M == 0) return;
    std::vector<T> x(static_cast<std::size_t>(M) * H), xn(x.size()), q(static_cast<std::size_t>(M) * qw), att(q.size()),
        kb(static_cast<std::size_t>(M) * kvw), vb(kb.size()), g(static_cast<std::size_t>(M) * F), u(g.size());
    for (int e = 0, t = 0; e < B; ++e)
      for (auto tok : spec_[static_cast<std::size_t>(slots[static_cast<std::size_t>(e)])].tokens)
        std::copy_n(w_.embed.begin() + static_cast<std::ptrdiff_t>(tok) * H, H, x.begin() + static_cast<std::ptrdiff_t>(t++) * H);
    const std::span<const std::int32_t> pos(positions_);
    for (int l = 0; l < cfg_.layers; ++l) {
      const auto& W = w_.layers[static_cast<std::size_t>(l)];
      rms_norm<T>(x, W.attn_norm, xn, M, H, cfg_.norm_eps);
      matmul_nt<T>(xn, W.wq, q, M, Hq * D, H);
      matmul_nt<T>(xn, W.wk, kb, M, Hkv * D, H);
      matmul_nt<T>(xn, W.wv, vb, M, Hkv * D, H);
      const rope_params rp{.theta = cfg_.rope_theta};
      apply_rope(host{}, rp, make_view<3>(q.data(), {M, Hq, D}), pos);
      apply_rope(host{}, rp, make_view<3>(kb.data(), {M, Hkv, D}), pos);
      attention(l, slots, M, q, kb, vb, att);
      for (int e = 0; e < B; ++e) {  // each slot keeps its rows' K/V for commit()
        auto& s = spec_[static_cast<std::size_t>(slots[static_cast<std::size_t>(e)])];
        const auto o = static_cast<std::ptrdiff_t>(row_off_[static_cast<std::size_t>(e)]) * static_cast<std::ptrdiff_t>(kvw);
        const auto n = static_cast<std::ptrdiff_t>(s.tokens.size() * kvw);
        s.k[static_cast<std::size_t>(l)].assign(kb.begin() + o, kb.begin() + o + n);
        s.v[static_cast<std::size_t>(l)].assign(vb.begin() + o, vb.begin() + o + n);
      }
      matmul_nt_add<T>(att, W.wo, x, M, H, Hq * D);
      rms_norm<T>(x, W.ffn_norm, xn, M, H, cfg_.norm_eps);
      matmul_nt<T>(xn, W.w_gate, g, M, F, H);
      matmul_nt<T>(xn, W.w_up, u, M, F, H);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const accum_t<T> a = g[i];
        g[i] = static_cast<T>(a / (accum_t<T>(1) + std::exp(-a)) * u[i]);
      }
      matmul_nt_add<T>(g, W.w_down, x, M, H, F);
    }
    if (logits.empty()) return;
    rms_norm<T>(x, w_.final_norm, xn, M, H, cfg_.norm_eps);
    matmul_nt<T>(xn, w_.lm_head, logits, M, cfg_.vocab_size, H);
  }

  // Batch entry e's rows read slot slots[e]'s cache in place: the model's own mapping (contiguous or
  // paged) re-indexed by the batch's slot list, so one attention call covers any distinct slots in any
  // order without copying the cache (a user-written kv mapping: kv/kv_cache.hpp).
  template <class Base>
  struct slot_mapping {
    Base base;
    const int* slots = nullptr;
    [[nodiscard]] int length(int e) const noexcept { return base.length(slots[e]); }
    [[nodiscard]] int capacity(int e) const noexcept { return base.capacity(slots[e]); }
    [[nodiscard]] std::int64_t offset(int e, int t, int h, const kv_geometry& g) const noexcept {
      return base.offset(slots[e], t, h, g);
    }
  };
  template <class Base>
  kv_cache<const T, slot_mapping<Base>> slot_layer(const kv_cache<const T, Base>& all, std::span<const int> slots) const {
    return {all.k, all.v, {all.mapping, slots.data()}, static_cast<int>(slots.size()), all.kv_heads, all.dim, all.where};
  }

  // The batch's queries (rows concatenated as row_off_ says) over their slots' committed caches plus their
  // own trees (mask_: the ancestor masks back to back): ONE hybrid tree attention call per layer (LongSpec
  // §3.3). float goes through the library's specdec::hybrid_tree_attention with a fixed KV split
  // (attention_kv_split), so a request's rows do not depend on which requests share the call (the
  // automatic split looks at the batch's total cache); double, which the optimized primitives do not
  // take, through its double reference (reference::hybrid_tree_attention, same arguments, same layout).
  void attention(int l, std::span<const int> slots, int M, std::span<const T> q, std::span<const T> sk,
                 std::span<const T> sv, std::span<T> att) {
    if (opt_.storage == kv_storage::paged) attention_over(slot_layer(paged_layer<const T>(l), slots), M, q, sk, sv, att);
    else attention_over(slot_layer(contiguous_layer<const T>(l), slots), M, q, sk, sv, att);
  }
  template <class Layout>
  void attention_over(const Layout& cache, int M, std::span<const T> q, std::span<const T> sk, std::span<const T> sv,
                      std::span<T> att) {
    const int D = cfg_.head_dim, Hq = cfg_.heads, Hkv = cfg_.kv_heads;
    const auto qv = make_view<3>(q.data(), {M, Hq, D});
    const auto kv = make_view<3>(sk.data(), {M, Hkv, D});
    const auto vv = make_view<3>(sv.data(), {M, Hkv, D});
    const auto iv = make_view<1>(std::as_const(row_off_).data(), {static_cast<std::int64_t>(row_off_.size())});
    const auto mv = make_view<1>(std::as_const(mask_).data(), {static_cast<std::int64_t>(mask_.size())});
    if constexpr (std::is_same_v<T, double>) {
      const auto res = reference::hybrid_tree_attention(qv, cache, kv, vv, iv, mv);
      std::copy(res.out.begin(), res.out.end(), att.begin());
    } else {
      const attention_options ao{.kv_split_size = attention_kv_split};
      lse_.resize(static_cast<std::size_t>(M) * Hq);
      workspace_.reserve(hybrid_tree_attention_workspace_bytes(host{}, qv, cache, iv, ao));  // grows, never shrinks
      attention_options run = ao;
      run.workspace = &workspace_;
      hybrid_tree_attention(host{}, qv, cache, kv, vv, iv, mv, make_view<3>(att.data(), {M, Hq, D}),
                            make_view<2>(lse_.data(), {M, Hq}), run);
    }
  }

  //! Cached tokens per split-KV part of the float attention (a multiple of the 64-token tile).
  static constexpr int attention_kv_split = 256;

  using spec_view = strided_view<const T, 3>;
  llama_config cfg_;
  llama_weights<T> w_;
  llama_options opt_;
  std::vector<float> lse_;
  attention_workspace workspace_;
  int max_requests_, capacity_;
  // Per layer: contiguous [requests, capacity, kv_heads, head_dim] or paged [pages, page_size, kv_heads,
  // head_dim]. Layouts are built from these on every use (never stored), so a moved model's layouts
  // read its own arrays (the model moves but does not copy: its attention workspace is move-only).
  std::vector<std::vector<T>> k_, v_;
  std::vector<std::int32_t> lengths_;
  int num_pages_ = 0;
  std::vector<std::int32_t> page_indptr_, page_indices_;  // the block table (paged), shared by all layers
  std::vector<spec_view> spec_views_k_, spec_views_v_;
  std::vector<contiguous_kv<T>> contiguous_layers_;
  std::vector<paged_kv<T>> paged_layers_;
  std::vector<spec_state> spec_;
  // forward_batch's logits (the view it returns) and run()'s per-call scratch.
  std::vector<T> logits_;
  std::vector<std::int32_t> row_off_, positions_;
  std::vector<mask_word> mask_;
  std::vector<unsigned char> seen_;
};

static_assert(check_target_model<llama_model<float>>() && check_target_model<llama_model<double>>());
static_assert(target_has_forward_batch<llama_model<float>> && target_has_forward_batch<llama_model<double>> &&
              target_has_release<llama_model<float>> && target_has_release<llama_model<double>>);

//! The model's own autoregressive greedy decoding (the losslessness reference): prefills `prompt`,
//! then appends argmax tokens one forward step at a time. Ties break to the lowest token id.
//! O(new_tokens) forward passes of one token.
template <class T>
[[nodiscard]] std::vector<std::int32_t> greedy_reference(llama_model<T>& model, int r,
                                                         std::span<const std::int32_t> prompt, int new_tokens) {
  model.prefill(r, prompt);
  std::vector<std::int32_t> out;
  std::vector<T> logits(static_cast<std::size_t>(model.vocab_size()));
  const token_tree empty;
  std::int32_t root = prompt.back();
  for (int i = 0; i < new_tokens; ++i) {
    model.forward(r, root, empty, logits);
    model.commit(r, {});
    // argmax over the logits as float: the representation the decoder's verifiers see.
    root = 0;
    for (int v = 1; v < model.vocab_size(); ++v)
      if (static_cast<float>(logits[v]) > static_cast<float>(logits[root])) root = v;
    out.push_back(root);
  }
  return out;
}

}  // namespace specdec::examples
