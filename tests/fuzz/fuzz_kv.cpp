// Fuzz targets for the KV commit after verification (include/specdec/kv/commit.hpp) over contiguous
// NHD/HND and paged layouts, and for the ring cache's two commits. The guarantee under test: a
// rejected commit (specdec::invalid_argument) leaves every cache bit-identical, and an accepted one
// writes exactly the documented rows (checked against a byte-level simulation of the moves).
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace {
using specdec_fuzz::input;

//! Per-layer K/V storage and the layouts over it (one layout per layer, shared index arrays).
template <class L>
struct cache_set {
  std::vector<std::vector<float>> k, v;
  std::vector<std::int32_t> lengths, page_indptr, page_indices;
  std::vector<L> layers;
  int requests = 0, heads = 0, dim = 0;
};

//! Distinct values everywhere, so a row moved to the wrong place is visible.
void fill_distinct(std::vector<float>& x, float base) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = base + static_cast<float>(i);
}

template <class L>
void fuzz_geometry(input& in, cache_set<L>& c) {
  c.requests = in.range(1, 3);
  c.heads = in.range(1, 2);
  c.dim = in.range(1, 3);
}

template <specdec::kv_order O>
cache_set<specdec::contiguous_kv<float, O>> make_contiguous(input& in, int num_layers) {
  cache_set<specdec::contiguous_kv<float, O>> c;
  fuzz_geometry(in, c);
  const int cap = in.range(0, 12);
  c.lengths = in.many(static_cast<std::size_t>(c.requests), [&] { return in.int32(0, cap); });
  const std::size_t n = static_cast<std::size_t>(c.requests) * static_cast<std::size_t>(cap) * static_cast<std::size_t>(c.heads * c.dim);
  for (int l = 0; l < num_layers; ++l) {
    c.k.emplace_back(n), c.v.emplace_back(n);
    fill_distinct(c.k.back(), 1000.0f * static_cast<float>(2 * l + 1));
    fill_distinct(c.v.back(), -1000.0f * static_cast<float>(2 * l + 1));
  }
  for (int l = 0; l < num_layers; ++l)
    c.layers.push_back({c.k[static_cast<std::size_t>(l)].data(), c.v[static_cast<std::size_t>(l)].data(), c.lengths.data(),
                        c.requests, cap, c.heads, c.dim, specdec::memory_space::host});
  return c;
}

cache_set<specdec::paged_kv<float>> make_paged(input& in, int num_layers) {
  cache_set<specdec::paged_kv<float>> c;
  fuzz_geometry(in, c);
  const int page = in.range(1, 4);
  c.page_indptr.push_back(0);
  for (int r = 0; r < c.requests; ++r) c.page_indptr.push_back(c.page_indptr.back() + in.range(0, 3));
  const int used = c.page_indptr.back();
  const int pages = used + in.range(0, 2);
  c.page_indices.resize(static_cast<std::size_t>(used));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<std::size_t>(in.range(0, static_cast<int>(i) - 1))]);
  for (int i = 0; i < used; ++i)
    c.page_indices[static_cast<std::size_t>(i)] = in.chance(5) ? in.int32(-1, pages) : perm[static_cast<std::size_t>(i)];
  for (int r = 0; r < c.requests; ++r)
    c.lengths.push_back(in.int32(0, (c.page_indptr[static_cast<std::size_t>(r) + 1] - c.page_indptr[static_cast<std::size_t>(r)]) * page));
  const std::size_t n = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) * static_cast<std::size_t>(c.heads * c.dim);
  for (int l = 0; l < num_layers; ++l) {
    c.k.emplace_back(n), c.v.emplace_back(n);
    fill_distinct(c.k.back(), 1000.0f * static_cast<float>(2 * l + 1));
    fill_distinct(c.v.back(), -1000.0f * static_cast<float>(2 * l + 1));
  }
  for (int l = 0; l < num_layers; ++l)
    c.layers.push_back({c.k[static_cast<std::size_t>(l)].data(), c.v[static_cast<std::size_t>(l)].data(), c.page_indptr.data(),
                        c.page_indices.data(), c.lengths.data(), c.requests, pages, page, c.heads, c.dim,
                        specdec::memory_space::host});
  return c;
}

