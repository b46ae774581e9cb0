// The LongSpec draft's attention under specdec::cuda (#23 item 5): sliding-window self-attention and
// chain decoding over a ring buffer in device memory, and cache-free cross-attention reading a
// target's contiguous or paged KV cache in place on the device, against the double-precision
// references of the host tests (tests/attention/test_sliding_window_util.hpp,
// test_cross_attention_util.hpp). The attention itself is the cuda hybrid / decode backend; what is
// tested here is that the ring and the target layouts travel to it intact.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "attention/test_cross_attention_util.hpp"
#include "attention/test_sliding_window_util.hpp"
#include "cuda/cuda_test_util.cuh"
#include "specdec/attention/decode_attention.cuh"
#include "specdec/attention/hybrid_tree_attention.cuh"

using specdec::memory_space;
using specdec_test::device_buffer;

namespace {

template <class T>
constexpr double atol() {
  return std::is_same_v<T, specdec::half> ? 2e-3 : 1.5e-2;
}

template <class T>
std::vector<T> copy_of(const T* p, std::size_t n) {
  return std::vector<T>(p, p + n);
}

//! The ring of a host ring_kv_cache, copied to the device, with its layout marked device memory.
template <class T>
struct device_ring {
  device_buffer<T> k, v;
  device_buffer<std::int32_t> starts, lengths;
  specdec::ring_kv<T> layout;
  explicit device_ring(const specdec::ring_kv<const T>& h)
      : k(copy_of(h.k, static_cast<std::size_t>(h.requests) * h.mapping.slots * h.kv_heads * h.dim)),
        v(copy_of(h.v, static_cast<std::size_t>(h.requests) * h.mapping.slots * h.kv_heads * h.dim)),
        starts(copy_of(h.mapping.starts, static_cast<std::size_t>(h.requests))),
        lengths(copy_of(h.mapping.lengths, static_cast<std::size_t>(h.requests))),
        layout(k.data(), v.data(), starts.data(), lengths.data(), h.requests, h.mapping.slots, h.mapping.window,
               h.kv_heads, h.dim, memory_space::device) {}
};

template <class T>
void sliding_window_case(int R, int hq, int hkv, int d, int W, int P, const std::vector<int>& appended,
                         const std::vector<int>& pending, const std::vector<int>& tree, std::uint32_t seed) {
  std::mt19937 rng(seed);
  swtest::problem<T> p(R, hq, hkv, d, W, P, appended, pending, tree, rng);
  const std::int64_t N = p.tokens();
  device_ring<T> ring(std::as_const(p.ring).layout());
  device_buffer<T> q(p.q), k(p.k), v(p.v), out(std::vector<T>(p.q.size()));
  device_buffer<std::int32_t> ip(p.q_indptr);
  device_buffer<specdec::mask_word> mask(p.mask.empty() ? std::vector<specdec::mask_word>{0} : p.mask);
  device_buffer<float> lse(std::vector<float>(static_cast<std::size_t>(N) * hq));
  const auto qv = specdec::make_view<3>(q.data(), {N, hq, d}, memory_space::device);
  const auto ov = specdec::make_view<3>(out.data(), {N, hq, d}, memory_space::device);
  const auto lv = specdec::make_view<2>(lse.data(), {N, hq}, memory_space::device);
  const auto iv = specdec::make_view<1>(ip.data(), {R + 1}, memory_space::device);
  // Tree drafting: the window plus each token's own ancestors.
  specdec::sliding_window_attention(specdec::cuda{}, qv, ring.layout,
                                    specdec::make_view<3>(k.data(), {N, hkv, d}, memory_space::device),
                                    specdec::make_view<3>(v.data(), {N, hkv, d}, memory_space::device), iv,
                                    specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(p.mask.size())},
                                                          memory_space::device),
                                    ov, lv);
  specdec_test::sync_check("sliding_window_attention(cuda)");
  swtest::require_close(p.reference(), out.download(), lse.download(), atol<T>(), 1e-2);
  // Chain drafting: the window only.
  specdec::sliding_window_decode(specdec::cuda{}, qv, ring.layout, iv, ov, lv);
  specdec_test::sync_check("sliding_window_decode(cuda)");
  swtest::require_close(p.reference(false), out.download(), lse.download(), atol<T>(), 1e-2);
}

