// Target attention_args: the argument checks of decode, tree and hybrid tree attention and of the
// two-way LSE merge, on shapes, strides, q_indptr offsets, tree masks and cache lengths from the
// fuzzer (negative and mismatched extents, stride 0 and overlapping outputs, negative strides, null
// data, unsorted or out-of-range offsets, masks with bits above the diagonal, lengths past capacity).
// Every buffer is exactly the memory its view reaches, so any read or write outside it is a
// sanitizer report. Beyond that: an accepted call equals the double reference (reference/attention.hpp;
// the merge: its formula) within fp32 rounding, and a rejected call leaves out and lse untouched.
// The kernels once, at this file's flags (core/isa.hpp): this target is about the checks before
// them, which every level shares, and the run-time dispatch copies tripled its build time. The
// kernels of every level are compared with the references by the attention unit tests.
#define SPECDEC_ISA_DISPATCH 0

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/reference/attention.hpp"

namespace {
namespace sd = specdec;
using specdec_fuzz::input;

// True with probability about percent / 100, and false once the input is used up (input::chance
// is then true: the bad variants must not be what an exhausted input means).
bool rare(input& in, int percent) { return in.range(0, 99) >= 100 - percent; }

// A float view of rank R over its own memory. Extents are the intended shape, sometimes one of them
// wrong (off by one, 0 or negative); strides packed, sometimes one replaced by 0, -1, a short or
// doubled or negated stride; sometimes null data. `mem` holds exactly the elements the view reaches.
template <int R>
struct fuzzed_view {
  std::vector<float> mem;
  std::int64_t origin = 0;  // mem index of element (0, ..., 0)
  sd::strided_view<float, R> view;

  fuzzed_view(input& in, std::array<std::int64_t, R> ext, bool finite_values = true) {
    if (rare(in, 8)) {
      const int d = in.range(0, R - 1);
      static constexpr std::int64_t bad[] = {-1, 0, 1, -2, std::numeric_limits<std::int64_t>::min()};
      ext[static_cast<std::size_t>(d)] = in.coin() ? ext[static_cast<std::size_t>(d)] + (in.coin() ? 1 : -1)
                                                   : bad[in.range(0, 4)];
    }
    std::array<std::int64_t, R> st{};
    std::int64_t step = 1;
    for (int d = R - 1; d >= 0; --d) {
      st[static_cast<std::size_t>(d)] = step;
      step *= std::max<std::int64_t>(1, std::min<std::int64_t>(ext[static_cast<std::size_t>(d)], 1 << 12));
    }
    if (rare(in, 10)) {
      const auto d = static_cast<std::size_t>(in.range(0, R - 1));
      const std::int64_t packed = st[d];
      const std::int64_t choice[] = {0, 1, -1, packed / 2, packed * 2, -packed};
      st[d] = choice[in.range(0, 5)];
    }
    // The memory the view reaches: [lo, hi] in elements from its data pointer (nothing when an
    // extent is 0 or negative: a view without elements, or one the library must refuse unread).
    std::int64_t lo = 0, hi = 0;
    bool elements = true;
    for (int d = 0; d < R; ++d) {
      const std::int64_t e = ext[static_cast<std::size_t>(d)];
      if (e <= 0) elements = false;
      if (e > 1) {
        const std::int64_t reach = (e - 1) * st[static_cast<std::size_t>(d)];
        (reach < 0 ? lo : hi) += reach;
      }
    }
    if (!elements) lo = hi = 0;
    mem.resize(static_cast<std::size_t>(hi - lo + 1));
    for (auto& x : mem) x = finite_values ? in.real(-2.f, 2.f, 0) : in.real(-2.f, 2.f);
    origin = -lo;
    float* data = mem.data() + origin;
    if (rare(in, 3)) data = nullptr;
    std::int64_t e[R], s[R];
    for (int d = 0; d < R; ++d) {
      e[d] = ext[static_cast<std::size_t>(d)];
      s[d] = st[static_cast<std::size_t>(d)];
    }
    view = sd::strided_view<float, R>(data, e, s);
  }
};

// The request offsets: a partition of `tokens` into `requests` parts, sometimes with a bad value.
std::vector<std::int32_t> fuzzed_indptr(input& in, int requests, std::int64_t tokens) {
  std::vector<std::int32_t> ip(static_cast<std::size_t>(requests) + 1, 0);
  for (int r = 1; r < requests; ++r) ip[static_cast<std::size_t>(r)] = in.range(0, static_cast<int>(std::max<std::int64_t>(0, tokens)));
  if (requests >= 2) std::sort(ip.begin() + 1, ip.end() - 1);
  ip.back() = static_cast<std::int32_t>(std::clamp<std::int64_t>(tokens, INT32_MIN, INT32_MAX));
  if (rare(in, 8)) ip[static_cast<std::size_t>(in.range(0, requests))] = in.int32(-2, static_cast<std::int32_t>(tokens) + 2);
  return ip;
}

// A packed ragged tree mask for q_indptr: lower-triangular with the diagonal set (a topological
// tree's ancestor mask need not be more), sometimes a diagonal cleared, a bit above it set, or one
// word more or less.
std::vector<sd::mask_word> fuzzed_mask(input& in, const std::vector<std::int32_t>& ip) {
  std::vector<sd::mask_word> m;
  for (std::size_t r = 0; r + 1 < ip.size(); ++r) {
    const std::int64_t n64 = std::int64_t{ip[r + 1]} - ip[r];
    const int n = static_cast<int>(std::clamp<std::int64_t>(n64, 0, 256));
    const int wpr = (n + 63) / 64;
    for (int i = 0; i < n; ++i)
      for (int w = 0; w < wpr; ++w) {
        sd::mask_word word = 0;
        for (int b = 0; b < 64; ++b) {
          const int j = w * 64 + b;
          if (j == i || (j < i && in.coin())) word |= sd::mask_word{1} << b;
        }
        m.push_back(word);
      }
  }
  if (!m.empty() && rare(in, 6)) m[static_cast<std::size_t>(in.range(0, static_cast<int>(m.size()) - 1))] ^=
                                  sd::mask_word{1} << in.range(0, 63);
  if (rare(in, 4)) {
    if (in.coin()) m.push_back(1);
    else if (!m.empty()) m.pop_back();
  }
  return m;
}

bool close(double got, double want) {
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-4 * (1.0 + std::abs(want));
}

template <class O, class L>
void check_against(const sd::reference::attention_result& ref, const O& out, const L& lse, std::string_view what) {
  for (int t = 0; t < ref.tokens; ++t)
    for (int h = 0; h < ref.heads; ++h) {
      FUZZ_CHECK(close(lse(t, h), ref.l(t, h)), std::string(what) + ": lse differs from the reference");
      for (int c = 0; c < ref.dim; ++c)
        FUZZ_CHECK(close(out(t, h, c), ref.o(t, h, c)), std::string(what) + ": out differs from the reference");
    }
}

}  // namespace

