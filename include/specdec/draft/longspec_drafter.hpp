#pragma once
//! \file longspec_drafter.hpp
//! longspec_drafter<M>: LongSpec's draft (§3.1: sliding-window self-attention + cache-free cross-
//! attention into the target's KV, shared embedding/head), driven token by token through the
//! incremental_draft_model interface (and a beam level at a time through the optional tree forward of
//! tree_draft_model); chain mode, or LongSpec's dynamic beam tree (Appendix B) through
//! tree/beam_tree_builder.hpp, returned as sequences; or, constructed with multi_draft_params
//! (draft/multi_draft_sampler.hpp), k independent sampled drafts with their q rows, for
//! multi_draft_verifier.
//! It declares what it can provide besides tokens (`provides`: q rows, i.i.d. drafts; see
//! decoder/pairing.hpp): what some mode provides, q rows only when sampling at temperature > 0, i.i.d.
//! drafts only when constructed with multi_draft_params; both are run-time choices the types cannot express.

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/draft/detail/draft_rows.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/multi_draft_sampler.hpp"
#include "specdec/tree/beam_tree_builder.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! A draft model driven one token at a time (examples::longspec_draft_model): step(r, token, position,
//! commit, logits) runs one token, storing its K/V as committed (ring) or speculative;
//! discard_speculation(r) drops the speculative ones; absorbed(r) = committed tokens seen.
template <class M>
concept incremental_draft_model = requires(M& m, const M& cm, int r, std::int32_t tok, int pos, bool commit,
                                           std::span<typename M::logit_type> logits) {
  typename M::logit_type;
  { cm.vocab_size() } -> std::convertible_to<int>;
  { cm.absorbed(r) } -> std::convertible_to<int>;
  m.reset(r);
  m.step(r, tok, pos, commit, logits);
  m.discard_speculation(r);
};

//! An incremental_draft_model that can also run several speculative nodes of a draft tree in one
//! forward (examples::longspec_draft_model::step_tree): step_tree(r, tokens, parents, positions, logits)
//! runs m = tokens.size() new speculative nodes. Speculative nodes are numbered 0, 1, ... in the order
//! they are run after discard_speculation(r) (so this call's node i is number "nodes so far" + i);
//! parents[i] is an earlier node's number or -1 (a child of the committed context); positions[i] =
//! absorbed(r) + depth (0 for a child of the context). Each node attends to the committed context and
//! its own speculative ancestors (the tree's ancestor mask), its K/V stay for later nodes until
//! discard_speculation(r); logits is m x vocab_size (row i = node i) or empty. A node's logits must
//! equal those step(..., commit = false, ...) gives along its root path (up to rounding).
//! longspec_drafter's beam mode uses it when present (one call per beam level); it is optional.
template <class M>
concept tree_draft_model =
    incremental_draft_model<M> && requires(M& m, int r, std::span<const std::int32_t> ids,
                                           std::span<typename M::logit_type> logits) {
      m.step_tree(r, ids, ids, ids, logits);
    };

//! LongSpec drafting (§3.1, Appendix B). With empty beam_widths: a chain of req.depth tokens (greedy or
//! sampled) with top-width alternatives per depth. With beam widths (LongSpec uses [4, 16, 16, 16, 16]):
//! the dynamic beam tree of its first min(req.depth, levels) levels, returned as the tree's
//! root-to-leaf sequences for trie_tree_builder. With a
//! tree_draft_model each beam level is ONE step_tree forward over the level's new frontier nodes (the
//! cost LongSpec assumes: sum of the widths but the last draft tokens per proposal, 52 for the
//! defaults); any other model re-runs the draft token by token along each frontier node's root path
//! (O(frontier x depth) draft tokens per level, 148 for the defaults). Both give the same tree.
template <incremental_draft_model Model>
class longspec_drafter {
 public:
  //! q rows when sampling its chain; i.i.d. drafts in multi-draft mode (the beam mode gives neither).
  static constexpr draft_output provides = draft_output::q_rows | draft_output::iid_drafts;
  //! Beam widths are checked here, every level's (beam_tree_builder's limits): a step may draft only
  //! the first levels (req.depth caps them), so a bad deeper width would otherwise surface only on the
  //! first step planned that deep, or never.
  explicit longspec_drafter(Model& model, std::vector<int> beam_widths = {})
      : model_(&model), beam_(beam_widths.empty() ? beam_tree_params{} : checked({beam_widths, 0})),
        use_beam_(!beam_widths.empty()) {}
  //! Beam mode with a node budget: the tree keeps its best beam.max_nodes nodes (ancestor-closed, by
  //! cumulative log-probability; beam_tree_builder), so a builder without a budget of its own (e.g.
  //! trie_tree_builder{}) verifies exactly those. beam.beam_widths must be non-empty.
  longspec_drafter(Model& model, beam_tree_params beam) : model_(&model), beam_(std::move(beam)), use_beam_(true) {
    require(!beam_.beam_widths.empty(), "specdec::longspec_drafter", "beam.beam_widths", "non-empty (beam mode)",
            beam_.beam_widths.size());
    beam_ = checked(std::move(beam_));
  }
  //! Multi-draft mode (see multi_draft_params): k = width independent sampled drafts.
  longspec_drafter(Model& model, multi_draft_params multi) : model_(&model), use_beam_(false), multi_(multi) {}

