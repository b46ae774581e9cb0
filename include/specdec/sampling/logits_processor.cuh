#pragma once
//! \file logits_processor.cuh
//! CUDA backends of process_logits_batch and logits_to_probs_batch (sampling/logits_processor.hpp):
//! process_logits_backend<cuda> and logits_to_probs_backend<cuda>. After the status reset, one kernel
//! on policy.stream, a block of 512 threads per row (grid-stride over rows), in place.
//!
//! process_logits_batch, per row, the host's process_row steps in the host's order:
//!  0. the row's sampling_params entry, checked (batch_sampling_params_ok: device_error::params),
//!     and in the penalty form the row's penalty context (penalty_context.hpp's checks, the pairs
//!     and suffix tokens spread over the block: device_error::context);
//!  1. the max / min / non-finite scan (CUB block reductions; device_error::row);
//!  1b. penalties (penalty form): when they could overflow every admissible logit to -inf
//!     (lowest_penalized), a count of what would survive first (device_error::row, the row untouched);
//!     then the two phases of penalty_context.hpp (the pairs, a barrier, the suffix), a thread per
//!     owner, and the scan again;
//!  2. temperature 0: one-hot at the first maximum; otherwise temperature as l * (1/t), or
//!     (l - max) / t where that would leave the float range (apply_temperature's test);
//!  3. top-k: the k-th largest topk_key by block_radix_select (core/topk_batch.cuh, shared with
//!     topk_batch), ties at it taken in index order by a chunked CUB block scan (when only some of
//!     them are kept);
//!  4. top-p: the total weight in exp_sum's order (detail::exp_sum_block below), the bin masses
//!     (exact sums, so the host's values in any order: 32-bit shared-memory atomics of each weight's
//!     quanta, folded into doubles, block_exact_sums), the boundary bin and its still-needed mass
//!     rounded to the bin's spacing by one thread as the host does, then a weighted radix select over
//!     the boundary bin's logit keys (exact sums again) and the ties at the last key by index (a
//!     block scan only when some of them are left out);
//!  5. min-p: l >= max + ln(p_base);
//!  6. eta: the weight total and the entropy term in the host's order (exp_sum's chunks, added by
//!     the whole block: chunked_sum_block), eta from the device's double log and exp, the first
//!     maximum kept.
//! logits_to_probs_batch: the scan, the total in exp_sum's order, then w * float(1 / total).
//! The weights are fast_exp_fused's (sampling/detail/vec.hpp). Bit-identity with the host needs IEEE
//! denormals and IEEE division on the device, nvcc's defaults (not -ftz=true, -prec-div=false or
//! --use_fast_math). The rows are read with plain loads, not through the read-only cache: the kernel
//! writes them between its passes.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "specdec/core/device_types.cuh"
#include "specdec/core/topk_batch.cuh"
#include "specdec/sampling/logits_processor.hpp"

