#pragma once
// Device mirrors of attn's host attention test batches (tests/attention/attention_fixture.hpp) and
// the checks every CUDA attention test runs: the cuda result against the double reference (same
// tolerances as the host reduced-precision tests, LSE 1e-4) and against the host backend run on the
// same inputs. Only included by tests/cuda/test_attention_*.cu.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention/attention_fixture.hpp"
#include "cuda/cuda_test_util.cuh"
#include "specdec/attention/attention_params.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

namespace cuda_attn_test {

using attn_test::batch;
using attn_test::layout_kind;
using specdec::memory_space;

//! Device copy of a host vector (at least one element, so empty vectors still get a valid pointer).
template <class T>
class dvec {
 public:
  explicit dvec(const std::vector<T>& h) : n_(h.size()), buf_(std::max<std::size_t>(h.size(), 1)) {
    if (n_ > 0) SPECDEC_CUDA_CHECK(cudaMemcpy(buf_.data(), h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit dvec(std::size_t n) : n_(n), buf_(std::max<std::size_t>(n, 1)) {}
  T* data() const noexcept { return buf_.data(); }
  void download(std::vector<T>& h) const {
    h.resize(n_);
    if (n_ > 0) SPECDEC_CUDA_CHECK(cudaMemcpy(h.data(), buf_.data(), n_ * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  std::size_t n_;
  specdec_test::device_buffer<T> buf_;
};

//! Every array of a host batch, on the device, with views and layouts marked memory_space::device.
template <class T>
struct device_batch {
  const batch<T>& b;
  dvec<T> q, k, v, out, k_nhd, v_nhd, k_hnd, v_hnd, k_pages, v_pages;
  dvec<float> lse;
  dvec<std::int32_t> indptr, lens, page_indptr, page_indices;
  dvec<specdec::mask_word> mask;
  explicit device_batch(const batch<T>& hb)
      : b(hb), q(hb.q), k(hb.spec_k), v(hb.spec_v), out(hb.out), k_nhd(hb.k_nhd), v_nhd(hb.v_nhd), k_hnd(hb.k_hnd),
        v_hnd(hb.v_hnd), k_pages(hb.k_pages), v_pages(hb.v_pages), lse(hb.lse), indptr(hb.q_indptr), lens(hb.lens),
        page_indptr(hb.page_indptr), page_indices(hb.page_indices), mask(hb.mask) {}

  int tokens() const { return b.tokens(); }
  auto q_view() const { return specdec::make_view<3>(q.data(), {tokens(), b.hq, b.d}, memory_space::device); }
  auto out_view() const { return specdec::make_view<3>(out.data(), {tokens(), b.hq, b.d}, memory_space::device); }
  auto lse_view() const { return specdec::make_view<2>(lse.data(), {tokens(), b.hq}, memory_space::device); }
  auto k_view() const { return specdec::make_view<3>(k.data(), {tokens(), b.hkv, b.d}, memory_space::device); }
  auto v_view() const { return specdec::make_view<3>(v.data(), {tokens(), b.hkv, b.d}, memory_space::device); }
  auto indptr_view() const { return specdec::make_view<1>(indptr.data(), {b.requests + 1}, memory_space::device); }
  auto mask_view() const {
    return specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(b.mask.size())}, memory_space::device);
  }
  specdec::contiguous_kv<T> nhd() const {
    return {k_nhd.data(), v_nhd.data(), lens.data(), b.requests, b.capacity, b.hkv, b.d, memory_space::device};
  }
  specdec::contiguous_kv<T, specdec::kv_order::hnd> hnd() const {
    return {k_hnd.data(), v_hnd.data(), lens.data(), b.requests, b.capacity, b.hkv, b.d, memory_space::device};
  }
  specdec::paged_kv<T> paged() const {
    return {k_pages.data(), v_pages.data(), page_indptr.data(), page_indices.data(), lens.data(), b.requests,
            b.num_pages, b.page_size, b.hkv, b.d, memory_space::device};
  }
  template <class F>
  void with_layout(layout_kind kind, F&& f) const {
    if (kind == layout_kind::nhd) f(nhd());
    else if (kind == layout_kind::hnd) f(hnd());
    else f(paged());
  }
};

//! Device workspace of `bytes` bytes wrapped as an attention_workspace.
struct device_workspace {
  dvec<unsigned char> mem;
  specdec::attention_workspace ws;
  explicit device_workspace(std::size_t bytes) : mem(bytes), ws(mem.data(), bytes, memory_space::device) {}
};

//! Compares the cuda result (in `got`) with the double reference and with the host backend's result
//! (in `host`): both within the storage type's tolerance; -inf LSEs must match exactly. Output errors
//! are relative to max(out_scale, |expected|): the denormal tests pass the scale of their tiny values.
template <class T>
void check_cuda(const batch<T>& got, const batch<T>& host, const specdec::reference::attention_result& ref,
                double out_scale = 1.0) {
  attn_test::check_against(got, ref, attn_test::out_tol<T>(), 1e-4, out_scale);
  double worst = 0;
  int bad = 0;
  for (std::size_t i = 0; i < got.out.size(); ++i) {
    const double a = specdec::to_float(got.out[i]), h = specdec::to_float(host.out[i]);
    const double e = std::abs(a - h) / std::max(out_scale, std::abs(h));
    worst = std::max(worst, e);
    if (!(e <= 2 * attn_test::out_tol<T>())) ++bad;
  }
  for (std::size_t i = 0; i < got.lse.size(); ++i) {
    const double a = got.lse[i], h = host.lse[i];
    if (std::isinf(h) || std::isinf(a)) {
      if (a != h) ++bad;
    } else if (!(std::abs(a - h) <= 1e-4 * std::max(1.0, std::abs(h)))) {
      ++bad;
    }
  }
  INFO("cuda vs host backend: worst out difference " << worst);
  CHECK(bad == 0);
}

//! Denormal inputs (README "Conventions": denormals are ordinary numbers). denormal_tiny<T>() maps
//! values of magnitude below 1 into T's subnormal range (bfloat16: fp32's, below 2^-126 ~ 1.18e-38,
//! so the fp32 accumulation sees subnormals too; half: below 2^-14 ~ 6.1e-5), and denormal_big<T>()
//! scales q so that q . k over tiny keys gives ordinary scores again (tiny * big ~ 1): a kernel that
//! flushed the keys to zero would see uniform weights instead.
template <class T>
constexpr float denormal_tiny() {
  return std::is_same_v<T, specdec::half> ? 6e-5f : 1e-38f;
}
template <class T>
constexpr float denormal_big() {
  return std::is_same_v<T, specdec::half> ? 6e4f : 1e38f;
}
enum class denormal_target { q, k, v };
inline const char* name(denormal_target t) {
  return t == denormal_target::q ? "q tiny" : t == denormal_target::k ? "k tiny, q big" : "v tiny";
}

//! Multiplies every element of v by s (rounded to T once).
template <class T>
void scale_values(std::vector<T>& v, float s) {
  for (auto& x : v) x = specdec::from_float<T>(specdec::to_float(x) * s);
}

//! Scales a batch's queries, keys or values (tree tokens and every cache layout alike, so the layouts
//! still hold the same cache) for the denormal tests; returns the output scale to compare at (the
//! tiny scale when V is tiny, else 1).
template <class T>
double make_denormal(batch<T>& b, denormal_target what) {
  const float tiny = denormal_tiny<T>();
  if (what == denormal_target::q) {
    scale_values(b.q, tiny);
    return 1.0;
  }
  if (what == denormal_target::k) {
    scale_values(b.q, denormal_big<T>());
    for (auto* v : {&b.spec_k, &b.k_nhd, &b.k_hnd, &b.k_pages}) scale_values(*v, tiny);
    return 1.0;
  }
  for (auto* v : {&b.spec_v, &b.v_nhd, &b.v_hnd, &b.v_pages}) scale_values(*v, tiny);
  return tiny;
}

//! How many outputs are nonzero (a flush to zero of tiny values leaves zeros).
template <class T>
int nonzero_outputs(const batch<T>& b) {
  int n = 0;
  for (const T& x : b.out) n += specdec::to_float(x) != 0.0f;
  return n;
}

}  // namespace cuda_attn_test
