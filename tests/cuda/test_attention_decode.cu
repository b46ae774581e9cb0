// decode_attention on the cuda backend against the double reference and the host backend: ragged
// batches (some requests without query tokens), cache lengths 0, 1 and non-multiples of the 64-key
// tile and of the split, GQA ratios 1/4/8, head dims 64/128/256, contiguous NHD/HND and paged
// layouts, automatic and forced split sizes, fp16 and bf16; NaN/Inf in cache slots a row cannot
// see (past `length`, unused pages) never reach it while visible ones do (README "Conventions");
// denormal Q/K/V are ordinary numbers. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "attention/nonfinite_util.hpp"
#include "cuda/attention_runner.cuh"
#include "cuda/test_attention_common.cuh"
#include "specdec/attention/decode_attention.cuh"

using namespace cuda_attn_test;

namespace {

template <class T>
void run_decode(batch<T>& b, layout_kind kind, specdec::attention_options opt = {}, double out_scale = 1.0) {
  batch<T> host = b;
  host.with_layout(kind, [&](auto layout) {
    specdec::decode_attention(specdec::host{}, host.q_view(), layout, host.indptr_view(), host.out_view(),
                              host.lse_view(), opt);
  });
  const auto ref = specdec::reference::decode_attention(b.q_view(), b.nhd(), b.indptr_view(), opt.scale);
  device_batch<T> d(b);
  d.with_layout(kind, [&](auto layout) {
    device_workspace ws(specdec::decode_attention_workspace_bytes(specdec::cuda{}, d.q_view(), layout, d.indptr_view(), opt));
    auto o = opt;
    o.workspace = &ws.ws;
    specdec::decode_attention(specdec::cuda{}, d.q_view(), layout, d.indptr_view(), d.out_view(), d.lse_view(), o);
    specdec_test::sync_check("decode_attention(cuda)");
  });
  d.out.download(b.out);
  d.lse.download(b.lse);
  check_cuda(b, host, ref, out_scale);
}

//! Sets K and/or V (the whole head row) of cached token t, kv head h of request r to x, in every
//! layout of the batch (contiguous NHD and HND, and the request's page slot).
template <class T>
void poison_cache_token(batch<T>& b, int r, int t, int h, float x, attn_test::poison_target what) {
  const T bad = specdec::from_float<T>(x);
  const auto set = [&](std::vector<T>& k, std::vector<T>& v, std::size_t at) {
    const auto first = static_cast<std::ptrdiff_t>(at);
    if (what != attn_test::poison_target::v) std::fill_n(k.begin() + first, b.d, bad);
    if (what != attn_test::poison_target::k) std::fill_n(v.begin() + first, b.d, bad);
  };
  set(b.k_nhd, b.v_nhd, ((static_cast<std::size_t>(r) * b.capacity + t) * b.hkv + h) * b.d);
  set(b.k_hnd, b.v_hnd, ((static_cast<std::size_t>(r) * b.hkv + h) * b.capacity + t) * b.d);
  const std::size_t page = static_cast<std::size_t>(b.page_indices[b.page_indptr[r] + t / b.page_size]);
  set(b.k_pages, b.v_pages, ((page * b.page_size + t % b.page_size) * b.hkv + h) * b.d);
}

//! The decode twin of attn_test::check_poisoned_tree: runs decode_attention(cuda) clean, then after
//! poisoning every cache slot no request can see (attn_test::poison_invisible_cache) and one kv head
//! of one or two visible cached tokens (a random one and the last, `length - 1`) in every other
//! non-empty request. Rows (query token, query head) that read a poisoned visible token must be
//! non-finite in every output element (NaN where the poison is NaN) with, when only V was poisoned,
//! the clean LSE, else a non-finite LSE for NaN poison; every other row -- the other heads of a
//! poisoned request, the other requests, empty caches -- must be bit-identical to the clean run.
template <class T>
void check_poisoned_decode(std::uint64_t seed, int hq, int hkv, int d, std::vector<int> cache_lens,
                           std::vector<int> q_counts, layout_kind kind, float x, attn_test::poison_target what,
                           specdec::attention_options opt = {}) {
  batch<T> b(seed, hq, hkv, d, cache_lens, q_counts);
  cuda_runner{}.decode(b, kind, opt);
  const std::vector<T> clean_out = b.out;
  const std::vector<float> clean_lse = b.lse;
  attn_test::poison_invisible_cache(b, x);
  specdec::philox_stream rng(seed, 98);
  const int group = hq / hkv;
  std::vector<char> affected(static_cast<std::size_t>(b.tokens()) * hq, 0);
  int poisoned_requests = 0;
  for (int r = 0; r < b.requests; ++r) {
    const int len = b.lens[static_cast<std::size_t>(r)];
    if (len == 0 || poisoned_requests++ % 2 == 1) continue;
    const int head = static_cast<int>(rng.below(static_cast<std::uint32_t>(hkv)));
    poison_cache_token(b, r, static_cast<int>(rng.below(static_cast<std::uint32_t>(len))), head, x, what);
    poison_cache_token(b, r, len - 1, head, x, what);
    for (int t = b.q_indptr[static_cast<std::size_t>(r)]; t < b.q_indptr[static_cast<std::size_t>(r) + 1]; ++t)
      for (int g = 0; g < group; ++g) affected[static_cast<std::size_t>(t) * hq + head * group + g] = 1;
  }
  cuda_runner{}.decode(b, kind, opt);
  const attn_test::poisoned_rows n = attn_test::count_poisoned_rows(b, clean_out, clean_lse, affected, x, what);
  INFO("seed " << seed << " layout " << attn_test::name(kind) << " split " << opt.kv_split_size << " poison " << x
               << " target " << static_cast<int>(what) << ": " << n.affected << " affected rows");
  CHECK(n.affected > 0);
  CHECK(n.mismatched == 0);
  CHECK(n.finite_affected == 0);
  CHECK(n.wrong_lse == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda decode_attention: ragged batches, edge cache lengths, every layout", "[cuda][attention]",
                   specdec::bfloat16, specdec::half) {
  int seed = 1000;
  for (auto kind : {layout_kind::nhd, layout_kind::hnd, layout_kind::paged}) {
    DYNAMIC_SECTION(attn_test::name(kind)) {
      batch<TestType> b(++seed, 8, 2, 128, {0, 1, 63, 64, 65, 1000, 4097}, {1, 2, 1, 0, 3, 1, 5});
      run_decode(b, kind);
    }
  }
}

TEST_CASE("cuda decode_attention: GQA ratios and head dims", "[cuda][attention]") {
  int seed = 1100;
  for (int ratio : {1, 4, 8})
    for (int d : {64, 128, 256}) {
      DYNAMIC_SECTION("ratio " << ratio << " head_dim " << d) {
        batch<specdec::bfloat16> b(++seed, 2 * ratio, 2, d, {129, 7, 300}, {1, 4, 2});
        run_decode(b, seed % 2 ? layout_kind::paged : layout_kind::nhd);
      }
    }
}

TEST_CASE("cuda decode_attention: forced split sizes (several chunks per CTA) and a custom scale", "[cuda][attention]") {
  for (int split : {1, 17, 64, 100, 5000}) {
    DYNAMIC_SECTION("split " << split) {
      batch<specdec::bfloat16> b(1200 + split, 8, 2, 128, {3000, 0, 257}, {2, 1, 3});
      run_decode(b, layout_kind::paged, {.scale = 0.05f, .kv_split_size = split});
    }
  }
}

TEST_CASE("cuda decode_attention: one long request fills the device, many short ones too", "[cuda][attention]") {
  SECTION("one request, 20000 cached tokens") {
    batch<specdec::bfloat16> b(1300, 32, 8, 128, {20000}, {1});
    run_decode(b, layout_kind::nhd);
  }
  SECTION("64 requests, one query token each") {
    std::vector<int> lens, sizes(64, 1);
    for (int r = 0; r < 64; ++r) lens.push_back((r * 37) % 300);
    batch<specdec::bfloat16> b(1301, 8, 2, 128, lens, sizes);
    run_decode(b, layout_kind::paged);
  }
}

TEST_CASE("cuda decode_attention without a workspace allocates stream-ordered scratch", "[cuda][attention]") {
  batch<specdec::half> b(1400, 4, 2, 64, {100, 5}, {2, 1});
  batch<specdec::half> host = b;
  specdec::decode_attention(specdec::host{}, host.q_view(), host.nhd(), host.indptr_view(), host.out_view(),
                            host.lse_view());
  const auto ref = specdec::reference::decode_attention(b.q_view(), b.nhd(), b.indptr_view());
  device_batch<specdec::half> d(b);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreate(&stream));
  specdec::decode_attention(specdec::cuda{.stream = stream}, d.q_view(), d.nhd(), d.indptr_view(), d.out_view(),
                            d.lse_view());
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  d.out.download(b.out);
  d.lse.download(b.lse);
  check_cuda(b, host, ref);
}

TEST_CASE("cuda decode_attention: q_indptr values out of order or past q on the device stay inside q and the workspace",
          "[cuda][attention]") {
  // The host checks q_indptr's values only when it can read them; on the device a request whose
  // offsets are out of order or past q gets no row tiles (compute-sanitizer's memcheck sees no access
  // outside the buffers), and a good request before it is still computed.
  batch<specdec::half> b(1450, 4, 2, 64, {100, 5, 7}, {2, 1, 3});
  batch<specdec::half> host = b;
  specdec::decode_attention(specdec::host{}, host.q_view(), host.nhd(), host.indptr_view(), host.out_view(),
                            host.lse_view());
  device_batch<specdec::half> d(b);
  const std::vector<std::int32_t> bad{0, 2, 9, 6};  // request 1 ends past q's 6 tokens, request 2 runs backwards
  SPECDEC_CUDA_CHECK(cudaMemcpy(d.indptr.data(), bad.data(), bad.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  specdec::decode_attention(specdec::cuda{}, d.q_view(), d.nhd(), d.indptr_view(), d.out_view(), d.lse_view());
  specdec_test::sync_check("decode_attention(cuda) with bad device q_indptr");
  d.out.download(b.out);
  d.lse.download(b.lse);
  const std::size_t row = 4 * 64;  // request 0: tokens 0-1, 4 heads of 64
  int differ = 0;
  for (std::size_t i = 0; i < 2 * row; ++i)
    differ += std::abs(specdec::to_float(b.out[i]) - specdec::to_float(host.out[i])) >
              2 * attn_test::out_tol<specdec::half>() * std::max(1.0f, std::abs(specdec::to_float(host.out[i])));
  CHECK(differ == 0);
}

TEST_CASE("cuda decode_attention can be captured in a CUDA graph and replayed", "[cuda][attention]") {
  // Capture fails (cudaErrorStreamCaptureUnsupported / invalidated) if the call synchronises or
  // allocates outside the stream; replaying after changing the inputs must give the new result.
  batch<specdec::bfloat16> b(1500, 8, 2, 128, {700, 3}, {2, 1});
  device_batch<specdec::bfloat16> d(b);
  device_workspace ws(specdec::decode_attention_workspace_bytes(specdec::cuda{}, d.q_view(), d.paged(), d.indptr_view()));
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  specdec::decode_attention(specdec::cuda{.stream = stream}, d.q_view(), d.paged(), d.indptr_view(), d.out_view(),
                            d.lse_view(), {.workspace = &ws.ws});
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  SPECDEC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  // New queries, same shapes: the replay must see them.
  specdec::philox_stream rng(99, 1);
  for (auto& x : b.q) x = specdec::from_float<specdec::bfloat16>(2.0f * rng.uniform() - 1.0f);
  SPECDEC_CUDA_CHECK(cudaMemcpy(d.q.data(), b.q.data(), b.q.size() * sizeof(specdec::bfloat16), cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  SPECDEC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SPECDEC_CUDA_CHECK(cudaGraphDestroy(graph));
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  batch<specdec::bfloat16> host = b;
  specdec::decode_attention(specdec::host{}, host.q_view(), host.paged(), host.indptr_view(), host.out_view(),
                            host.lse_view());
  const auto ref = specdec::reference::decode_attention(b.q_view(), b.nhd(), b.indptr_view());
  d.out.download(b.out);
  d.lse.download(b.lse);
  check_cuda(b, host, ref);
}

TEMPLATE_TEST_CASE("cuda decode_attention: NaN/Inf past `length` or in unused pages never reaches a row; visible does",
                   "[cuda][attention][nonfinite]", specdec::bfloat16, specdec::half) {
  // Requests with an empty cache, a 1-token cache, lengths off the 64-key tile, and one with no query
  // token; automatic splits and forced small ones (a poisoned token in a later part than the first).
  using attn_test::poison_target;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::uint64_t seed = 1600;
  for (int d : {64, 128, 256}) {
    DYNAMIC_SECTION("head_dim " << d) {
      for (float x : {nan, inf, -inf})
        for (poison_target what : {poison_target::k, poison_target::v, poison_target::kv})
          for (auto kind : {layout_kind::nhd, layout_kind::hnd, layout_kind::paged})
            check_poisoned_decode<TestType>(++seed, 8, 2, d, {0, 1, 33, 65, 300, 700, 7}, {1, 2, 1, 3, 1, 2, 0},
                                            kind, x, what);
      for (int split : {17, 64})
        for (auto kind : {layout_kind::nhd, layout_kind::paged})
          check_poisoned_decode<TestType>(++seed, 4, 4, d, {200, 5, 1000}, {1, 2, 1}, kind, nan, poison_target::kv,
                                          {.kv_split_size = split});
    }
  }
}

TEMPLATE_TEST_CASE("cuda decode_attention: denormal Q, K and V are ordinary numbers", "[cuda][attention][nonfinite]",
                   specdec::bfloat16, specdec::half) {
  // Against the double reference and the host backend at the existing tolerances, relative to the
  // tiny scale where V is tiny (then also: not flushed to zero); K tiny with q scaled up gives
  // ordinary scores, so flushed keys would show as uniform weights.
  std::uint64_t seed = 1700;
  for (auto what : {denormal_target::q, denormal_target::k, denormal_target::v})
    for (auto kind : {layout_kind::nhd, layout_kind::paged}) {
      DYNAMIC_SECTION(name(what) << ", " << attn_test::name(kind)) {
        batch<TestType> b(++seed, 8, 2, 128, {40, 3, 300, 0}, {1, 2, 1, 1});
        const double scale = make_denormal(b, what);
        run_decode(b, kind, {}, scale);
        if (what == denormal_target::v) CHECK(nonzero_outputs(b) > static_cast<int>(b.out.size()) / 2);
      }
    }
}