namespace specdec {
namespace detail {

inline constexpr int process_threads = 512;
//! exp_sum's chunk (vec.inl exp_sum_kernel) and lane_sum's lanes: a half-warp per chunk.
inline constexpr int exp_chunk = 256;
inline constexpr int exp_groups = process_threads / lanes;  // chunks summed per round

//! Block-shared state of the row kernels.
struct row_kernel_shared {
  union {
    typename cub::BlockReduce<float, process_threads>::TempStorage reduce_f;
    typename cub::BlockReduce<std::int64_t, process_threads>::TempStorage reduce_i;
    typename cub::BlockScan<std::int32_t, process_threads>::TempStorage scan;
  } tmp;
  radix_select_shared select;
  double mass[top_p_bins];  //!< top-p bin masses
  double wsum[256];         //!< top-p's weighted radix select: weight per digit
  std::int32_t cnt[256];    //!< ... and count per digit
  std::uint32_t units_hi[top_p_bins], units_lo[top_p_bins];  //!< block_exact_sums' counters
  double part[exp_groups];  //!< a round's chunk sums (chunked_sum_block)
  double total, need;
  float fmax, fmin;
  std::int64_t first;
  std::uint32_t boundary, key;
  std::int32_t ties_before, kept_ties, flag;
};

//! The non-finite policy's row check (sampling/sampler.hpp), for every thread: the row's maximum over
//! non-NaN entries (sh.fmax) and minimum over entries above -inf (sh.fmin, +inf when none), and
//! whether the row is admissible: no NaN or +inf, some entry above -inf. Otherwise thread 0 reports
//! device_error::row (request -1, index `r`) and false is returned after a barrier (the caller skips
//! the row; sh is free again).
__device__ inline bool block_admissible_row(const float* row, std::int64_t n, std::int32_t* status, std::int64_t r,
                                            row_kernel_shared& sh) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const int t = static_cast<int>(threadIdx.x);
  float hi = -inf, lo = inf;
  bool bad = false;
  for_each_strided<8, false>(row, n, t, process_threads, [&](float v, std::int64_t) {
    bad |= (v != v) || v == inf;
    hi = v > hi ? v : hi;  // NaN: false
    lo = v > -inf && v < lo ? v : lo;
  });
  const float bhi = cub::BlockReduce<float, process_threads>(sh.tmp.reduce_f).Reduce(hi, [](float x, float y) { return x > y ? x : y; });
  __syncthreads();
  const float blo = cub::BlockReduce<float, process_threads>(sh.tmp.reduce_f).Reduce(lo, [](float x, float y) { return x < y ? x : y; });
  if (t == 0) sh.fmax = bhi, sh.fmin = blo;
  if (__syncthreads_or(bad ? 1 : 0) == 0 && sh.fmax > -inf) return true;  // the barrier also publishes fmax, fmin
  if (t == 0) device_report(status, device_error::row, -1, static_cast<std::int32_t>(r));
  __syncthreads();  // sh is read by every thread before the next row writes it
  return false;
}

//! The first index i with row[i] == v (n when none), to every thread.
__device__ inline std::int64_t block_first_index(const float* row, std::int64_t n, float v, row_kernel_shared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  std::int64_t first = n;
  for (std::int64_t i = t; i < n; i += process_threads)
    if (row[i] == v) {
      first = i;
      break;
    }
  __syncthreads();  // sh.tmp may still be read by an earlier reduction
  const std::int64_t b = cub::BlockReduce<std::int64_t, process_threads>(sh.tmp.reduce_i).Reduce(first, [](std::int64_t x, std::int64_t y) { return x < y ? x : y; });
  if (t == 0) sh.first = b;
  __syncthreads();
  return sh.first;
}

//! The sum of value(i) (a double) over [0, n) in exp_sum's order (vec.inl): chunks of 256 tokens,
//! each lane_sum's 16 lane sums (lane j: tokens j, j + 16, ... of the chunk's whole lanes, in
//! order), then the chunk's tail and the lanes in lane order; the chunk sums added in chunk order.
//! A half-warp per chunk, 32 chunks a round; one thread adds a round's chunk sums. To every thread.
template <class Value>
__device__ double chunked_sum_block(std::int64_t n, const Value& value, row_kernel_shared& sh) {
  const int t = static_cast<int>(threadIdx.x), j = t % lanes, g = t / lanes;
  const std::int64_t chunks = (n + exp_chunk - 1) / exp_chunk;
  __syncthreads();  // every thread has read an earlier call's total (returned to all) before the reset
  if (t == 0) sh.total = 0.0;
  for (std::int64_t c0 = 0; c0 < chunks; c0 += exp_groups) {  // uniform trip count
    const std::int64_t c = c0 + g;
    const std::int64_t lo = c * exp_chunk;
    const int len = c < chunks ? static_cast<int>(n - lo < exp_chunk ? n - lo : exp_chunk) : 0;
    const int body = len - len % lanes;
    double acc = 0.0;
    for (int i = j; i < body; i += lanes) acc += value(lo + i);
    double s = 0.0;
    for (int i = body; i < len; ++i) s += value(lo + i);  // the tail
    for (int k = 0; k < lanes; ++k) {
      const double a = __shfl_sync(0xffffffffu, acc, k, lanes);  // every lane takes part
      s += a;
    }
    __syncthreads();  // the previous round's sums have been added
    if (j == 0) sh.part[g] = s;
    __syncthreads();
    if (t == 0)
      for (int k = 0; k < exp_groups && c0 + k < chunks; ++k) sh.total += sh.part[k];
  }
  __syncthreads();
  return sh.total;
}

//! exp_sum (vec.inl) of fast_exp_fused(row[i] - m) over [0, n), in its order. To every thread.
__device__ inline double exp_sum_block(const float* row, std::int64_t n, float m, row_kernel_shared& sh) {
  return chunked_sum_block(n, [&](std::int64_t i) { return static_cast<double>(fast_exp_fused(row[i] - m)); }, sh);
}

//! Keeps, among the entries of `row` selected by `candidate(i)`, those whose key(i) is above `kth`,
//! and the first `take` (in index order) of those equal to it; the others of the candidates get -inf.
//! Entries that are not candidates are left alone. The tie ranks come from a CUB block scan per chunk
//! of 512 entries, in index order. Contains __syncthreads.
template <class Candidate, class Key>
__device__ void keep_above_and_first_ties(float* row, std::int64_t n, const Candidate& candidate, const Key& key,
                                          std::uint32_t kth, std::int32_t take, row_kernel_shared& sh) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) sh.ties_before = 0;
  __syncthreads();
  for (std::int64_t base = 0; base < n; base += process_threads) {  // uniform trip count
    const std::int64_t i = base + t;
    const bool cand = i < n && candidate(i);
    const std::uint32_t k = cand ? key(i) : 0u;
    const bool tie = cand && k == kth;
    std::int32_t rank, tied;
    cub::BlockScan<std::int32_t, process_threads>(sh.tmp.scan).ExclusiveSum(tie ? 1 : 0, rank, tied);
    const std::int32_t before = sh.ties_before;
    if (cand && !(k > kth || (tie && before + rank < take))) row[i] = ninf;
    __syncthreads();  // every thread has read ties_before; the scan storage is free
    if (t == 0) sh.ties_before = before + tied;
    __syncthreads();
  }
}