//! A tree's parents and a node list that is usually one of its root paths (else anything).
struct tree_case {
  std::vector<std::int32_t> parents, accepted;
};
tree_case fuzz_accepted(input& in, int n) {
  tree_case t;
  t.parents = in.parents(n);
  if (in.chance(85)) {
    std::int32_t cur = -1;
    while (in.chance(70)) {
      std::vector<std::int32_t> kids;
      for (int j = cur + 1; j < n; ++j)
        if (t.parents[static_cast<std::size_t>(j)] == cur) kids.push_back(j);
      if (kids.empty()) break;
      cur = kids[static_cast<std::size_t>(in.range(0, static_cast<int>(kids.size()) - 1))];
      t.accepted.push_back(cur);
    }
  } else {
    t.accepted = in.many(static_cast<std::size_t>(in.range(0, 4)), [&] { return in.int32(-1, n); });
  }
  return t;
}

bool is_root_path(std::span<const std::int32_t> acc, int n, std::span<const std::int32_t> parents) {
  std::int32_t prev = -1;
  for (auto a : acc) {
    if (a <= prev || a >= n) return false;
    if (!parents.empty() && parents[static_cast<std::size_t>(a)] != prev) return false;
    prev = a;
  }
  return true;
}

template <class L>
bool layout_valid(const cache_set<L>& c) {
  for (const auto& l : c.layers) {
    for (int r = 0; r < c.requests; ++r)
      if (l.length(r) < 0 || l.length(r) > l.capacity(r)) return false;
    if constexpr (std::is_same_v<L, specdec::paged_kv<float>>)
      for (auto p : c.page_indices)
        if (p < 0 || p >= l.mapping.num_pages) return false;
  }
  return true;
}

//! Byte-level simulation of the documented moves on copies of the storage: for each layer, row
//! (request, src) -> (request, dst) for every head, K then V, in the order given.
template <class L>
struct simulation {
  const cache_set<L>& c;
  std::vector<std::vector<float>> k, v;
  explicit simulation(const cache_set<L>& cs) : c(cs), k(cs.k), v(cs.v) {}
  void move(int r, int src, int dst) {
    for (std::size_t l = 0; l < c.layers.size(); ++l)
      for (int h = 0; h < c.heads; ++h) {
        copy_row(k[l], c.layers[l].k_row(r, dst, h) - c.k[l].data(), k[l], c.layers[l].k_row(r, src, h) - c.k[l].data());
        copy_row(v[l], c.layers[l].v_row(r, dst, h) - c.v[l].data(), v[l], c.layers[l].v_row(r, src, h) - c.v[l].data());
      }
  }
  void copy_row(std::vector<float>& dst, std::ptrdiff_t d, const std::vector<float>& src, std::ptrdiff_t s) {
    std::copy_n(src.begin() + s, c.dim, dst.begin() + d);
  }
  bool matches(const cache_set<L>& now) const { return now.k == k && now.v == v; }
};

template <class L>
bool unchanged(const cache_set<L>& now, const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v) {
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  for (std::size_t l = 0; l < k.size(); ++l)
    if (!same(now.k[l], k[l]) || !same(now.v[l], v[l])) return false;
  return true;
}

