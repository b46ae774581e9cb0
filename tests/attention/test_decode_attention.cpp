// decode_attention (split-KV, unmasked) vs the double reference; split-size heuristic; workspace
// path identical to the allocating path and allocation-free; empty caches give out 0, lse -inf.
#include "attention_fixture.hpp"

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/tree_attention.hpp"

using namespace attn_test;

// Replaces the global allocation functions of this executable with counting ones.
#include "common/alloc_counter.hpp"

TEST_CASE("decode_attention fp32: ragged requests, several query tokens, every layout") {
  int seed = 700;
  for (auto kind : {layout_kind::nhd, layout_kind::hnd, layout_kind::paged}) {
    DYNAMIC_SECTION(name(kind)) {
      batch<float> b(++seed, 8, 2, 128, {1000, 1, 257, 0, 64}, {1, 4, 0, 3, 16});
      b.with_layout(kind, [&](auto layout) {
        specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view());
        check_against(b, specdec::reference::decode_attention(b.q_view(), layout, b.indptr_view()));
      });
      // Request 3 has an empty cache: out exactly 0, lse -inf (no NaN).
      for (int t = b.q_indptr[3]; t < b.q_indptr[4]; ++t)
        for (int h = 0; h < b.hq; ++h) {
          CHECK(b.lse[static_cast<std::size_t>(t) * b.hq + h] == -std::numeric_limits<float>::infinity());
          for (int c = 0; c < b.d; ++c) CHECK(b.out[(static_cast<std::size_t>(t) * b.hq + h) * b.d + c] == 0.0f);
        }
    }
  }
}

TEST_CASE("decode_attention: split size heuristic and overrides") {
  using specdec::detail::choose_kv_split;
  CHECK(choose_kv_split(0, 8, 2) == specdec::detail::min_kv_split);
  CHECK(choose_kv_split(32768, 8, 2) == 32768);          // 8 heads x 1 chunk = 8 items = 4 per thread
  CHECK(choose_kv_split(32768, 1, 16) == 512);           // one head, 16 threads: 64 chunks of 512
  CHECK(choose_kv_split(1000, 1, 64) == 256);            // floor of 256 tokens
  CHECK(choose_kv_split(100000, 1, 3) % specdec::detail::kv_tile == 0);
  batch<float> b(3, 4, 4, 64, {700, 333}, {2, 1});
  const auto ref = specdec::reference::decode_attention(b.q_view(), b.paged(), b.indptr_view());
  // Loops, not sections: Catch2 would run the batch and its reference again for every section.
  for (int threads : {1, 0})
    for (int split : {0, 1, 63, 700, 100000}) {
      INFO("threads " << threads << " split " << split);
      b.reset_outputs();
      specdec::decode_attention(specdec::host{.num_threads = threads}, b.q_view(), b.paged(), b.indptr_view(),
                                b.out_view(), b.lse_view(), {.kv_split_size = split});
      check_against(b, ref);
    }
}

TEST_CASE("attention workspace: identical results, no allocation, too small is an error") {
  batch<float> b(21, 8, 2, 64, {500, 3}, {7, 20});
  const auto layout = b.paged();
  const specdec::host pol{};
  // Allocating path first (also warms up the thread pool); the counter must see its workspace.
  specdec::hybrid_tree_attention(pol, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                                 b.out_view(), b.lse_view(), {.kv_split_size = 128});
  {
    specdec_test::allocation_scope scope;
    specdec::hybrid_tree_attention(pol, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                                   b.out_view(), b.lse_view(), {.kv_split_size = 128});
    CHECK(scope.count() >= 1);
  }
  const auto out_alloc = b.out;
  const auto lse_alloc = b.lse;
  const specdec::attention_options sized{.kv_split_size = 128};
  specdec::attention_workspace ws(
      specdec::hybrid_tree_attention_workspace_bytes(pol, b.q_view(), layout, b.indptr_view(), sized));
  b.reset_outputs();
  {
    specdec_test::allocation_scope scope;
    specdec::hybrid_tree_attention(pol, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                                   b.out_view(), b.lse_view(), {.kv_split_size = 128, .workspace = &ws});
    CHECK(scope.count() == 0);
  }
  CHECK(b.out == out_alloc);  // bitwise identical
  CHECK(b.lse == lse_alloc);

  // decode and tree entry points, same property.
  specdec::attention_workspace wd(specdec::decode_attention_workspace_bytes(pol, b.q_view(), layout, b.indptr_view()));
  specdec::decode_attention(pol, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view());
  const auto dec_alloc = b.out;
  {
    specdec_test::allocation_scope scope;
    specdec::decode_attention(pol, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(), {.workspace = &wd});
    CHECK(scope.count() == 0);
  }
  CHECK(b.out == dec_alloc);
  specdec::attention_workspace wt(specdec::tree_attention_workspace_bytes(pol, b.q_view(), 2, b.indptr_view()));
  specdec::tree_attention(pol, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(), b.out_view(),
                          b.lse_view());
  const auto tree_alloc = b.out;
  {
    specdec_test::allocation_scope scope;
    specdec::tree_attention(pol, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(), b.out_view(),
                            b.lse_view(), {.workspace = &wt});
    CHECK(scope.count() == 0);
  }
  CHECK(b.out == tree_alloc);

  // A workspace wrapping caller memory works the same; one byte too small is rejected.
  std::vector<unsigned char> mem(ws.size_bytes());
  specdec::attention_workspace wrapped(mem.data(), mem.size());
  specdec::hybrid_tree_attention(pol, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                                 b.out_view(), b.lse_view(), {.kv_split_size = 128, .workspace = &wrapped});
  CHECK(b.out == out_alloc);
  const std::size_t need = specdec::hybrid_tree_attention_workspace_bytes(pol, b.q_view(), layout, b.indptr_view(), sized);
  specdec::attention_workspace small(mem.data(), need - 1);
  REQUIRE_THROWS_WITH(specdec::hybrid_tree_attention(pol, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                                     b.mask_view(), b.out_view(), b.lse_view(),
                                                     {.kv_split_size = 128, .workspace = &small}),
                      Catch::Contains("options.workspace"));
}