//! Exact sums of weights into out[0, slots) (slots <= top_p_bins): visit(i, add), for i in [0, n),
//! calls add(slot, w) for the weights w > 0 of entry i that go to `slot`, every weight of a slot a
//! multiple of quantum(slot) below 2^(exponent + 1) (one binade: top_p_units). The weights' quanta go
//! to 32-bit shared-memory counters (two atomics per weight), folded into out after every
//! top_p_units_round entries (sampling/detail/vec.hpp). out is cleared first and complete on return,
//! to every thread. Every thread calls it; contains __syncthreads.
template <class Visit, class Quantum>
__device__ void block_exact_sums(std::int64_t n, std::uint32_t slots, double* out, const Visit& visit,
                                 const Quantum& quantum, row_kernel_shared& sh) {
  const auto t = static_cast<std::uint32_t>(threadIdx.x);
  for (std::uint32_t b = t; b < slots; b += process_threads) out[b] = 0.0, sh.units_hi[b] = 0u, sh.units_lo[b] = 0u;
  __syncthreads();
  const auto add = [&](std::uint32_t slot, float w) {
    const std::uint32_t u = top_p_units(w);
    atomicAdd(&sh.units_hi[slot], top_p_units_hi(u));
    atomicAdd(&sh.units_lo[slot], top_p_units_lo(u));
  };
  for (std::int64_t r0 = 0; r0 < n; r0 += top_p_units_round) {  // uniform trip count
    const std::int64_t r1 = n - r0 < top_p_units_round ? n : r0 + top_p_units_round;
    for (std::int64_t i = r0 + t; i < r1; i += process_threads) visit(i, add);
    __syncthreads();
    for (std::uint32_t b = t; b < slots; b += process_threads) {
      out[b] += top_p_units_mass(sh.units_hi[b], sh.units_lo[b], quantum(b));
      sh.units_hi[b] = 0u, sh.units_lo[b] = 0u;
    }
    __syncthreads();
  }
}

