// passes.inl: the three passes of a host attention call (see run.hpp), the unit the run-time ISA
// dispatch selects: compiled at the including file's flags by run.hpp and once per dispatch level
// by kernels.inl (core/detail/isa_levels.inl). No include guard, no #include, no namespace.

//! The three passes of a host attention call (see the file comment). `cache` is a kv_layout or
//! no_cache; `tree` may be null when HasTree is false.
template <int D, bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention_d(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                          const tree_kv_params<T>* tree, int split, attention_kernel kernel, void* ws,
                          std::size_t ws_bytes) {
  host_plan p;
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = D;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  p.scratch_slots = host_threads(policy);
  // Each request's cache length, read once before anything is written to the workspace and used by
  // the plan and both passes: a user's layout may answer differently from call to call (pass 2 read
  // keys the plan's parts did not cover, a silently wrong result), and a workspace laid over a
  // cache's own length array changed it under pass 1. Kept between calls (no allocation per call);
  // the passes' threads reach it through len_of, not by its thread_local name.
  const int* len_of = nullptr;
  if constexpr (HasCache) {
    thread_local std::vector<int> lens;
    lens.resize(static_cast<std::size_t>(io.num_requests));
    for (int r = 0; r < io.num_requests; ++r) {
      const int len = lens[static_cast<std::size_t>(r)] = static_cast<int>(cache.length(r));
      bool ok = len >= 0;
      if constexpr (kv_layout_has_capacity<Layout>) ok = ok && len <= cache.capacity(r);
      if (!ok) [[unlikely]]
        throw_invalid_argument("specdec attention", "cache",
                               "length(" + std::to_string(r) + ") in [0, capacity] for the whole call", len);
    }
    len_of = lens.data();
  }
  (void)len_of;
  const std::size_t planned = plan_host_attention("specdec attention", p, io.q_indptr, [&](int r) {
    if constexpr (HasCache) return len_of[r];
    else return 0 * r;
  }, ws);
  // The workspace was sized from the lengths read before (a user's layout may answer differently
  // now); the plan has written only its fixed-size header so far, the passes would write the rest.
  if (planned > ws_bytes) [[unlikely]]
    throw_invalid_argument("specdec attention", "cache",
                           "the same length(r) for the whole call (the workspace was sized for shorter caches)",
                           "lengths that grew during the call");
  const int R = io.num_requests, hkv = p.hkv, G = p.group;
  const float qscale = io.scale * log2e_f;

  // Pass 1: transposed, scaled query blocks per (request, kv head).
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    if (n == 0) return;
    float* qt = p.floats + p.qt_off[r] + static_cast<std::int64_t>(g) * D * mp;
    // Panels of 32 rows: row i lives at qt[(i / 32) * D * 32 + d * 32 + i % 32].
    for (int i = 0; i < mp; ++i) {
      float* dst = qt + static_cast<std::int64_t>(i / (2 * vlanes)) * D * (2 * vlanes) + i % (2 * vlanes);
      if (i >= rows) {
        for (int d = 0; d < D; ++d) dst[d * (2 * vlanes)] = 0.0f;
        continue;
      }
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      const T* qrow = io.q + t * io.q_stride_token + h * io.q_stride_head;
      for (int d0 = 0; d0 < D; d0 += vlanes) {
        const vf16 x = vload_as_float(qrow + d0) * qscale;
        for (int d = 0; d < vlanes; ++d) dst[(d0 + d) * (2 * vlanes)] = x[d];
      }
    }
  });

  // Pass 2: items over (request, head group, part); parts = cache chunks, then the tree. A head group
  // is all Hkv heads when every request has at most one 32-row panel of queries (decode-like,
  // memory-bound: read each token's rows of all heads together), else a single head (compute-bound:
  // keep one head's accumulators cache-resident).
  const int hpi = p.heads_per_item;
  const int groups = hkv / hpi;
  std::fill(p.slot_flags, p.slot_flags + p.scratch_slots, 0);  // every slot free (scratch_lease)
  parallel_for(policy, p.total_items, [&](std::int64_t item) {
    const int r = static_cast<int>(std::upper_bound(p.item_begin, p.item_begin + R + 1, item) - p.item_begin) - 1;
    const int parts = plan_parts(p, r);
    const std::int64_t local = item - p.item_begin[r];
    const int g0 = static_cast<int>(local / parts) * hpi, part = static_cast<int>(local % parts);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    auto qt_of = [&](int hh) { return p.floats + p.qt_off[r] + static_cast<std::int64_t>(g0 + hh) * D * mp; };
    auto part_of = [&](int hh) {
      return p.floats + p.part_off[r] + (static_cast<std::int64_t>(g0 + hh) * parts + part) * mp * (D + 2);
    };
    const int cache_parts = HasTree ? parts - 1 : parts;
    // The kernels' staging (K/V tiles, query rows): a slot of the workspace held for this item (scratch.hpp).
    const scratch_lease lease(p.slot_flags, p.scratch_slots);
    float* const scratch = p.scratch + static_cast<std::int64_t>(lease.slot()) * host_kernel_scratch_floats(D);
    if constexpr (HasCache) {
      if (part < cache_parts) {
        const int k0 = part * split;  // < len_of[r]: the plan made ceil(length / split) parts
        const int k1 = static_cast<int>(std::min<std::int64_t>(len_of[r], static_cast<std::int64_t>(k0) + split));
        // A user's own layout may return null for a row between the first and last ones
        // validate_kv_layout checks: an error before this part reads anything (so before O and LSE
        // are written), not a read through nullptr inside the (noexcept) kernels. kv_cache layouts
        // cannot (kv/kv_cache.hpp), and the check is compiled out for them.
        require_kv_rows(cache, r, k0, k1, g0, g0 + hpi, kv_rows_read::keys_and_values, "specdec attention", "cache");
        auto krow = [&](int t, int hh) { return static_cast<const T*>(cache.k_row(r, t, g0 + hh)); };
        auto vrow = [&](int t, int hh) { return static_cast<const T*>(cache.v_row(r, t, g0 + hh)); };
        // Few query rows per kv head (decode steps, small trees): vectorise along head_dim up to 8,
        // rows in the lanes of one or two vectors up to 16 or 32 (lanes_auto_rows), else tiles.
        // (attention_options::kernel pins one; the backend checked that the rows fit it.)
        const attention_kernel k = kernel != attention_kernel::automatic ? kernel : automatic_cache_kernel(rows);
        if (k == attention_kernel::rows && rows <= 4) attend_part_rows<D, T, 4>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1, scratch);
        else if (k == attention_kernel::rows) attend_part_rows<D, T, 8>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1, scratch);
        else if (k == attention_kernel::lanes) attend_part_lanes<D, T>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1, scratch);
        else attend_part<D, T, false>(hpi, qt_of, part_of, rows, G, krow, vrow, k0, k1, nullptr, 0, scratch);
        return;
      }
    }
    if constexpr (HasTree) {
      const int t0 = io.q_indptr[r];
      attend_part<D, T, true>(
          hpi, qt_of, part_of, rows, G,
          [&](int t, int hh) { return tree->k + (t0 + t) * tree->k_stride_token + (g0 + hh) * tree->k_stride_head; },
          [&](int t, int hh) { return tree->v + (t0 + t) * tree->v_stride_token + (g0 + hh) * tree->v_stride_head; },
          0, n, tree->mask + p.mask_off[r], words_per_row(n), scratch);
    }
    (void)cache_parts;
    (void)groups;
  });

  // Pass 3: merge the parts of each query row into O and LSE.
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    const int parts = n > 0 ? plan_parts(p, r) : 0;
    // The row's parts in the workspace: part q of row i at base + q * mp * (D + 2) + i * D, their
    // LSEs after the part's mp x D values.
    merge_parts<float> in;
    in.o = p.floats + p.part_off[r] + static_cast<std::int64_t>(g) * parts * mp * (D + 2);
    in.o_stride_part = static_cast<std::int64_t>(mp) * (D + 2);
    in.o_stride_token = D;
    in.lse = in.o + static_cast<std::int64_t>(mp) * D;
    in.lse_stride_part = in.o_stride_part;
    in.lse_stride_token = 1;
    in.count = parts;
    for (int i = 0; i < rows; ++i) {
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      merge_parts_row(in, i, 0, D, io.o + t * io.o_stride_token + h * io.o_stride_head,
                      io.lse + t * io.lse_stride_token + h * io.lse_stride_head);
    }
  });
}