template <class L>
void commit_case(input& in, cache_set<L>& c, const std::string& who) {
  const auto k0 = c.k, v0 = c.v;
  const std::span<L> layers(c.layers);
  const int op = in.range(0, 2);
  try {
    if (op == 0) {
      const int request = in.int32(0, c.requests);
      // validate_commit_layers(layers, request + 1, ...): int overflow at INT32_MAX
      const int committed = in.int32(0, 12);
      const int tree_size = in.int32(0, 8);
      const auto t = fuzz_accepted(in, std::clamp(tree_size, 0, 8));
      std::span<const std::int32_t> parents;
      if (in.coin()) parents = t.parents;
      const int got = specdec::kv_commit_in_place(layers, request, committed, tree_size, t.accepted, parents);
      FUZZ_CHECK(layout_valid(c) && request >= 0 && request < c.requests && committed >= 0 && tree_size >= 0,
            who + " kv_commit_in_place accepted an invalid layout, request or size");
      for (const auto& l : c.layers)
        FUZZ_CHECK(static_cast<std::int64_t>(committed) + tree_size <= l.capacity(request), who + " kv_commit_in_place: past capacity");
      FUZZ_CHECK(is_root_path(t.accepted, tree_size, parents), who + " kv_commit_in_place: accepted a node list that is not a root path");
      FUZZ_CHECK(got == committed + static_cast<int>(t.accepted.size()), who + " kv_commit_in_place: new length");
      simulation<L> sim(c);
      sim.k = k0, sim.v = v0;
      for (std::size_t j = 0; j < t.accepted.size(); ++j)
        if (t.accepted[j] != static_cast<std::int32_t>(j)) sim.move(request, committed + t.accepted[j], committed + static_cast<int>(j));
      FUZZ_CHECK(sim.matches(c), who + " kv_commit_in_place: cache differs from the documented moves");
    } else if (op == 1) {
      const int request = in.int32(0, c.requests);
      // validate_commit_layers(layers, request + 1, ...): int overflow at INT32_MAX
      const int committed = in.int32(0, 12);
      const int n = in.range(0, 6);
      const auto t = fuzz_accepted(in, n);
      std::span<const std::int32_t> parents;
      if (in.coin()) parents = t.parents;
      // one [n, H, D] K and V spec buffer per layer; sometimes one of them has another shape
      const int bad_layer = in.chance(10) ? in.range(0, static_cast<int>(c.layers.size()) - 1) : -1;
      std::vector<std::vector<float>> sk, sv;
      std::vector<specdec::strided_view<float, 3>> vk, vv;
      for (std::size_t l = 0; l < c.layers.size(); ++l) {
        const std::int64_t rows = static_cast<int>(l) == bad_layer ? n + 1 : n;
        sk.emplace_back(static_cast<std::size_t>(rows * c.heads * c.dim)), sv.emplace_back(sk.back().size());
        fill_distinct(sk.back(), 1e5f + 1e4f * static_cast<float>(l)), fill_distinct(sv.back(), -1e5f - 1e4f * static_cast<float>(l));
      }
      for (std::size_t l = 0; l < c.layers.size(); ++l) {
        const std::int64_t rows = static_cast<std::int64_t>(sk[l].size()) / (c.heads * c.dim);
        vk.push_back(specdec::make_view<3>(sk[l].data(), {rows, c.heads, c.dim}));
        vv.push_back(specdec::make_view<3>(sv[l].data(), {rows, c.heads, c.dim}));
      }
      const int got = specdec::kv_commit_from_buffer(layers, request, committed, std::span(vk), std::span(vv), t.accepted, parents);
      const bool same_shapes = std::all_of(sk.begin(), sk.end(), [&](const auto& x) { return x.size() == sk[0].size(); });
      const int n0 = static_cast<int>(vk[0].extent(0));
      FUZZ_CHECK(layout_valid(c) && request >= 0 && request < c.requests && committed >= 0 && same_shapes,
            who + " kv_commit_from_buffer accepted an invalid layout, request, length or spec shape");
      for (const auto& l : c.layers)
        FUZZ_CHECK(static_cast<std::int64_t>(committed) + static_cast<std::int64_t>(t.accepted.size()) <= l.capacity(request),
              who + " kv_commit_from_buffer: past capacity");
      FUZZ_CHECK(is_root_path(t.accepted, n0, parents) && (parents.empty() || static_cast<int>(parents.size()) == n0),
            who + " kv_commit_from_buffer: accepted a node list that is not a root path");
      FUZZ_CHECK(got == committed + static_cast<int>(t.accepted.size()), who + " kv_commit_from_buffer: new length");
      auto k1 = k0, v1 = v0;
      for (std::size_t l = 0; l < c.layers.size(); ++l)
        for (std::size_t j = 0; j < t.accepted.size(); ++j)
          for (int h = 0; h < c.heads; ++h) {
            const auto dk = c.layers[l].k_row(request, committed + static_cast<int>(j), h) - c.k[l].data();
            const auto dv = c.layers[l].v_row(request, committed + static_cast<int>(j), h) - c.v[l].data();
            std::copy_n(&vk[l](t.accepted[j], h, 0), c.dim, k1[l].begin() + dk);
            std::copy_n(&vv[l](t.accepted[j], h, 0), c.dim, v1[l].begin() + dv);
          }
      FUZZ_CHECK(c.k == k1 && c.v == v1, who + " kv_commit_from_buffer: cache differs from the documented copies");
    } else {
      const int requests = in.range(0, c.requests + 1);
      std::vector<std::int32_t> committed, sizes, acc_indptr{0}, acc, node_indptr{0}, node_parents;
      for (int r = 0; r < requests; ++r) {
        committed.push_back(in.int32(0, 8));
        sizes.push_back(in.int32(0, 6));
        const auto t = fuzz_accepted(in, std::clamp(sizes.back(), 0, 6));
        acc.insert(acc.end(), t.accepted.begin(), t.accepted.end());
        acc_indptr.push_back(static_cast<std::int32_t>(acc.size()));
        node_parents.insert(node_parents.end(), t.parents.begin(), t.parents.end());
        node_indptr.push_back(static_cast<std::int32_t>(node_parents.size()));
      }
      if (in.chance(10) && !acc_indptr.empty()) acc_indptr[static_cast<std::size_t>(in.range(0, requests))] = in.int32(-1, 4);
      if (in.chance(10) && !node_indptr.empty()) node_indptr[static_cast<std::size_t>(in.range(0, requests))] = in.int32(-1, 12);
      if (in.chance(10)) {  // consistent differences, wrong base
        const int shift = in.range(-2, 3);
        for (auto& x : node_indptr) x = static_cast<std::int32_t>(std::clamp<std::int64_t>(std::int64_t{x} + shift, INT32_MIN, INT32_MAX));
      }
      if (in.chance(30)) node_indptr.clear();
      if (in.chance(30)) node_parents.clear();
      const auto got = specdec::kv_commit_in_place_batch(layers, committed, sizes, acc_indptr, acc, node_indptr, node_parents);
      FUZZ_CHECK(layout_valid(c) && requests <= c.requests, who + " kv_commit_in_place_batch accepted an invalid layout or request count");
      FUZZ_CHECK(got.size() == static_cast<std::size_t>(requests), who + " kv_commit_in_place_batch: result size");
      simulation<L> sim(c);
      sim.k = k0, sim.v = v0;
      for (int r = 0; r < requests; ++r) {
        const auto ri = static_cast<std::size_t>(r);
        FUZZ_CHECK(acc_indptr[ri] <= acc_indptr[ri + 1] && committed[ri] >= 0 && sizes[ri] >= 0,
              who + " kv_commit_in_place_batch: accepted bad indptr or sizes");
        for (const auto& l : c.layers)
          FUZZ_CHECK(static_cast<std::int64_t>(committed[ri]) + sizes[ri] <= l.capacity(r), who + " kv_commit_in_place_batch: past capacity");
        const std::span<const std::int32_t> a(acc.data() + acc_indptr[ri], static_cast<std::size_t>(acc_indptr[ri + 1] - acc_indptr[ri]));
        std::span<const std::int32_t> par;
        if (!node_indptr.empty() && !node_parents.empty()) {
          FUZZ_CHECK(node_indptr[ri] >= 0 && node_indptr[ri] + sizes[ri] <= static_cast<std::int32_t>(node_parents.size()),
                who + " kv_commit_in_place_batch: used node_indptr outside node_parents");
          par = std::span<const std::int32_t>(node_parents).subspan(static_cast<std::size_t>(node_indptr[ri]), static_cast<std::size_t>(sizes[ri]));
        }
        FUZZ_CHECK(is_root_path(a, sizes[ri], par), who + " kv_commit_in_place_batch: accepted a node list that is not a root path");
        FUZZ_CHECK(got[ri] == committed[ri] + static_cast<std::int32_t>(a.size()), who + " kv_commit_in_place_batch: new length");
        for (std::size_t j = 0; j < a.size(); ++j)
          if (a[j] != static_cast<std::int32_t>(j)) sim.move(r, committed[ri] + a[j], committed[ri] + static_cast<int>(j));
      }
      FUZZ_CHECK(sim.matches(c), who + " kv_commit_in_place_batch: cache differs from the documented moves");
    }
  } catch (const specdec::invalid_argument&) {
    FUZZ_CHECK(unchanged(c, k0, v0), who + ": a rejected commit changed the cache");
    throw;
  }
}
}  // namespace