//! Top-p (apply_top_p) on a row whose maximum is m.
__device__ inline void block_top_p(float* row, std::int64_t n, float m, float top_p, row_kernel_shared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  const auto weight = [&](std::int64_t i) { return fast_exp_fused(row[i] - m); };
  const double total = exp_sum_block(row, n, m, sh);
  block_exact_sums(
      n, top_p_bins, sh.mass,
      [&](std::int64_t i, const auto& add) {
        const float w = weight(i);
        if (w > 0.0f) add(top_p_bin_of(w), w);  // a bin's weights share one exponent
      },
      [](std::uint32_t b) { return top_p_quantum(b); }, sh);
  if (t == 0) {  // the boundary bin and the mass still needed there, as the host finds them
    const double need = __dmul_rn(static_cast<double>(top_p), total);  // never fused with a later add: the host's product
    double above = 0.0;
    std::uint32_t boundary = top_p_bins - 1;
    for (; boundary > 0; --boundary) {
      if (above + sh.mass[boundary] >= need) break;
      above += sh.mass[boundary];
    }
    const double q = top_p_quantum(boundary);
    sh.boundary = boundary;
    sh.need = std::ceil((need - above) / q) * q;
  }
  __syncthreads();
  const std::uint32_t boundary = sh.boundary;
  const auto in_boundary = [&](std::int64_t i) {
    const float w = weight(i);
    return w > 0.0f && top_p_bin_of(w) == boundary;
  };
  const auto key = [&](std::int64_t i) { return topk_key(row[i]); };
  // The smallest (logit desc, id asc) prefix of the boundary bin whose weight reaches sh.need: a
  // byte of the logit key per pass, the digit where the weight above it first reaches what is needed.
  const double boundary_quantum = top_p_quantum(boundary);
  std::uint32_t prefix = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int d = t; d < 256; d += process_threads) sh.cnt[d] = 0;  // published by block_exact_sums' barrier
    block_exact_sums(
        n, 256, sh.wsum,
        [&](std::int64_t i, const auto& add) {
          if (!in_boundary(i)) return;
          const std::uint32_t k = key(i);
          if (pass == 0 || (k >> (shift + 8)) == prefix) {
            add((k >> shift) & 255u, weight(i));  // the boundary bin's weights: one exponent
            atomicAdd(&sh.cnt[(k >> shift) & 255u], 1);
          }
        },
        [boundary_quantum](std::uint32_t) { return boundary_quantum; }, sh);
    if (t == 0) {
      double need = sh.need, acc = 0.0;
      int d = 255;
      for (; d > 0; --d) {
        if (sh.cnt[d] > 0 && acc + sh.wsum[d] >= need) break;
        acc += sh.wsum[d];
      }
      sh.need = need - acc;  // exact: multiples of the bin's spacing
      sh.key = (prefix << 8) | static_cast<std::uint32_t>(d);
      if (pass == 3) {
        // the tokens with the last key share one logit, so one weight: the first ceil(need / w) of
        // them (in index order) complete the prefix; all of them when even that is not enough
        const std::uint32_t kk = sh.key;
        const float v = bits_float(kk >= 0x80000000u ? kk & 0x7FFFFFFFu : ~kk);
        const double w = static_cast<double>(fast_exp_fused(v - m));
        const double j = w > 0.0 ? std::ceil(sh.need / w) : static_cast<double>(sh.cnt[d]);
        sh.kept_ties = j < static_cast<double>(sh.cnt[d]) ? static_cast<std::int32_t>(j) : sh.cnt[d];
      }
    }
    __syncthreads();
    prefix = sh.key;
  }
  // Mask: the bins above the boundary stay, the boundary bin's prefix stays, the rest is -inf.
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const std::int32_t take = sh.kept_ties;
  // every token at the last key kept (distinct logits: the usual case): the boundary bin is cut here,
  // without keep_above_and_first_ties' block scans
  const bool all_ties = take == sh.cnt[prefix & 255u];
  for (std::int64_t i = t; i < n; i += process_threads) {
    const float w = weight(i);
    const std::uint32_t b = top_p_bin_of(w);
    if (b < boundary || (b == boundary && (w == 0.0f || (all_ties && key(i) < prefix)))) row[i] = ninf;
  }
  __syncthreads();
  if (all_ties) return;
  keep_above_and_first_ties(row, n, in_boundary, key, prefix, take, sh);
}

