// Property test: contiguous (NHD and HND) and paged layouts filled with the same logical KV data
// address the same logical rows, on randomized geometries (random page sizes, page permutations,
// ragged lengths, empty requests and empty batches). Buffers are filled by index arithmetic written
// here, independently of the layouts' own row functions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"

namespace {

// Distinct logical value for every (K or V, request, token, head, element).
float logical(int kv, int r, int t, int h, int d) {
  return static_cast<float>((((kv * 8 + r) * 128 + t) * 8 + h) * 64 + d);
}

struct geometry {
  int requests, heads, dim, max_tokens, page_size;
  std::vector<std::int32_t> lengths;
};

geometry random_geometry(specdec::philox_stream& rng) {
  geometry g;
  g.requests = static_cast<int>(rng.below(6));  // 0 = empty batch
  g.heads = 1 + static_cast<int>(rng.below(4));
  g.dim = 1 + static_cast<int>(rng.below(8));
  static constexpr int page_sizes[] = {1, 2, 3, 4, 7, 16};
  g.page_size = page_sizes[rng.below(6)];
  int longest = 0;
  for (int r = 0; r < g.requests; ++r) {
    const int len = rng.below(4) == 0 ? 0 : static_cast<int>(rng.below(100));  // many empty requests
    g.lengths.push_back(len);
    longest = std::max(longest, len);
  }
  g.max_tokens = longest + static_cast<int>(rng.below(5));
  return g;
}

template <class L>
void check_rows_match(const L& layout, const geometry& g) {
  for (int r = 0; r < g.requests; ++r)
    for (int t = 0; t < g.lengths[static_cast<std::size_t>(r)]; ++t)
      for (int h = 0; h < g.heads; ++h)
        for (int d = 0; d < g.dim; ++d) {
          if (layout.k_row(r, t, h)[d] != logical(0, r, t, h, d) || layout.v_row(r, t, h)[d] != logical(1, r, t, h, d))
            FAIL("row mismatch at request " << r << ", token " << t << ", head " << h << ", element " << d);
        }
}

// Every valid (request, token, head) maps to its own row, inside the buffer.
template <class L>
void check_injective(const L& layout, const geometry& g, const float* kbase, std::size_t kelems) {
  std::set<const float*> rows;
  std::size_t count = 0;
  for (int r = 0; r < g.requests; ++r)
    for (int t = 0; t < g.lengths[static_cast<std::size_t>(r)]; ++t)
      for (int h = 0; h < g.heads; ++h) {
        const float* p = layout.k_row(r, t, h);
        REQUIRE(p >= kbase);
        REQUIRE(p + g.dim <= kbase + kelems);
        rows.insert(p);
        ++count;
      }
  REQUIRE(rows.size() == count);
}

}  // namespace

