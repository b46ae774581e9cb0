#pragma once
//! \file device_status.hpp
//! The report of value checks that run on a CUDA device. A primitive under specdec::cuda checks
//! shapes and memory spaces on the host, but the VALUES of its device arrays (offsets, parents,
//! tokens, logits) are not read on the host: that would need a synchronisation inside the primitive.
//! Its kernels check them instead and record the first problem found in a status array of three
//! int32 values, [error, request, index], which the caller reads whenever it next synchronises
//! (an engine: with the step's emitted tokens). device_status decodes them on the host; error 0
//! means none, and request / index are -1 where they do not apply. The host backends of the same
//! primitives check the same rules and throw specdec::invalid_argument instead. Writers: the
//! device function device_report (core/device_types.cuh); first writer wins.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "specdec/core/error.hpp"

namespace specdec {

//! What a device-side check found (the codes of device_status::error).
enum class device_error : std::int32_t {
  none = 0,
  node_indptr = 1,        //!< node_indptr[0] != 0, a decreasing step, or a last value other than the node count
  committed_length = 2,   //!< committed_lengths[request] below the primitive's minimum (trees: 1; KV commit: 0)
  parent = 3,             //!< parents of node `index` of `request` outside [-1, index) (topological order)
  position_overflow = 4,  //!< committed_lengths[request] + depth of node `index` > INT32_MAX
  mask_capacity = 5,      //!< the ancestor masks need more words than the mask array holds
  token = 6,              //!< the token of node `index` of `request` outside [0, vocabulary)
  row = 7,                //!< row `index` (local) of `request`, which the step reads, is not admissible: logits with NaN or +inf or no value above -inf; probabilities with NaN, an infinity, a negative entry or no positive entry
  accepted = 8,           //!< accepted node `index` (position on the path) of `request` not strictly increasing in [0, tree size), or num_accepted outside [0, tree size]
  capacity = 9,           //!< committed_lengths[request] + tree size exceeds capacity(request) of layer `index`
  chain = 10,             //!< node `index` of `request` is not the child of node index - 1 (a chain verifier got another tree)
  draft_prob = 11,        //!< the draft probability q_i(x_i) of node `index` of `request` is not positive and finite (the draft cannot have drawn x_i)
  draft_row = 12,         //!< draft row `index` (local) of `request`, which the step reads, holds NaN, an infinity or a negative entry
  sibling = 13,           //!< node `index` of `request` carries the token of an earlier sibling, but the children were drawn without replacement
  fanout = 14,            //!< node `index` (-1: the root) of `request` rejected more children than the device verifier can track (multi-draft: 1024 residual updates or rejected tokens)
  length = 15,            //!< the cache length of `request` is negative or exceeds what the output holds (kv_importance_batch: the scores' columns)
  partial_state = 16,     //!< partial_kv_append_batch: the cache length of `request` is below seen[request], its sizes / seen / placed entry is outside [0, |B|] / [0, INT32_MAX] / [0, 2 (|B| - |S|)], or an eviction slot its appends would use is outside [0, |B|)
  params = 17,            //!< process_logits_batch (and the forms that process rows: penalized_argmax_batch, verify_sample_and_match_batch from logits): row `index` names sampling_params entry `request`, which is outside the params array, invalid, or applies a penalty without a penalty_context
  context = 18,           //!< process_logits_batch (and the forms above): the penalty context of row `index` (context `request`, -1: none) is malformed (penalty_context's rules)
};

//! Host-side reading of a device status array [error, request, index].
struct device_status {
  device_error error = device_error::none;
  std::int32_t request = -1;
  std::int32_t index = -1;

  //! Decodes the three values (e.g. after copying them to the host).
  [[nodiscard]] static device_status from(std::span<const std::int32_t, 3> v) noexcept {
    return {static_cast<device_error>(v[0]), v[1], v[2]};
  }
  [[nodiscard]] bool ok() const noexcept { return error == device_error::none; }

  //! One sentence naming the problem, e.g. "parents[3] of request 1 is outside [-1, 3)".
  [[nodiscard]] std::string message() const {
    const std::string r = std::to_string(request), i = std::to_string(index);
    switch (error) {
      case device_error::none: return "no error";
      case device_error::node_indptr:
        return "node_indptr is not a valid offsets array (it must start at 0, never decrease and end at the node "
               "count); first bad entry at request " + r;
      case device_error::committed_length:
        return "committed_lengths[" + r + "] is below the minimum (1 for trees: the root is committed; 0 for a KV commit)";
      case device_error::parent:
        return "parents[" + i + "] of request " + r + " is outside [-1, " + i + ") (parent before node)";
      case device_error::position_overflow:
        return "committed_lengths[" + r + "] + the depth of node " + i + " exceeds INT32_MAX";
      case device_error::mask_capacity: return "the ancestor masks need more words than the mask array holds";
      case device_error::token: return "the token of node " + i + " of request " + r + " is outside [0, vocabulary)";
      case device_error::row:
        return "row " + i + (request < 0 ? std::string() : " of request " + r) +
               " is not admissible (logits: NaN, +inf or no value above -inf; probabilities: NaN, an infinity, a "
               "negative entry or no positive entry)";
      case device_error::accepted:
        return index < 0 ? "num_accepted[" + r + "] is outside [0, tree size]"
                         : "accepted node " + i + " of request " + r +
                               " breaks the path (indices must increase strictly within [0, tree size))";
      case device_error::capacity:
        return "committed_lengths[" + r + "] + the tree size exceeds capacity(" + r + ") of layer " + i;
      case device_error::chain:
        return "node " + i + " of request " + r + " is not the child of node " + std::to_string(index - 1) +
               " (the verifier takes chains only)";
      case device_error::draft_prob:
        return "the draft probability of node " + i + "'s token in request " + r +
               " is not positive and finite (the draft cannot have drawn it)";
      case device_error::draft_row:
        return "draft row " + i + " of request " + r + " holds NaN, an infinity or a negative entry";
      case device_error::sibling:
        return "node " + i + " of request " + r +
               " carries the same token as an earlier sibling (draft_sampling::without_replacement draws distinct "
               "siblings)";
      case device_error::length:
        return "the cache length of request " + r + " is negative or exceeds the output's columns";
      case device_error::partial_state:
        return "the partial-cache state of request " + r +
               " is inconsistent: its cache length is below seen[" + r + "], or sizes[" + r + "] is outside [0, budget], seen[" + r +
               "] is negative, placed[" + r + "] is outside [0, 2 (budget - sink)], or an eviction slot its appends "
               "would use is outside [0, budget)";
      case device_error::params:
        return "row " + i + " names sampling_params entry " + r +
               ", which is outside the params array, fails validate_sampling_params, or applies a penalty (the "
               "five-argument batch form gets no context)";
      case device_error::context:
        return "the penalty context of row " + i + " (context " + r +
               ") is malformed: row_context outside [-1, contexts), a context or suffix range outside its array, "
               "more pairs than the context length (or none for a non-empty context), distinct tokens outside [0, "
               "V) or not strictly ascending, a last position outside [0, length), or a suffix token outside [0, V)";
      case device_error::fanout:
        return "node " + i + " of request " + r +
               " rejected more children than the device verifier can track (1024 residual updates or rejected tokens "
               "per node)";
    }
    return "unknown device_error " + std::to_string(static_cast<std::int32_t>(error));
  }

  //! Throws specdec::invalid_argument naming `function` unless ok().
  void throw_if_error(std::string_view function) const {
    if (!ok()) [[unlikely]]
      throw_invalid_argument(function, "device arrays", "values that pass the device-side checks", message());
  }
};

}  // namespace specdec