//! Eta (process_row's last step) on a row whose maximum is m.
__device__ inline void block_eta(float* row, std::int64_t n, float m, const sampling_params& p, row_kernel_shared& sh) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const int t = static_cast<int>(threadIdx.x);
  const double sum = exp_sum_block(row, n, m, sh);
  // weighted_shift_sum (vec.inl), in exp_sum's order
  const double s = chunked_sum_block(
      n,
      [&](std::int64_t i) {
        const float w = fast_exp_fused(row[i] - m);  // the product rounded on its own, as on the host
        return w > 0.0f ? __dmul_rn(static_cast<double>(w), static_cast<double>(row[i] - m)) : 0.0;
      },
      sh);
  if (t == 0) {
    const double h = std::log(sum) - s / sum;
    sh.need = eta_weight_cut(p.eta_epsilon, p.eta_alpha, sum, h);
  }
  const std::int64_t best = block_first_index(row, n, m, sh);  // its barriers publish sh.need
  const double cut = sh.need;
  for (std::int64_t i = t; i < n; i += process_threads)
    if (static_cast<double>(fast_exp_fused(row[i] - m)) < cut && i != best) row[i] = ninf;
}

//! Whether row r's sampling entry e is in range and valid for the call (batch_sampling_params_ok);
//! otherwise thread 0 reports device_error::params (request = e, index = r). The same for every thread.
__device__ inline bool row_entry_ok(const process_logits_batch_args& a, std::int64_t r, std::int32_t e) {
  if (e >= 0 && e < a.num_params && batch_sampling_params_ok(a.params[e], a.with_context)) return true;
  if (threadIdx.x == 0) device_report(a.status, device_error::params, e, static_cast<std::int32_t>(r));
  return false;
}

//! Row r's penalty view (row_penalty_of), with its context's pairs and its suffix tokens checked by
//! the block (penalty_pair_ok; tokens in [0, V)). False, after thread 0 reports device_error::context
//! (request = the row's context, index = r), when anything is malformed. Uniform.
__device__ inline bool block_row_penalty(const process_logits_batch_args& a, std::int64_t r, const sampling_params& p,
                                         row_penalty& rp) {
  const int t = static_cast<int>(threadIdx.x);
  std::int32_t c = -1;
  bool ok = row_penalty_of(a, r, p, rp, c);  // the same values for every thread
  if (ok && a.with_context) {
    bool bad = false;
    if (c >= 0) {
      const std::int64_t lo = a.context_indptr[c], hi = a.context_indptr[c + 1];
      for (std::int64_t j = lo + t; j < hi; j += process_threads)
        bad |= !penalty_pair_ok(a.distinct, a.last, lo, j, a.vocab, a.context_length[c]);
    }
    for (std::int32_t k = t; k < rp.depth; k += process_threads) bad |= rp.path[k] < 0 || rp.path[k] >= a.vocab;
    ok = __syncthreads_or(bad ? 1 : 0) == 0;
  }
  if (!ok && t == 0) device_report(a.status, device_error::context, c, static_cast<std::int32_t>(r));
  return ok;
}

//! Whether some logit of the row stays above -inf after the penalties: the row's logits above -inf
//! plus each phase's changes to that number (penalty_pair_survival, penalty_path_survival; the host
//! backend counts the same way). To every thread.
__device__ inline bool block_penalties_leave_some(const float* row, std::int64_t n, const row_penalty& rp,
                                                  row_kernel_shared& sh) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const int t = static_cast<int>(threadIdx.x);
  std::int64_t count = 0;
  for (std::int64_t i = t; i < n; i += process_threads) count += row[i] > ninf;
  for (std::int32_t j = t; j < rp.count; j += process_threads) count += penalty_pair_survival(rp, j, row);
  for (std::int32_t k = t; k < rp.depth; k += process_threads) count += penalty_path_survival(rp, k, row);
  __syncthreads();  // sh.tmp may still be read by an earlier reduction
  const std::int64_t total = cub::BlockReduce<std::int64_t, process_threads>(sh.tmp.reduce_i).Sum(count);
  if (t == 0) sh.first = total;
  __syncthreads();
  return sh.first > 0;
}