TEST_CASE("attention_options::kernel pins the rows, lanes or tile kernel; each matches the reference") {
  // GQA 4 (8 query heads, 2 kv heads): requests of 1 and 2 tokens have 4 and 8 rows per kv head, so
  // automatic runs the rows kernel on them; pinning tiles or lanes must give the same answers within
  // fp32 tolerance, and pinning rows the same bits as automatic.
  batch<float> b(31, 8, 2, 128, {900, 70, 0}, {1, 2, 2});
  const auto layout = b.paged();
  const auto ref = specdec::reference::decode_attention(b.q_view(), layout, b.indptr_view());
  const auto hyb = specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(), b.v_view(),
                                                             b.indptr_view(), b.mask_view());
  // A loop, not sections: Catch2 would run the references and everything below again per section.
  for (auto kernel : {specdec::attention_kernel::automatic, specdec::attention_kernel::rows,
                      specdec::attention_kernel::tiles, specdec::attention_kernel::lanes}) {
    INFO("kernel " << static_cast<int>(kernel));
    b.reset_outputs();
    specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(),
                              {.kv_split_size = 256, .kernel = kernel});
    check_against(b, ref);
    b.reset_outputs();
    specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                   b.mask_view(), b.out_view(), b.lse_view(), {.kernel = kernel});
    check_against(b, hyb);
  }
  // rows and automatic run the same kernel here: same bits.
  b.reset_outputs();
  specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(),
                            {.kv_split_size = 256});
  const auto autom = b.out;
  b.reset_outputs();
  specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(),
                            {.kv_split_size = 256, .kernel = specdec::attention_kernel::rows});
  CHECK(b.out == autom);
  b.reset_outputs();
  specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(),
                            {.kv_split_size = 256, .kernel = specdec::attention_kernel::tiles});
  CHECK(b.out != autom);  // a different kernel: a different summation order somewhere

  // rows with more than 8 query rows per kv head (3 tokens x GQA 4 = 12), and an invalid value.
  batch<float> big(32, 8, 2, 64, {100}, {3});
  CHECK_THROWS_WITH(specdec::decode_attention(specdec::host{}, big.q_view(), big.paged(), big.indptr_view(),
                                              big.out_view(), big.lse_view(),
                                              {.kernel = specdec::attention_kernel::rows}),
                    Catch::Matchers::Contains("options.kernel") && Catch::Matchers::Contains("12 in request 0"));
  CHECK_THROWS_WITH(specdec::decode_attention_workspace_bytes(specdec::host{}, big.q_view(), big.paged(),
                                                              big.indptr_view(),
                                                              {.kernel = specdec::attention_kernel::rows}),
                    Catch::Matchers::Contains("options.kernel"));
  CHECK_THROWS_AS(specdec::decode_attention(specdec::host{}, big.q_view(), big.paged(), big.indptr_view(),
                                            big.out_view(), big.lse_view(),
                                            {.kernel = static_cast<specdec::attention_kernel>(7)}),
                  specdec::invalid_argument);
  // lanes takes those 12 rows, and 32 (8 tokens x GQA 4); with more (9 tokens x GQA 4 = 36) it is an
  // error too, on every CPU.
  big.reset_outputs();
  specdec::decode_attention(specdec::host{}, big.q_view(), big.paged(), big.indptr_view(), big.out_view(),
                            big.lse_view(), {.kernel = specdec::attention_kernel::lanes});
  check_against(big, specdec::reference::decode_attention(big.q_view(), big.paged(), big.indptr_view()));
  batch<float> widest(34, 8, 2, 64, {100}, {8});
  specdec::decode_attention(specdec::host{}, widest.q_view(), widest.paged(), widest.indptr_view(), widest.out_view(),
                            widest.lse_view(), {.kernel = specdec::attention_kernel::lanes});
  check_against(widest, specdec::reference::decode_attention(widest.q_view(), widest.paged(), widest.indptr_view()));
  batch<float> bigger(33, 8, 2, 64, {100}, {9});
  CHECK_THROWS_WITH(specdec::decode_attention(specdec::host{}, bigger.q_view(), bigger.paged(), bigger.indptr_view(),
                                              bigger.out_view(), bigger.lse_view(),
                                              {.kernel = specdec::attention_kernel::lanes}),
                    Catch::Matchers::Contains("attention_kernel::lanes") && Catch::Matchers::Contains("36 in request 0") &&
                        Catch::Matchers::Contains("at most 32"));
}