SPECDEC_FUZZ_TARGET(kv_commit, "kv_commit_in_place / _from_buffer / _in_place_batch on NHD, HND and paged layouts") {
  input in(data, size);
  const int kind = in.range(0, 2);
  const int num_layers = in.range(1, 2);
  if (kind == 0) {
    auto c = make_contiguous<specdec::kv_order::nhd>(in, num_layers);
    commit_case(in, c, "nhd");
  } else if (kind == 1) {
    auto c = make_contiguous<specdec::kv_order::hnd>(in, num_layers);
    commit_case(in, c, "hnd");
  } else {
    auto c = make_paged(in, num_layers);
    commit_case(in, c, "paged");
  }
}

namespace {
//! The ring's observable state: its buffers and per-request counters.
struct ring_state {
  std::vector<float> k, v;
  std::vector<std::int64_t> appended, committed;
  std::vector<int> lengths;
  bool operator==(const ring_state&) const = default;
};
ring_state snapshot(const specdec::ring_kv_cache<float>& c) {
  ring_state s;
  const std::size_t n = static_cast<std::size_t>(c.num_requests()) * static_cast<std::size_t>(c.slots()) *
                        static_cast<std::size_t>(c.config().kv_heads * c.config().head_dim);
  s.k.assign(c.k_data(), c.k_data() + n);
  s.v.assign(c.v_data(), c.v_data() + n);
  for (int r = 0; r < c.num_requests(); ++r)
    s.appended.push_back(c.appended(r)), s.committed.push_back(c.committed(r)), s.lengths.push_back(c.length(r));
  return s;
}
}  // namespace