//! process_logits_batch's work on row r of `a` (its entry, context and report numbers), done in place
//! on `row`: a.logits + r * a.stride itself, or a copy of it (the sampled verifier's workspace row).
//! Every step of the file comment; true when the row was processed, false after its report (the row
//! then unspecified if it is a copy, as it was otherwise). Every thread calls it; the result is
//! uniform, and sh is free again on return.
__device__ inline bool block_process_row(const process_logits_batch_args& a, std::int64_t r, float* row,
                                         row_kernel_shared& sh) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t n = a.vocab;
  const std::int32_t e = a.row_params[r];
  if (!row_entry_ok(a, r, e)) return false;  // uniform
  const sampling_params p = a.params[e];
  row_penalty rp;
  if (!block_row_penalty(a, r, p, rp)) return false;
  if (!block_admissible_row(row, n, a.status, r, sh)) return false;
  if (rp.active()) {  // steps 1-2 (penalty_context.hpp: one owner per distinct token, so no races)
    if (!isfinite(lowest_penalized(p, sh.fmin)) && !block_penalties_leave_some(row, n, rp, sh)) {
      if (t == 0) device_report(a.status, device_error::row, -1, static_cast<std::int32_t>(r));
      return false;  // uniform; the barriers above leave sh free
    }
    for (std::int32_t j = t; j < rp.count; j += process_threads)  // phase 1: the pairs
      if (penalty_pair_acts(rp, j)) row[rp.distinct[j]] = penalized_logit(rp, row[rp.distinct[j]], rp.last[j]);
    __syncthreads();
    for (std::int32_t k = t; k < rp.depth; k += process_threads) {  // phase 2: the suffix
      std::int32_t token, pair;
      const auto act = penalty_path_step(rp, k, token, pair);
      if (act != penalty_path_action::none) row[token] = penalty_path_value(rp, act, row[token], k);
    }
    __syncthreads();
    (void)block_admissible_row(row, n, a.status, r, sh);  // admissible: penalties make no NaN or +inf
  }
  float m = sh.fmax;
  const float lo = sh.fmin;
  if (p.temperature == 0.0f) {  // greedy: one-hot at the first maximum
    const std::int64_t top = block_first_index(row, n, m, sh);
    for (std::int64_t i = t; i < n; i += process_threads) row[i] = i == top ? 0.0f : ninf;
    __syncthreads();
    return true;
  }
  if (p.temperature != 1.0f) {  // apply_temperature
    const float inv = 1.0f / p.temperature;
    const float hi = m * inv, low = lo * inv;
    if (isfinite(hi) && isfinite(low)) {
      for (std::int64_t i = t; i < n; i += process_threads) row[i] = row[i] * inv;
      m = hi;
    } else {
      const float shift = sh.fmax + 0.0f;  // +0 for either zero, as the host shifts
      for (std::int64_t i = t; i < n; i += process_threads) row[i] = (row[i] - shift) / p.temperature;
      m = 0.0f;
    }
    __syncthreads();
  }
  if (p.top_k > 0 && p.top_k < n) {
    const auto key = [&](std::int64_t i) { return topk_key(row[i]); };
    const radix_select_result sel = block_radix_select<process_threads>(
        [&](const auto& visit) {  // plain loads: the temperature step may have written the row
          for_each_strided<8, false>(row, n, t, process_threads, [&](float v, std::int64_t) { visit(topk_key(v)); });
        },
        p.top_k, sh.select);
    if (sel.kth_count == sel.need) {  // every entry equal to the k-th is kept (distinct values: the usual case)
      for (std::int64_t i = t; i < n; i += process_threads)
        if (key(i) < sel.kth) row[i] = ninf;
      __syncthreads();
    } else {
      keep_above_and_first_ties(row, n, [](std::int64_t) { return true; }, key, sel.kth, sel.need, sh);
    }
  }
  if (p.top_p < 1.0f) block_top_p(row, n, m, p.top_p, sh);
  if (p.min_p > 0.0f) {
    // P(v) >= p_base * p_max  <=>  l_v - max >= ln(p_base) (the device's double log: within 1 ulp)
    const float cut = min_p_cut(m, p.min_p);
    for (std::int64_t i = t; i < n; i += process_threads) row[i] = row[i] >= cut ? row[i] : ninf;
    __syncthreads();
  }
  if (p.eta_epsilon > 0.0f) block_eta(row, n, m, p, sh);
  __syncthreads();  // the row and sh are done before the caller goes on
  return true;
}