#if __has_include(<pthread.h>)
#include <pthread.h>

namespace {

// Address and thread sanitizers enlarge frames and need larger thread stacks (GCC defines the
// __SANITIZE_* macros, clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool sanitized_build = true;
#else
constexpr bool sanitized_build = false;
#endif
#else
constexpr bool sanitized_build = false;
#endif

//! Runs hybrid_tree_attention (or decode_attention) on b with one thread (every pass inline on the
//! calling thread) on a new thread with a stack of `stack_bytes`; returns the error message, if any.
template <class T>
std::string attention_on_small_stack(batch<T>& b, specdec::attention_kernel kernel, bool hybrid, std::size_t stack_bytes) {
  struct job {
    batch<T>* b;
    specdec::attention_kernel kernel;
    bool hybrid;
    std::string error;
  } j{&b, kernel, hybrid, {}};
  auto body = [](void* arg) -> void* {
    auto& jb = *static_cast<job*>(arg);
    try {
      const specdec::host one{.num_threads = 1};
      if (jb.hybrid)
        specdec::hybrid_tree_attention(one, jb.b->q_view(), jb.b->paged(), jb.b->k_view(), jb.b->v_view(),
                                       jb.b->indptr_view(), jb.b->mask_view(), jb.b->out_view(), jb.b->lse_view(),
                                       {.kv_split_size = 128, .kernel = jb.kernel});
      else
        specdec::decode_attention(one, jb.b->q_view(), jb.b->paged(), jb.b->indptr_view(), jb.b->out_view(),
                                  jb.b->lse_view(), {.kv_split_size = 128, .kernel = jb.kernel});
    } catch (const std::exception& e) {
      jb.error = e.what();
    }
    return nullptr;
  };
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return "pthread_attr_init failed";
  std::string err;
  pthread_t th;
  if (pthread_attr_setstacksize(&attr, stack_bytes) != 0) err = "pthread_attr_setstacksize failed";
  else if (pthread_create(&th, &attr, body, &j) != 0) err = "pthread_create failed";
  else if (pthread_join(th, nullptr) != 0) err = "pthread_join failed";
  pthread_attr_destroy(&attr);
  return err.empty() ? j.error : err;
}

}  // namespace

TEMPLATE_TEST_CASE("host attention runs on a thread with a 128 KiB stack at head_dim 256 in every kernel", "", float,
                   specdec::half) {
  // The kernels stage K/V tiles and query rows in the workspace, not on the stack (attention/detail/
  // host/scratch.hpp): at head_dim 256 the tile kernel's frame held 128 KiB of tiles and overflowed
  // a thread with musl's default 128 KiB stack. num_threads = 1 keeps every pass on that thread.
  // Caches of 300 tokens, trees of 1 / 3 / 6 tokens at GQA 4: 4, 12 and 24 rows per kv head, so
  // automatic runs rows, lanes and (the tree part, and below AVX-512 the 24 rows) tiles; each kernel
  // is also pinned where it takes the rows. fp16 adds the lanes kernel's widened K rows, its largest
  // frame. Sanitizer frames are several times larger: 1 MiB there (a 128 KiB thread does not even
  // start under ThreadSanitizer).
  const std::size_t stack_bytes = sanitized_build ? std::size_t{1} << 20 : std::size_t{128} << 10;
  batch<TestType> b(41, 8, 2, 256, {300, 300, 300}, {1, 3, 6});
  const auto hyb = specdec::reference::hybrid_tree_attention(b.q_view(), b.paged(), b.k_view(), b.v_view(),
                                                             b.indptr_view(), b.mask_view());
  const auto dec = specdec::reference::decode_attention(b.q_view(), b.paged(), b.indptr_view());
  // Loops, not sections: Catch2 would build the batches and references again for every section.
  for (bool hybrid : {true, false})
    for (auto kernel : {specdec::attention_kernel::automatic, specdec::attention_kernel::tiles,
                        specdec::attention_kernel::lanes}) {
      INFO((hybrid ? "hybrid" : "decode") << " kernel " << static_cast<int>(kernel));
      b.reset_outputs();
      REQUIRE(attention_on_small_stack(b, kernel, hybrid, stack_bytes) == std::string());
      check_against(b, hybrid ? hyb : dec);
    }
  // The rows kernel takes at most 8 rows per kv head: a batch of 1-2 token trees.
  batch<TestType> r(42, 8, 2, 256, {300, 300}, {1, 2});
  const auto rdec = specdec::reference::decode_attention(r.q_view(), r.paged(), r.indptr_view());
  REQUIRE(attention_on_small_stack(r, specdec::attention_kernel::rows, false, stack_bytes) == std::string());
  check_against(r, rdec);
}
#endif
