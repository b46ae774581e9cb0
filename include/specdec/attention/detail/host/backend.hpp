#pragma once
//! \file backend.hpp
//! The host backend of the attention entry points (see backend.hpp): plans and runs a validated
//! call on the host thread pool (run.hpp), resolving the KV split size the same way for
//! a workspace query and its call.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/host/run.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! KV split size of a host call: options.kv_split_size, or the heuristic of choose_kv_split over
//! the batch's cache lengths (1 without a cache part).
template <bool HasCache, class T, class L>
[[nodiscard]] int host_kv_split(std::string_view fn, const host& policy, const attention_io_params<T>& io,
                                const L& cache, const attention_options& options) {
  if constexpr (HasCache)
    return resolve_kv_split(fn, cache, io.num_requests, io.num_kv_heads / heads_per_item(io), host_threads(policy),
                            options.kv_split_size);
  else
    return 1;
}

//! options.kernel of a host call, checked: one of the enumerators, and `rows` (`lanes`) only when
//! every request has at most max_dot_rows (max_lane_rows) query rows per kv head, the kernel's
//! register block.
template <class T>
[[nodiscard]] attention_kernel host_kernel(std::string_view fn, const attention_io_params<T>& io,
                                           const attention_options& options) {
  const auto k = options.kernel;
  require(k == attention_kernel::automatic || k == attention_kernel::rows || k == attention_kernel::tiles ||
              k == attention_kernel::lanes,
          fn, "options.kernel", "automatic, rows, tiles or lanes", static_cast<int>(k));
  if (k == attention_kernel::rows || k == attention_kernel::lanes) {
    const bool rows_kernel = k == attention_kernel::rows;
    const int most = rows_kernel ? max_dot_rows : max_lane_rows;
    const int group = io.num_qo_heads / io.num_kv_heads;
    for (int r = 0; r < io.num_requests; ++r) {
      const std::int64_t rows = static_cast<std::int64_t>(io.q_indptr[r + 1] - io.q_indptr[r]) * group;
      if (rows > most) [[unlikely]]
        throw_invalid_argument(fn, "options.kernel",
                               std::string(rows_kernel ? "attention_kernel::rows" : "attention_kernel::lanes") +
                                   " only with at most " + std::to_string(most) +
                                   " query rows per kv head (tokens x Hq / Hkv) in every request",
                               std::to_string(rows) + " in request " + std::to_string(r));
    }
  }
  return k;
}

template <>
struct attention_backend<host> {
  template <bool HasCache, bool HasTree, class T, class L>
  [[nodiscard]] static std::size_t workspace_bytes(std::string_view fn, const host& policy,
                                                   const attention_io_params<T>& io, const L& cache,
                                                   const attention_options& options) {
    (void)host_kernel(fn, io, options);
    return host_attention_bytes<HasCache, HasTree>(fn, policy, io, cache, host_kv_split<HasCache>(fn, policy, io, cache, options));
  }

  template <bool HasCache, bool HasTree, class T, class L>
  static void run(std::string_view fn, const host& policy, const attention_io_params<T>& io, const L& cache,
                  const tree_kv_params<T>* tree, const attention_options& options) {
    host_attention_entry<HasCache, HasTree, T>(fn, policy, io, cache, tree,
                                               host_kv_split<HasCache>(fn, policy, io, cache, options),
                                               host_kernel(fn, io, options), options.workspace);
  }
};

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