//! logits_to_probs_batch's work on one row (`r`: its number in reports): the scan, the total in
//! exp_sum's order, then out[i] = w * float(1 / total); `out` may be the row itself (each entry is
//! read, then written, by one thread). False after the row's report (nothing written). Every thread
//! calls it; uniform.
__device__ inline bool block_probs_row(const float* row, float* out, std::int64_t n, std::int32_t* status,
                                       std::int64_t r, row_kernel_shared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  if (!block_admissible_row(row, n, status, r, sh)) return false;
  const float m = sh.fmax;
  const float inv = static_cast<float>(1.0 / exp_sum_block(row, n, m, sh));
  for (std::int64_t i = t; i < n; i += process_threads) out[i] = fast_exp_fused(row[i] - m) * inv;
  __syncthreads();
  return true;
}

__global__ void __launch_bounds__(process_threads) process_logits_kernel(const process_logits_batch_args a) {
  __shared__ row_kernel_shared sh;
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) (void)block_process_row(a, r, a.logits + r * a.stride, sh);
}

__global__ void __launch_bounds__(process_threads) logits_to_probs_kernel(const logits_to_probs_batch_args a) {
  __shared__ row_kernel_shared sh;
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x)
    (void)block_probs_row(a.logits + r * a.l_stride, a.probs + r * a.p_stride, a.vocab, a.status, r, sh);
}

//! penalized_argmax_batch's kernel: a block per row (grid-stride), process_threads threads, the row's
//! marks in dynamic shared memory ((V + 31) / 32 words). Per row: the entry and the context checked as
//! process_logits_kernel checks them (the same reports); the row's context and suffix tokens marked,
//! and its in-window suffix tokens put in a window_suffix_filter (shared); one pass over the row (the
//! non-finite check, and the first maximum of the unmarked tokens); each final owner's value
//! (penalty_pair_final, penalty_path_final); a CUB block reduction of the
//! first_max shares. A row with NaN or +inf, or with no logit above -inf after the penalties, is
//! reported as device_error::row (process_logits_kernel's report for it) and gets -1.
__global__ void __launch_bounds__(process_threads) penalized_argmax_kernel(const penalized_argmax_args args) {
  using reduce = cub::BlockReduce<first_max, process_threads>;
  __shared__ typename reduce::TempStorage tmp;
  __shared__ window_suffix_filter filter;
  extern __shared__ std::uint32_t marks[];
  constexpr float inf = std::numeric_limits<float>::infinity();
  const process_logits_batch_args& a = args.rows;
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t n = a.vocab, words = (n + 31) / 32;
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float* row = a.logits;  // read only (penalized_argmax_args)
    row += r * a.stride;
    const std::int32_t e = a.row_params[r];
    if (!row_entry_ok(a, r, e)) {  // uniform
      if (t == 0) args.argmax[r] = -1;
      continue;
    }
    row_penalty rp;
    if (!block_row_penalty(a, r, a.params[e], rp)) {  // uniform; its barrier ends its reads
      if (t == 0) args.argmax[r] = -1;
      continue;
    }
    const bool active = rp.active();
    if (active) {
      for (std::int64_t w = t; w < words; w += process_threads) marks[w] = 0u;
      if (t < 32) filter.words[t] = 0u;
      __syncthreads();
      for (std::int32_t j = t; j < rp.count; j += process_threads)
        atomicOr(&marks[rp.distinct[j] >> 5], 1u << (rp.distinct[j] & 31));
      for (std::int32_t k = t; k < rp.depth; k += process_threads) atomicOr(&marks[rp.path[k] >> 5], 1u << (rp.path[k] & 31));
      for (std::int64_t k = window_suffix_begin(rp) + t; k < rp.depth; k += process_threads) {
        const std::uint32_t slot = window_suffix_filter::slot(rp.path[k]);
        atomicOr(&filter.words[slot >> 5], 1u << (slot & 31));
      }
      __syncthreads();
    }
    first_max best;
    bool bad = false;
    for_each_strided(row, n, t, process_threads, [&](float v, std::int64_t i) {
      bad |= (v != v) || v == inf;
      if (!active || ((marks[i >> 5] >> (i & 31)) & 1u) == 0u) best.see(v, static_cast<std::int32_t>(i));
    });
    if (active) {
      for (std::int32_t j = t; j < rp.count; j += process_threads) {
        float v;
        if (penalty_pair_final(rp, j, row, [](std::int32_t token) { return filter.maybe(token); }, v))
          best.see(v, rp.distinct[j]);
      }
      for (std::int32_t k = t; k < rp.depth; k += process_threads) {
        std::int32_t token;
        float v;
        if (penalty_path_final(rp, k, row, token, v)) best.see(v, token);
      }
    }
    const bool row_bad = __syncthreads_or(bad ? 1 : 0) != 0;
    const first_max b = reduce(tmp).Reduce(best, [](first_max x, const first_max& y) {
      x.see(y.v, y.i);
      return x;
    });
    if (t == 0) {
      const bool ok = !row_bad && b.v > -inf;  // no NaN or +inf; some logit above -inf after the penalties
      if (!ok) device_report(a.status, device_error::row, -1, static_cast<std::int32_t>(r));
      args.argmax[r] = ok ? b.i : -1;
    }
    __syncthreads();  // tmp and marks are reused by the next row
  }
}

