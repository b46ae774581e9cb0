// The reference LLaMA: a tree forward gives, for every node, the logits an autoregressive run along
// that node's path gives; chain prefill equals token-by-token decoding; safetensors round trip keeps
// the model; the random init is not degenerate; bad arguments are rejected.
#include <catch2/catch.hpp>

#include <limits>

#include <set>

#include "../../examples/common/llama.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
llama_config tiny() { return {.vocab_size = 64, .hidden = 32, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 48}; }
std::vector<std::int32_t> prompt_of(int n, int vocab, std::uint64_t seed) {
  philox_stream rng(seed, 7);
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(vocab)));
  return p;
}
}  // namespace

TEST_CASE("llama tree forward equals autoregressive forward along every path", "[llama]") {
  const auto c = tiny();
  llama_model<double> model(c, random_llama_weights<double>(c, 3), 2, 128);
  const auto prompt = prompt_of(20, c.vocab_size, 1);
  model.prefill(1, prompt);
  // A tree with branching: 0:(root) 1:(root) 2:(0) 3:(0) 4:(2) 5:(3)
  const auto tree = token_tree::from_parents(std::vector<std::int32_t>{5, 9, 11, 13, 17, 19},
                                             std::vector<std::int32_t>{-1, -1, 0, 0, 2, 3});
  std::vector<double> tl(static_cast<std::size_t>(tree.size() + 1) * c.vocab_size);
  model.forward(1, prompt.back(), tree, tl);
  for (int node = -1; node < tree.size(); ++node) {
    llama_model<double> ar(c, model.weights(), 1, 128);
    ar.prefill(0, prompt);
    std::vector<double> l(static_cast<std::size_t>(c.vocab_size));
    std::int32_t root = prompt.back();
    const auto path = node < 0 ? std::vector<std::int32_t>{} : tree.path_tokens(node);
    for (std::size_t k = 0; k <= path.size(); ++k) {
      ar.forward(0, root, token_tree{}, l);
      ar.commit(0, {});
      if (k < path.size()) root = path[k];
    }
    for (int v = 0; v < c.vocab_size; ++v)
      REQUIRE(l[v] == Approx(tl[static_cast<std::size_t>(node + 1) * c.vocab_size + v]).margin(1e-9));
  }
  // Commit a path and check the cache length and the next step against the reference.
  model.commit(1, std::vector<std::int32_t>{0, 3, 5});
  CHECK(model.cache_length(1) == 19 + 4);
  REQUIRE_THROWS_WITH(model.commit(1, std::vector<std::int32_t>{1, 3}), Catch::Contains("a forward since its last commit"));
  model.forward(1, 7, tree, tl);
  REQUIRE_THROWS_WITH(model.commit(1, std::vector<std::int32_t>{1, 3}), Catch::Contains("accepted_nodes"));
  CHECK(model.cache_length(1) == 19 + 4);
}

TEST_CASE("llama chain prefill equals step-by-step decoding; greedy output is not degenerate", "[llama]") {
  const auto c = tiny();
  const auto w = random_llama_weights<double>(c, 5);
  llama_model<double> a(c, w, 1, 512), b(c, w, 1, 512);
  const auto prompt = prompt_of(40, c.vocab_size, 2);
  a.prefill(0, prompt, 7);
  b.prefill(0, std::span(prompt).first(1));
  std::vector<double> la(static_cast<std::size_t>(c.vocab_size)), lb(la.size());
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i) {
    b.forward(0, prompt[i], token_tree{}, lb);
    b.commit(0, {});
  }
  CHECK(a.cache_length(0) == b.cache_length(0));
  a.forward(0, prompt.back(), token_tree{}, la);
  b.forward(0, prompt.back(), token_tree{}, lb);
  for (int v = 0; v < c.vocab_size; ++v) REQUIRE(la[v] == Approx(lb[v]).margin(1e-10));
  const auto out = greedy_reference(a, 0, prompt, 300);
  std::set<std::int32_t> distinct(out.begin(), out.end());
  CHECK(distinct.size() >= 16);
  std::set<std::vector<std::int32_t>> grams;
  for (std::size_t i = 0; i + 8 <= out.size(); ++i) grams.insert(std::vector<std::int32_t>(out.begin() + i, out.begin() + i + 8));
  CHECK(grams.size() > 20);  // not a short cycle
}

