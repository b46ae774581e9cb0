#pragma once
// The logits forms of verify_sample_and_match_batch, verify_chain_speculative_batch and
// verify_multi_draft_batch on the device (tests/cuda/test_verify_sample_and_match.cu,
// test_verify_chain_speculative.cu, test_verify_multi_draft.cu): a
// sampled_logits_case (tests/verify/sample_and_match_batch_util.hpp) uploaded and launched.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/tree_verify_device_util.cuh"
#include "specdec/verify/multi_draft.cuh"
#include "specdec/verify/sample_and_match.cuh"
#include "specdec/verify/speculative_sampling.cuh"
#include "verify/sample_and_match_batch_util.hpp"

namespace specdec_test {

using specdec::memory_space;

//! The logits form on the device: c's arrays uploaded (logits with a row stride of vocab + pad,
//! the padding NaN; draft rows q likewise), a [R, V] workspace, the outputs; launch()
//! runs the logits form of the case's kind.
struct device_logits_case {
  device_buffer<std::int32_t> ni, tok, par, rp;
  device_buffer<specdec::sampling_params> params;
  device_buffer<std::uint64_t> seeds, streams;
  device_buffer<float> lg, q, work;
  device_tree_outputs out;
  std::optional<device_penalty_context> ctx;
  std::int64_t rows, vocab, stride, requests, work_stride;
  logits_case_kind kind;
  // the workspace's rows are vocab + pad + 1 floats apart
  device_logits_case(const sampled_logits_case& c, std::int64_t pad = 0)
      : ni(c.node_indptr), tok(c.tokens), par(c.parents), rp(c.row_params), params(c.params), seeds(c.seeds),
        streams(c.streams), lg(padded_rows(c.logits, c.rows(), c.vocab, c.vocab + pad, nan_fill())),
        q(c.has_draft_rows() ? padded_rows(c.q, c.rows(), c.vocab, c.vocab + pad, nan_fill()) : std::vector<float>(1)),
        work(static_cast<std::size_t>(std::max(1, c.requests()) * (c.vocab + pad + 1))),
        out(c.node_indptr.size() - 1, c.tokens.size()), rows(c.rows()), vocab(c.vocab), stride(c.vocab + pad),
        requests(c.requests()), work_stride(c.vocab + pad + 1), kind(c.kind) {
    if (c.penalties) ctx.emplace(c.b);
  }
  static float nan_fill() { return std::numeric_limits<float>::quiet_NaN(); }
  void launch(cudaStream_t s = nullptr) {
    if (ctx)
      launch_with(s, ctx->view());
    else
      launch_with(s);
  }
  //! The form of the case's kind, with the penalty context when given (`context...`: it or nothing).
  template <class... Context>
  void launch_with(cudaStream_t s, const Context&... context) {
    const specdec::strided_view<const float, 2> l(lg.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    const specdec::strided_view<float, 2> w(work.data(), {requests, vocab}, {work_stride, 1}, memory_space::device);
    const specdec::strided_view<const float, 2> qv(q.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    const specdec::cuda pol{.stream = s};
    if (kind == logits_case_kind::multi_draft || kind == logits_case_kind::multi_draft_wor) {
      const auto mode = kind == logits_case_kind::multi_draft_wor ? specdec::draft_sampling::without_replacement
                                                                  : specdec::draft_sampling::with_replacement;
      specdec::verify_multi_draft_batch(pol, dv(ni), dv(tok), dv(par), l, qv, mode, dv(params), dv(rp), context...,
                                        dv(seeds), dv(streams), w, dv(out.acc), dv(out.nacc), dv(out.bon),
                                        dv(out.emi), dv(out.st));
    } else if (kind == logits_case_kind::chain) {
      specdec::verify_chain_speculative_batch(pol, dv(ni), dv(tok), dv(par), l, qv, dv(params), dv(rp), context...,
                                              dv(seeds), dv(streams), w, dv(out.acc), dv(out.nacc), dv(out.bon),
                                              dv(out.emi), dv(out.st));
    } else {
      specdec::verify_sample_and_match_batch(pol, dv(ni), dv(tok), dv(par), l, dv(params), dv(rp), context...,
                                             dv(seeds), dv(streams), w, dv(out.acc), dv(out.nacc), dv(out.bon),
                                             dv(out.emi), dv(out.st));
    }
  }
};

//! c's form on the device with the logits' and draft rows' stride vocab and vocab + 5, each against
//! the host composition (sampled_logits_case::matches); returns the nodes accepted, both runs counted.
inline int device_matches_host(const sampled_logits_case& c) {
  int accepted = 0;
  for (std::int64_t pad : {0, 5}) {
    device_logits_case d(c, pad);
    d.launch();
    sync_check("a logits form");
    INFO("requests " << c.requests() << " V " << c.vocab << " pad " << pad << " penalties " << c.penalties << " kind "
                     << static_cast<int>(c.kind));
    accepted += c.matches(d.out.download());
  }
  return accepted;
}

//! c's form captured in a CUDA graph and replayed three times, the streams of step 1, 2, 3 uploaded
//! between replays and each replay's outputs checked against the host composition for that step.
inline void replay_logits_case(sampled_logits_case c) {
  device_logits_case d(c);
  std::uint32_t step = 0;
  replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {
        ++step;
        for (int r = 0; r < c.requests(); ++r) c.streams[static_cast<std::size_t>(r)] = specdec::stream_id(static_cast<std::uint32_t>(r), step);
        c.finish();
        d.streams.upload(c.streams);
        d.out.reset();
      },
      [&] { (void)c.matches(d.out.download()); });
}

}  // namespace specdec_test