TEST_CASE("paged, contiguous NHD and contiguous HND layouts address the same logical rows") {
  specdec::philox_stream rng(20261122, 0);
  for (int trial = 0; trial < 300; ++trial) {
    const geometry g = random_geometry(rng);
    INFO("trial " << trial << ": requests " << g.requests << ", heads " << g.heads << ", dim " << g.dim
                  << ", page_size " << g.page_size << ", max_tokens " << g.max_tokens);
    const int R = g.requests, T = g.max_tokens, H = g.heads, D = g.dim, P = g.page_size;
    const std::size_t dense = static_cast<std::size_t>(R) * T * H * D;

    // Contiguous NHD [R, T, H, D] and HND [R, H, T, D].
    std::vector<float> nhd_k(dense), nhd_v(dense), hnd_k(dense), hnd_v(dense);
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < g.lengths[static_cast<std::size_t>(r)]; ++t)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t n = ((static_cast<std::size_t>(r) * T + t) * H + h) * D + d;
            const std::size_t m = ((static_cast<std::size_t>(r) * H + h) * T + t) * D + d;
            nhd_k[n] = logical(0, r, t, h, d);
            nhd_v[n] = logical(1, r, t, h, d);
            hnd_k[m] = logical(0, r, t, h, d);
            hnd_v[m] = logical(1, r, t, h, d);
          }
    const specdec::contiguous_kv<float, specdec::kv_order::nhd> nhd{nhd_k.data(), nhd_v.data(), g.lengths.data(), R, T, H, D};
    const specdec::contiguous_kv<float, specdec::kv_order::hnd> hnd{hnd_k.data(), hnd_v.data(), g.lengths.data(), R, T, H, D};

    // Paged: each request gets the pages it needs plus 0..2 spare, drawn from a random permutation of
    // a pool that also has unused pages.
    std::vector<std::int32_t> indptr{0}, pages_needed;
    int total = 0;
    for (int r = 0; r < R; ++r) {
      const int need = (g.lengths[static_cast<std::size_t>(r)] + P - 1) / P + static_cast<int>(rng.below(3));
      pages_needed.push_back(need);
      total += need;
      indptr.push_back(total);
    }
    const int num_pages = total + static_cast<int>(rng.below(4));
    std::vector<std::int32_t> perm(static_cast<std::size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    for (int i = num_pages - 1; i > 0; --i)
      std::swap(perm[static_cast<std::size_t>(i)], perm[rng.below(static_cast<std::uint32_t>(i + 1))]);
    std::vector<std::int32_t> indices(perm.begin(), perm.begin() + total);
    const std::size_t pool = static_cast<std::size_t>(num_pages) * P * H * D;
    std::vector<float> pk(pool, -1.0f), pv(pool, -1.0f);
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < g.lengths[static_cast<std::size_t>(r)]; ++t) {
        const std::size_t page = static_cast<std::size_t>(indices[static_cast<std::size_t>(indptr[static_cast<std::size_t>(r)] + t / P)]);
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t o = ((page * P + static_cast<std::size_t>(t % P)) * H + h) * D + d;
            pk[o] = logical(0, r, t, h, d);
            pv[o] = logical(1, r, t, h, d);
          }
      }
    const specdec::paged_kv<float> paged{pk.data(), pv.data(), indptr.data(), indices.data(), g.lengths.data(),
                                         R, num_pages, P, H, D};

    REQUIRE_NOTHROW(specdec::validate_kv_layout(nhd, "test", "nhd"));
    REQUIRE_NOTHROW(specdec::validate_kv_layout(hnd, "test", "hnd"));
    REQUIRE_NOTHROW(specdec::validate_kv_layout(paged, "test", "paged"));
    REQUIRE(nhd.num_requests() == R);
    REQUIRE(paged.num_requests() == R);
    for (int r = 0; r < R; ++r) {
      REQUIRE(nhd.length(r) == paged.length(r));
      REQUIRE(hnd.length(r) == paged.length(r));
      REQUIRE(paged.capacity(r) == pages_needed[static_cast<std::size_t>(r)] * P);
      REQUIRE(paged.capacity(r) >= paged.length(r));
      REQUIRE(nhd.capacity(r) == T);
    }
    check_rows_match(nhd, g);
    check_rows_match(hnd, g);
    check_rows_match(paged, g);
    // A read-only view of the same cache sees the same rows.
    const specdec::paged_kv<const float> cpaged{pk.data(), pv.data(), indptr.data(), indices.data(), g.lengths.data(),
                                                R, num_pages, P, H, D};
    check_rows_match(cpaged, g);
    check_injective(nhd, g, nhd_k.data(), dense);
    check_injective(hnd, g, hnd_k.data(), dense);
    check_injective(paged, g, pk.data(), pool);
    // token_stride() is the distance between consecutive tokens of one (request, head).
    for (int r = 0; r < R; ++r)
      for (int t = 0; t + 1 < g.lengths[static_cast<std::size_t>(r)]; ++t) {
        REQUIRE(nhd.k_row(r, t + 1, 0) - nhd.k_row(r, t, 0) == nhd.token_stride());
        REQUIRE(hnd.k_row(r, t + 1, H - 1) - hnd.k_row(r, t, H - 1) == hnd.token_stride());
      }
  }
}

TEST_CASE("writes through one layout are read back through the other layouts' geometry") {
  // Write V through paged.v_row, then read the pool by explicit index arithmetic.
  std::vector<std::int32_t> lengths{5, 0, 3}, indptr{0, 3, 3, 5}, indices{4, 0, 2, 1, 3};
  const int P = 2, H = 2, D = 3, pages = 5;
  std::vector<float> k(static_cast<std::size_t>(pages) * P * H * D), v(k.size(), 0.0f);
  specdec::paged_kv<float> paged{k.data(), v.data(), indptr.data(), indices.data(), lengths.data(), 3, pages, P, H, D};
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < lengths[static_cast<std::size_t>(r)]; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) paged.v_row(r, t, h)[d] = logical(1, r, t, h, d);
  // Request 0 token 4 lives in its third page (index 2), slot 0; request 2 token 2 in page 3, slot 0.
  CHECK(v[((2 * P + 0) * H + 1) * D + 2] == logical(1, 0, 4, 1, 2));
  CHECK(v[((3 * P + 0) * H + 0) * D + 0] == logical(1, 2, 2, 0, 0));
  CHECK(v[((4 * P + 1) * H + 0) * D + 1] == logical(1, 0, 1, 0, 1));
}