TEST_CASE("llama weights survive a safetensors round trip (F32 and F64)", "[llama][safetensors]") {
  const auto c = tiny();
  const auto w = random_llama_weights<double>(c, 9);
  for (auto type : {dtype::f64, dtype::f32}) {
    safetensors_writer sw;
    add_llama_weights(sw, c, w, type);
    const auto f = safetensors_file::parse(sw.bytes());
    llama_model<double> a(c, w, 1, 64), b(c, load_llama_weights<double>(f, c), 1, 64);
    const auto prompt = prompt_of(10, c.vocab_size, 3);
    CHECK(greedy_reference(a, 0, prompt, 30) == greedy_reference(b, 0, prompt, 30));
  }
  safetensors_writer sw;
  add_llama_weights(sw, c, w);
  auto c2 = c;
  c2.hidden = 16;
  REQUIRE_THROWS_WITH(load_llama_weights<float>(safetensors_file::parse(sw.bytes()), c2),
                      Catch::Contains("model.embed_tokens.weight"));
}

TEST_CASE("llama rejects bad configurations and arguments", "[llama][errors]") {
  auto c = tiny();
  c.head_dim = 32;
  REQUIRE_THROWS_WITH(random_llama_weights<float>(c, 1), Catch::Contains("config.head_dim"));
  c = tiny();
  c.heads = 3;
  c.kv_heads = 2;
  REQUIRE_THROWS_WITH(random_llama_weights<float>(c, 1), Catch::Contains("config.heads"));
  c = tiny();
  c.heads = c.kv_heads * (1 << 25);  // heads * head_dim past INT32_MAX
  REQUIRE_THROWS_WITH(c.validate("f"), Catch::Contains("config.heads") && Catch::Contains("INT32_MAX"));
  for (double eps : {0.0, -10.0, std::numeric_limits<double>::infinity()}) {
    c = tiny();
    c.norm_eps = eps;  // RMSNorm would divide by zero or a negative root: NaN logits
    REQUIRE_THROWS_WITH(c.validate("f"), Catch::Contains("config.norm_eps"));
  }
  c = tiny();
  c.rope_theta = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_WITH(c.validate("f"), Catch::Contains("config.rope_theta"));
  {  // weights of another geometry than the model's config: refused before any forward reads them
    c = tiny();
    auto wrong = c;
    wrong.ffn_hidden *= 2;
    REQUIRE_THROWS_WITH(llama_model<float>(wrong, random_llama_weights<float>(c, 1), 1, 8),
                        Catch::Contains("weights.layers[0].w_gate.size()"));
    auto w = random_llama_weights<float>(c, 1);
    w.final_norm.clear();
    REQUIRE_THROWS_WITH(llama_model<float>(c, w, 1, 8), Catch::Contains("weights.final_norm.size()"));
    w = random_llama_weights<float>(c, 1);
    w.layers[1].wk.pop_back();
    REQUIRE_THROWS_WITH(llama_model<float>(c, w, 1, 8), Catch::Contains("weights.layers[1].wk.size()"));
  }
  c = tiny();
  llama_model<float> m(c, random_llama_weights<float>(c, 1), 1, 8);
  std::vector<float> l(static_cast<std::size_t>(c.vocab_size));
  REQUIRE_THROWS_WITH(m.forward(1, 0, token_tree{}, l), Catch::Contains("'request'"));
  REQUIRE_THROWS_WITH(m.forward(0, 99, token_tree{}, l), Catch::Contains("'root'"));
  REQUIRE_THROWS_WITH(m.forward(0, 1, token_tree::from_parents(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{-1}), l),
                      Catch::Contains("'logits.size()'"));
  const auto prompt = prompt_of(9, c.vocab_size, 1);
  m.prefill(0, std::span(prompt).first(8));
  std::vector<float> l2(2 * 64);
  REQUIRE_THROWS_WITH(m.forward(0, 1, token_tree::from_parents(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{-1}), l2),
                      Catch::Contains("capacity"));
  REQUIRE_THROWS_AS(m.prefill(0, std::span(prompt).first(0)), specdec::invalid_argument);
}