  void reset(int r) { model_->reset(r); }

  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    const int r = req.request;
    constexpr std::string_view fn = "specdec::longspec_drafter::propose";
    const auto& t = req.tokens;
    const int L = detail::context_length(req, fn);
    const int V = detail::model_int(model_->vocab_size(), fn, "model.vocab_size()");
    detail::validate_model_draft(req, V, fn);  // first: it checks the slot handed to the model below
    if (multi_) detail::multi_draft_sampler::validate(req, *multi_, fn);
    const auto absorbed = [&] {
      const int a = detail::model_int(model_->absorbed(r), fn, "model.absorbed(request)");
      require(a >= 0, fn, "model.absorbed(request)", ">= 0", a);
      return a;
    };
    require(absorbed() <= L, fn, "req.tokens.size()", "at least the tokens already absorbed", L);
    int rf = L;  // every absorbed position can be seen
    if constexpr (requires { model_->receptive_field(); }) {
      rf = detail::model_int(model_->receptive_field(), fn, "model.receptive_field()");
      require(rf >= 0, fn, "model.receptive_field()", ">= 0", rf);
    }
    root_.resize(static_cast<std::size_t>(V));
    logits_.resize(static_cast<std::size_t>(V));
    model_->discard_speculation(r);
    if (absorbed() == L) {  // nothing new (only possible when re-proposing): recompute the root row
      model_->reset(r);
    }
    int first = absorbed();
    require(first < L, fn, "model.absorbed(request)", "below the context length after reset", first);
    // skip history no future prediction can see (in int64: L - 1 - rf may pass INT_MIN)
    first = static_cast<int>(std::max<std::int64_t>(first, std::int64_t{L} - 1 - rf));
    detail::require_fed_tokens(req, static_cast<std::size_t>(first), V, fn);
    for (int p = first; p < L; ++p)
      model_->step(r, t[static_cast<std::size_t>(p)], p, true,
                   p == L - 1 ? std::span<typename Model::logit_type>(root_) : std::span<typename Model::logit_type>{});
    if (req.depth <= 0) return;
    try {  // the speculation is dropped also when a later depth throws (a bad draft row, the model)
      speculate(req, L, V, out);
    } catch (...) {
      out.clear();
      model_->discard_speculation(r);
      throw;
    }
  }

 private:
  // Drafts from the absorbed context (root logits in root_): every path below ends with the model's
  // speculation discarded; propose discards it when one throws.
  void speculate(const draft_request& req, int L, int V, draft_candidates& out) {
    const int r = req.request;
    const auto& t = req.tokens;
    if (multi_) {
      multi_sampler_.run(std::span<const typename Model::logit_type>(root_), req, *multi_,
                         [&](std::int32_t tok, int depth, bool new_draft) {
                           if (new_draft) model_->discard_speculation(r);
                           model_->step(r, tok, L + depth, false, logits_);
                           return std::span<const typename Model::logit_type>(logits_);
                         },
                         out);
      model_->discard_speculation(r);
      return;
    }
    if (!use_beam_) {
      context_.assign(t.begin(), t.end());
      std::int32_t cur = picker_.pick(std::span<const typename Model::logit_type>(root_), req, context_, out,
                                        "specdec::longspec_drafter::propose");
      for (int d = 1; d < req.depth; ++d) {
        context_.push_back(cur);
        model_->step(r, cur, L + d - 1, false, logits_);
        cur = picker_.pick(std::span<const typename Model::logit_type>(logits_), req, context_, out,
                           "specdec::longspec_drafter::propose");
      }
      model_->discard_speculation(r);
      return;
    }
    // req.depth caps the levels: the beam's first min(req.depth, levels) widths, so a decoder that
    // plans the depth (adaptive_depth) prices and gets a shallower beam, not the whole one
    const auto levels = std::min(beam_.beam_widths.size(), static_cast<std::size_t>(req.depth));
    beam_tree_builder builder(beam_tree_params{
        {beam_.beam_widths.begin(), beam_.beam_widths.begin() + static_cast<std::ptrdiff_t>(levels)}, beam_.max_nodes});
    spec_id_.clear();
    model_->discard_speculation(r);  // (already empty) the model numbers the beam's nodes from 0
    next_spec_id_ = 0;
    const token_tree tree = builder.build_from_logprobs(V, [&](const token_tree& cur, std::span<const std::int32_t> frontier,
                                                               std::span<float> rows) {
      if constexpr (tree_draft_model<Model>) {
        tree_level(r, L, static_cast<std::size_t>(V), cur, frontier, rows);
        return;
      }
      for (std::size_t f = 0; f < frontier.size(); ++f) {
        std::span<float> row = rows.subspan(f * static_cast<std::size_t>(V), static_cast<std::size_t>(V));
        if (frontier[f] < 0) {
          detail::log_softmax(std::span<const typename Model::logit_type>(root_), row,
                              "specdec::longspec_drafter::propose");
          continue;
        }
        model_->discard_speculation(r);
        const auto path = cur.path_tokens(frontier[f]);
        for (std::size_t d = 0; d < path.size(); ++d)
          model_->step(r, path[d], L + static_cast<int>(d), false, logits_);
        detail::log_softmax(std::span<const typename Model::logit_type>(logits_), row,
                            "specdec::longspec_drafter::propose");
      }
    });
    model_->discard_speculation(r);
    // chain = the best continuation: the deepest leaf with the highest path log-probability (so a chain
    // builder verifies the beam's best full-depth path, not whichever leaf comes first in index order).
    const auto leaves = tree.leaves();
    std::size_t best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      double score = 0;
      for (auto node : tree.path(leaves[i])) score += tree.logprob(node);
      const int d = tree.depth(leaves[i]), bd = tree.depth(leaves[best]);
      if (i == 0 || d > bd || (d == bd && score > best_score)) best = i, best_score = score;
    }
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      std::vector<draft_token> seq;
      for (auto node : tree.path(leaves[i])) seq.push_back({tree.token(node), tree.logprob(node)});
      if (i == best) out.chain = std::move(seq);
      else out.sequences.push_back(std::move(seq));
    }
  }

  //! `p` if beam_tree_builder accepts it (its invalid_argument otherwise).
  static beam_tree_params checked(beam_tree_params p) {
    (void)beam_tree_builder(p);
    return p;
  }

  // One beam level through step_tree: the frontier nodes not yet run (with any ancestor not yet run,
  // which the beam builder never produces: each level's frontier is the previous level's new nodes)
  // go through the model in one call, tree order; each frontier row is the log-softmax of its logits.
  // V: the vocabulary propose checked and sized `rows` by (read once: a second read of
  // model.vocab_size() could disagree with the rows' size).
  void tree_level(int r, int L, std::size_t V, const token_tree& cur, std::span<const std::int32_t> frontier,
                  std::span<float> rows) {
    spec_id_.resize(static_cast<std::size_t>(cur.size()), -1);
    level_tokens_.clear(), level_parents_.clear(), level_positions_.clear();
    const int base = next_spec_id_;  // this call's node i is the model's speculative node base + i
    for (const std::int32_t f : frontier) {
      if (f < 0) continue;
      path_.clear();
      for (std::int32_t a = f; a >= 0 && spec_id_[static_cast<std::size_t>(a)] < 0; a = cur.parent(a)) path_.push_back(a);
      for (auto it = path_.rbegin(); it != path_.rend(); ++it) {
        const std::int32_t node = *it, parent = cur.parent(node);
        spec_id_[static_cast<std::size_t>(node)] = next_spec_id_++;
        level_tokens_.push_back(cur.token(node));
        level_parents_.push_back(parent < 0 ? -1 : spec_id_[static_cast<std::size_t>(parent)]);
        level_positions_.push_back(L + cur.depth(node));
      }
    }
    tree_logits_.resize(level_tokens_.size() * V);
    if (!level_tokens_.empty())
      model_->step_tree(r, std::span<const std::int32_t>(level_tokens_), std::span<const std::int32_t>(level_parents_),
                        std::span<const std::int32_t>(level_positions_), std::span<typename Model::logit_type>(tree_logits_));
    for (std::size_t f = 0; f < frontier.size(); ++f) {
      std::span<float> row = rows.subspan(f * V, V);
      if (frontier[f] < 0) {
        detail::log_softmax(std::span<const typename Model::logit_type>(root_), row,
                            "specdec::longspec_drafter::propose");
        continue;
      }
      const int id = spec_id_[static_cast<std::size_t>(frontier[f])];
      require(id >= base, "specdec::longspec_drafter::propose", "beam frontier",
              "nodes not scored at an earlier level (each level's frontier is the previous level's new nodes)", frontier[f]);
      const std::size_t i = static_cast<std::size_t>(id - base);
      detail::log_softmax(std::span<const typename Model::logit_type>(tree_logits_).subspan(i * V, V), row,
                          "specdec::longspec_drafter::propose");
    }
  }

  Model* model_;
  beam_tree_params beam_;
  bool use_beam_;
  std::optional<multi_draft_params> multi_;
  std::vector<typename Model::logit_type> root_, logits_;
  std::vector<std::int32_t> context_;
  // beam levels through step_tree: tree node -> speculative node number (-1 = not run yet), and one level's call
  std::vector<std::int32_t> spec_id_, level_tokens_, level_parents_, level_positions_, path_;
  std::vector<typename Model::logit_type> tree_logits_;
  int next_spec_id_ = 0;
  detail::chain_picker picker_;
  detail::multi_draft_sampler multi_sampler_;
};

}  // namespace specdec
