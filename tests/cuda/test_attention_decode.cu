// decode_attention on the cuda backend against the double reference and the host backend: ragged
// batches (some requests without query tokens), cache lengths 0, 1 and non-multiples of the 64-key
// tile and of the split, GQA ratios 1/4/8, head dims 64/128/256, contiguous NHD/HND and paged
// layouts, automatic and forced split sizes, fp16 and bf16. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <vector>

#include "cuda/test_attention_common.cuh"
#include "specdec/attention/decode_attention.cuh"

using namespace cuda_attn_test;

namespace {

template <class T>
void run_decode(batch<T>& b, layout_kind kind, specdec::attention_options opt = {}) {
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
  check_cuda(b, host, ref);
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