// Session 56 review: a forward could be committed twice, after reset or truncate (its rows were
// computed at other positions), or after a forward_chain that threw on a bad token had already
// replaced the stored tokens (the commit then read past its parents).
TEST_CASE("llama commits each forward once, and a refused forward leaves nothing to commit", "[llama][errors]") {
  const auto c = tiny();
  llama_model<float> m(c, random_llama_weights<float>(c, 1), 1, 32);
  const auto prompt = prompt_of(8, c.vocab_size, 2);
  m.prefill(0, prompt);
  std::vector<float> l(static_cast<std::size_t>(c.vocab_size));
  m.forward(0, prompt.back(), token_tree{}, l);
  m.commit(0, {});
  CHECK(m.cache_length(0) == 8);
  REQUIRE_THROWS_WITH(m.commit(0, {}), Catch::Contains("a forward since its last commit"));
  m.forward(0, 3, token_tree{}, l);
  m.reset(0);
  REQUIRE_THROWS_WITH(m.commit(0, {}), Catch::Contains("a forward since its last commit"));
  CHECK(m.cache_length(0) == 0);
  m.prefill(0, prompt);
  m.forward(0, prompt.back(), token_tree{}, l);
  m.truncate(0, 5);
  REQUIRE_THROWS_WITH(m.commit(0, {}), Catch::Contains("a forward since its last commit"));
  CHECK(m.cache_length(0) == 5);
  const std::vector<std::int32_t> two{1, 2}, bad{1, 99};
  std::vector<float> l2(2 * static_cast<std::size_t>(c.vocab_size)), l3(3 * static_cast<std::size_t>(c.vocab_size));
  m.forward(0, 1, token_tree::from_parents(two, std::vector<std::int32_t>{-1, 0}), l3);
  REQUIRE_THROWS_WITH(m.forward_chain(0, bad, l2), Catch::Contains("'tokens[i]'"));
  // the refused chain left the tree forward as it was: its path commits
  m.commit(0, std::vector<std::int32_t>{0, 1});
  CHECK(m.cache_length(0) == 8);
}

TEST_CASE("llama float (library hybrid_tree_attention) matches the double model", "[llama][float]") {
  auto c = tiny();
  c.heads = 4;
  c.kv_heads = 2;
  const auto wd = random_llama_weights<double>(c, 21);
  llama_weights<float> wf;
  auto cvt = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  wf.embed = cvt(wd.embed), wf.lm_head = cvt(wd.lm_head), wf.final_norm = cvt(wd.final_norm);
  for (const auto& L : wd.layers)
    wf.layers.push_back({cvt(L.attn_norm), cvt(L.wq), cvt(L.wk), cvt(L.wv), cvt(L.wo), cvt(L.ffn_norm), cvt(L.w_gate),
                         cvt(L.w_up), cvt(L.w_down)});
  llama_model<double> md(c, wd, 1, 256);
  llama_model<float> mf(c, wf, 1, 256);
  const auto prompt = prompt_of(150, c.vocab_size, 4);
  md.prefill(0, prompt, 64);
  mf.prefill(0, prompt, 64);
  const auto tree = token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3, 4}, std::vector<std::int32_t>{-1, 0, 0, 2});
  std::vector<double> ld(5 * 64);
  std::vector<float> lf(5 * 64);
  md.forward(0, prompt.back(), tree, ld);
  mf.forward(0, prompt.back(), tree, lf);
  for (std::size_t i = 0; i < ld.size(); ++i) REQUIRE(lf[i] == Approx(ld[i]).margin(2e-3 * (1 + std::abs(ld[i]))));
}