template <class T, class HostLayout, class DeviceLayout>
void cross_case(const HostLayout& host_cache, const DeviceLayout& dev_cache, int hq, int d, const std::vector<int>& nq,
                std::mt19937& rng) {
  const int R = host_cache.num_requests();
  std::vector<std::int32_t> ip{0}, all;
  for (int r = 0; r < R; ++r) ip.push_back(ip.back() + nq[static_cast<std::size_t>(r)]), all.push_back(host_cache.length(r));
  const std::int64_t N = ip.back();
  std::vector<T> q(static_cast<std::size_t>(N) * hq * d);
  xtest::fill_normal(q, rng);
  device_buffer<T> dq(q), out(std::vector<T>(q.size()));
  device_buffer<float> lse(std::vector<float>(static_cast<std::size_t>(N) * hq));
  device_buffer<std::int32_t> dip(ip);
  specdec::cross_attention(specdec::cuda{}, specdec::make_view<3>(dq.data(), {N, hq, d}, memory_space::device), dev_cache,
                           specdec::make_view<1>(dip.data(), {R + 1}, memory_space::device),
                           specdec::make_view<3>(out.data(), {N, hq, d}, memory_space::device),
                           specdec::make_view<2>(lse.data(), {N, hq}, memory_space::device));
  specdec_test::sync_check("cross_attention(cuda)");
  const auto qv = specdec::make_view<3>(q.data(), {N, hq, d});
  const auto iv = specdec::make_view<1>(ip.data(), {R + 1});
  xtest::require_close(specdec::reference::cross_attention(qv, host_cache, all, iv), out.download(), lse.download(),
                       atol<T>(), 1e-2);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda sliding_window_attention / _decode over a device ring equal the reference", "[cuda][attention]",
                   specdec::half, specdec::bfloat16) {
  std::uint32_t seed = 11;
  for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 2}}) {
    sliding_window_case<TestType>(3, hq, hkv, 64, 16, 0, {0, 5, 16}, {0, 0, 0}, {1, 7, 16}, seed++);
    sliding_window_case<TestType>(3, hq, hkv, 128, 16, 4, {17, 100, 3}, {0, 4, 2}, {3, 0, 12}, seed++);
  }
  sliding_window_case<TestType>(2, 8, 2, 128, 512, 8, {1500, 512}, {3, 0}, {16, 1}, seed++);  // LongSpec's W
}

TEMPLATE_TEST_CASE("cuda cross_attention reads a device target cache in place (contiguous NHD/HND, paged)",
                   "[cuda][attention]", specdec::half, specdec::bfloat16) {
  std::mt19937 rng(5);
  for (int d : {64, 128})
    for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 2}}) {
      xtest::target<TestType> tg(3, 160, hkv, d, rng);
      tg.lengths[0] = 0;  // an empty target: out 0, lse -inf
      device_buffer<TestType> k(tg.k), v(tg.v);
      device_buffer<std::int32_t> lens(tg.lengths), pind(tg.page_indptr), pidx(tg.page_indices);
      const specdec::contiguous_kv<TestType> nhd(k.data(), v.data(), lens.data(), tg.R, tg.C, hkv, d, memory_space::device);
      const specdec::contiguous_kv<TestType, specdec::kv_order::hnd> hnd(k.data(), v.data(), lens.data(), tg.R, tg.C, hkv,
                                                                         d, memory_space::device);
      const specdec::paged_kv<TestType> paged(k.data(), v.data(), pind.data(), pidx.data(), lens.data(), tg.R,
                                              tg.R * (tg.C / tg.page), tg.page, hkv, d, memory_space::device);
      cross_case<TestType>(tg.nhd(), nhd, hq, d, {4, 1, 9}, rng);
      cross_case<TestType>(tg.hnd(), hnd, hq, d, {0, 16, 3}, rng);
      cross_case<TestType>(tg.paged(), paged, hq, d, {2, 5, 64}, rng);
    }
}

TEST_CASE("cuda sliding_window_attention and cross_attention reject host memory before any CUDA call",
          "[cuda][attention][nogpu]") {
  std::mt19937 rng(3);
  swtest::problem<specdec::half> p(1, 4, 4, 64, 16, 0, {5}, {0}, {2}, rng);
  const std::int64_t N = p.tokens();
  std::vector<specdec::half> out(p.q.size());
  std::vector<float> lse(static_cast<std::size_t>(N) * 4);
  const auto dev3 = [](auto* x, std::int64_t a, std::int64_t b, std::int64_t c) {
    return specdec::make_view<3>(x, {a, b, c}, memory_space::device);
  };
  // The ring still in host memory: the cuda backend must refuse it, naming the cache.
  CHECK_THROWS_WITH(specdec::sliding_window_decode(specdec::cuda{}, dev3(p.q.data(), N, 4, 64), p.ring.layout(),
                                                   specdec::make_view<1>(p.q_indptr.data(), {2}, memory_space::device),
                                                   dev3(out.data(), N, 4, 64),
                                                   specdec::make_view<2>(lse.data(), {N, 4}, memory_space::device)),
                    Catch::Contains("sliding_window_decode") && Catch::Contains("cache"));
  xtest::target<specdec::half> tg(1, 32, 4, 64, rng);
  CHECK_THROWS_WITH(specdec::cross_attention(specdec::cuda{}, dev3(p.q.data(), N, 4, 64), tg.nhd(),
                                             specdec::make_view<1>(p.q_indptr.data(), {2}, memory_space::device),
                                             dev3(out.data(), N, 4, 64),
                                             specdec::make_view<2>(lse.data(), {N, 4}, memory_space::device)),
                    Catch::Contains("cross_attention") && Catch::Contains("cache") && Catch::Contains("device"));
}