SPECDEC_FUZZ_TARGET(kv_commit_ring, "kv_commit_ring / kv_commit_ring_pending vs a full-history model of the window") {
  input in(data, size);
  specdec::ring_kv_config cfg;
  cfg.requests = in.range(1, 2);
  cfg.kv_heads = in.range(1, 2);
  cfg.head_dim = in.range(1, 3);
  cfg.window = in.int32(1, 6);
  cfg.speculative_capacity = in.int32(0, 4);
  if (static_cast<std::int64_t>(cfg.window) + cfg.speculative_capacity > 64) return;  // keep the ring small
  specdec::ring_kv_cache<float> cache(cfg);
  const int row = cfg.kv_heads * cfg.head_dim;
  // history[r]: every row appended and still there (committed first, then pending), oldest first
  std::vector<std::vector<std::vector<float>>> history(static_cast<std::size_t>(cfg.requests));
  std::vector<int> pending(static_cast<std::size_t>(cfg.requests), 0);
  float next_value = 1.0f;
  auto rows_of = [&](int n) {
    std::vector<float> x(static_cast<std::size_t>(n * row));
    for (float& e : x) e = next_value++;
    return x;
  };
  // a few appends to build a history (these must succeed or be rejected cleanly)
  for (int step = in.range(0, 4); step > 0; --step) {
    const int r = in.range(0, cfg.requests - 1);
    const int n = in.range(0, 5);
    auto k = rows_of(n), v = rows_of(n);
    const bool spec = in.coin();
    const auto kv = specdec::make_view<3>(k.data(), {n, cfg.kv_heads, cfg.head_dim});
    const auto vv = specdec::make_view<3>(v.data(), {n, cfg.kv_heads, cfg.head_dim});
    try {
      if (spec) cache.append_speculative(r, kv, vv);
      else cache.append(r, kv, vv);
    } catch (const specdec::invalid_argument&) {
      continue;
    }
    for (int i = 0; i < n; ++i) history[static_cast<std::size_t>(r)].emplace_back(k.begin() + i * row, k.begin() + (i + 1) * row);
    if (spec) pending[static_cast<std::size_t>(r)] += n;
  }
  const ring_state before = snapshot(cache);
  const int request = in.int32(0, cfg.requests);
  try {
    if (in.coin()) {
      const int n = in.range(0, 6);
      const auto t = fuzz_accepted(in, n);
      std::span<const std::int32_t> parents;
      if (in.coin()) parents = t.parents;
      auto k = rows_of(n), v = rows_of(n);
      specdec::kv_commit_ring(cache, request, specdec::make_view<3>(k.data(), {n, cfg.kv_heads, cfg.head_dim}),
                              specdec::make_view<3>(v.data(), {n, cfg.kv_heads, cfg.head_dim}), t.accepted, parents);
      FUZZ_CHECK(request >= 0 && request < cfg.requests && is_root_path(t.accepted, n, parents),
            "kv_commit_ring accepted a bad request or a node list that is not a root path");
      FUZZ_CHECK(t.accepted.empty() || pending[static_cast<std::size_t>(request)] == 0, "kv_commit_ring appended over pending tokens");
      if (t.accepted.empty()) FUZZ_CHECK(snapshot(cache) == before, "kv_commit_ring: a full rejection changed the ring");
      for (auto a : t.accepted)
        history[static_cast<std::size_t>(request)].emplace_back(k.begin() + a * row, k.begin() + (a + 1) * row);
    } else {
      const int accepted = in.int32(0, 4);
      specdec::kv_commit_ring_pending(cache, request, accepted);
      auto& p = pending[static_cast<std::size_t>(request)];
      FUZZ_CHECK(accepted >= 0 && accepted <= p, "kv_commit_ring_pending accepted more than the pending tokens");
      auto& h = history[static_cast<std::size_t>(request)];
      h.resize(h.size() - static_cast<std::size_t>(p - accepted));
      p = 0;
    }
  } catch (const specdec::invalid_argument&) {
    FUZZ_CHECK(snapshot(cache) == before, "a rejected ring commit changed the ring");
    throw;
  }
  // the window shows the newest min(tokens, W) rows of the history, oldest first
  const auto view = cache.layout();
  for (int r = 0; r < cfg.requests; ++r) {
    const auto& h = history[static_cast<std::size_t>(r)];
    const int len = static_cast<int>(std::min<std::size_t>(h.size(), static_cast<std::size_t>(cfg.window)));
    FUZZ_CHECK(view.length(r) == len, "ring: visible length differs from min(history, window)");
    for (int t = 0; t < len; ++t)
      for (int hd = 0; hd < cfg.kv_heads; ++hd)
        FUZZ_CHECK(std::equal(view.k_row(r, t, hd), view.k_row(r, t, hd) + cfg.head_dim,
                         h[h.size() - static_cast<std::size_t>(len) + static_cast<std::size_t>(t)].begin() + hd * cfg.head_dim),
              "ring: visible K row " + std::to_string(t) + " of request " + std::to_string(r) + " is not the history's");
  }
}