//! penalized_argmax_kernel's dynamic shared memory for V tokens: the bitmap, (V + 31) / 32 words.
[[nodiscard]] inline std::size_t penalized_argmax_smem(std::int64_t vocab) noexcept {
  return static_cast<std::size_t>((vocab + 31) / 32) * sizeof(std::uint32_t);
}
//! Whether the current device gives one block the shared memory penalized_argmax_kernel takes for V
//! tokens (its opt-in limit: 227 KiB on sm_90, so every V <= 2^20; 99 KiB on sm_86 / sm_89, about
//! 790K tokens). Host only; a device query, no synchronisation.
[[nodiscard]] inline bool penalized_argmax_fits(std::int64_t vocab) {
  int device = 0, optin = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute (shared memory per block)");
  return penalized_argmax_smem(vocab) + 1024 <= static_cast<std::size_t>(optin);  // + the static CUB storage
}

//! The cuda backend of penalized_argmax_batch (the seam in sampling/logits_processor.hpp): the entry
//! point has checked shapes, memory spaces and V <= penalized_argmax_max_vocab. Refuses a V whose
//! bitmap the device cannot hold (penalized_argmax_fits; invalid_argument before any CUDA work), then
//! clears status and launches the kernel on policy.stream, opting in to the shared memory its marks
//! need beyond the default 48 KiB (V > ~2^18); no synchronisation. A failed launch throws cuda_error.
template <>
struct penalized_argmax_backend<cuda> {
  static void run(const cuda& policy, const penalized_argmax_args& args) {
    const process_logits_batch_args& a = args.rows;
    if (a.rows > 0 && !penalized_argmax_fits(a.vocab)) [[unlikely]]
      throw_invalid_argument(args.fn, args.logits_name,
                             "a vocabulary whose bitmap (V / 8 bytes) fits one block's shared memory on this device",
                             a.vocab);
    clear_device_status(a.status, policy.stream);
    if (a.rows == 0) return;
    const std::size_t bytes = penalized_argmax_smem(a.vocab);
    if (bytes > 32 * 1024)
      cuda_check(cudaFuncSetAttribute(penalized_argmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)),
                 "penalized_argmax_kernel (shared memory)");
    penalized_argmax_kernel<<<per_request_blocks(a.rows), process_threads, bytes, policy.stream>>>(args);
    cuda_check(cudaGetLastError(), "penalized_argmax_kernel");
  }
};

//! The cuda backend of process_logits_batch (the seam in sampling/logits_processor.hpp): the entry
//! point has checked shapes, strides and memory spaces. Clears status and launches the kernel on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct process_logits_backend<cuda> {
  static void run(const cuda& policy, const process_logits_batch_args& a) {
    clear_device_status(a.status, policy.stream);
    if (a.rows == 0) return;
    launch_per_request<process_threads>(process_logits_kernel, a.rows, policy.stream, "process_logits_kernel", a);
  }
};

//! The cuda backend of logits_to_probs_batch (the seam in sampling/logits_processor.hpp).
template <>
struct logits_to_probs_backend<cuda> {
  static void run(const cuda& policy, const logits_to_probs_batch_args& a) {
    clear_device_status(a.status, policy.stream);
    if (a.rows == 0) return;
    launch_per_request<process_threads>(logits_to_probs_kernel, a.rows, policy.stream, "logits_to_probs_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