SPECDEC_FUZZ_TARGET(attention_args,
                    "decode/tree/hybrid attention and lse_merge on fuzzed shapes, strides, offsets, masks, lengths") {
  input in(data, size);
  const int entry = in.range(0, 3);  // 0 decode, 1 tree, 2 hybrid, 3 two-way merge
  const int D = in.chance(90) ? 64 : (in.coin() ? 128 : in.range(-1, 96));
  const int hkv = in.range(1, 2), group = in.range(1, 3);
  const int hq = in.chance(95) ? hkv * group : in.range(0, 5);
  const int requests = in.range(1, 3) - (rare(in, 10) ? 1 : 0);
  const std::int64_t tokens = in.chance(95) ? in.range(0, 6) : in.range(-2, 8);  // sizes past int32: unit tests
  const sd::host policy{.num_threads = in.range(1, 2)};
  sd::attention_options options;
  static constexpr float scales[] = {0.125f, 1.f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::infinity()};
  options.scale = in.chance(90) ? 0.f : scales[in.range(0, 4)];
  options.kv_split_size = in.chance(80) ? 0 : in.int32(-1, 8);

  fuzzed_view<3> q(in, {tokens, hq, D});
  fuzzed_view<3> out(in, {tokens, hq, D});
  fuzzed_view<2> lse(in, {tokens, hq});
  const std::vector<float> out_before = out.mem, lse_before = lse.mem;
  const auto untouched = [&] { return out.mem == out_before && lse.mem == lse_before; };

  if (entry == 3) {  // lse_merge(o_a, lse_a, o_b, lse_b) -> (out, lse), out may be o_a itself
    fuzzed_view<3> ob(in, {tokens, hq, D});
    fuzzed_view<2> lb(in, {tokens, hq}, false);
    fuzzed_view<2> la(in, {tokens, hq}, false);
    const bool in_place = in.coin();
    const auto& oa = in_place ? out : q;
    const std::vector<float> a_mem = oa.mem, la_mem = la.mem;
    try {
      sd::lse_merge(policy, oa.view, la.view, ob.view, lb.view, out.view, lse.view);
    } catch (const sd::invalid_argument&) {
      FUZZ_CHECK(untouched(), "lse_merge wrote out or lse_out, then threw");
      throw;
    }
    // The formula, from copies of the inputs as they were (out may have overwritten o_a).
    const sd::strided_view<const float, 3> a0(a_mem.data() + oa.origin,
                                              {oa.view.extent(0), oa.view.extent(1), oa.view.extent(2)},
                                              {oa.view.stride(0), oa.view.stride(1), oa.view.stride(2)});
    const sd::strided_view<const float, 2> l0(la_mem.data() + la.origin,
                                              {la.view.extent(0), la.view.extent(1)}, {la.view.stride(0), la.view.stride(1)});
    for (std::int64_t t = 0; t < out.view.extent(0); ++t)
      for (std::int64_t h = 0; h < out.view.extent(1); ++h) {
        const double x = l0(t, h), y = lb.view(t, h);
        if (std::isnan(x) || std::isnan(y) || x == INFINITY || y == INFINITY) continue;  // NaN/+inf in, any out
        const double m = std::max(x, y);
        const double wa = m == -INFINITY ? 0 : std::exp(x - m), wb = m == -INFINITY ? 0 : std::exp(y - m);
        const double want_lse = m == -INFINITY ? -INFINITY : m + std::log(wa + wb);
        FUZZ_CHECK(close(lse.view(t, h), want_lse), "lse_merge: lse_out differs from log(e^a + e^b)");
        for (std::int64_t c = 0; c < out.view.extent(2); ++c) {
          const double want = wa + wb == 0 ? 0.0 : (wa * a0(t, h, c) + wb * ob.view(t, h, c)) / (wa + wb);
          FUZZ_CHECK(close(out.view(t, h, c), want), "lse_merge: out differs from the weighted mean");
        }
      }
    return;
  }

  auto ip = fuzzed_indptr(in, requests, tokens);
  const auto ipv = sd::strided_view<const std::int32_t, 1>(ip.data(), {static_cast<std::int64_t>(ip.size())}, {1});
  // Cache: contiguous [requests, capacity, hkv, D] with fuzzed lengths (sometimes past capacity or
  // negative), and tree K/V [tokens, hkv, D].
  const int capacity = in.range(0, 9);
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(std::max(requests, 1)));
  for (auto& l : lengths) l = in.chance(95) ? in.range(0, capacity) : in.int32(-1, capacity + 1);
  const std::size_t cache_elems = static_cast<std::size_t>(std::max(requests, 1)) * static_cast<std::size_t>(capacity) *
                                  static_cast<std::size_t>(hkv) * static_cast<std::size_t>(std::max(D, 0));
  std::vector<float> kc(cache_elems), vc(cache_elems);
  for (auto& x : kc) x = in.real(-2.f, 2.f, 0);
  for (auto& x : vc) x = in.real(-2.f, 2.f, 0);
  const int cache_dim = in.chance(95) ? D : D + 64;
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lengths.data(), requests, capacity, hkv,
                                       cache_dim > 0 ? cache_dim : 1);
  fuzzed_view<3> sk(in, {tokens, hkv, D});
  fuzzed_view<3> sv(in, {tokens, hkv, D});
  const auto mask = fuzzed_mask(in, ip);
  const auto mv = sd::strided_view<const sd::mask_word, 1>(mask.empty() ? nullptr : mask.data(),
                                                           {static_cast<std::int64_t>(mask.size())}, {1});
  const double scale = options.scale;
  const char* name = entry == 0 ? "decode_attention" : entry == 1 ? "tree_attention" : "hybrid_tree_attention";
  try {
    if (entry == 0) sd::decode_attention(policy, q.view, cache, ipv, out.view, lse.view, options);
    else if (entry == 1) sd::tree_attention(policy, q.view, sk.view, sv.view, ipv, mv, out.view, lse.view, options);
    else sd::hybrid_tree_attention(policy, q.view, cache, sk.view, sv.view, ipv, mv, out.view, lse.view, options);
  } catch (const sd::invalid_argument&) {
    FUZZ_CHECK(untouched(), std::string(name) + " wrote out or lse, then threw");
    throw;
  }
  // Accepted: every view had its shape, so the reference can read them.
  if (entry == 0) check_against(sd::reference::decode_attention(q.view, cache, ipv, scale), out.view, lse.view, name);
  else if (entry == 1)
    check_against(sd::reference::tree_attention(q.view, sk.view, sv.view, ipv, mv, scale), out.view, lse.view, name);
  else
    check_against(sd::reference::hybrid_tree_attention(q.view, cache, sk.view, sv.view, ipv, mv, scale), out.view,
                  lse.view, name);
}
