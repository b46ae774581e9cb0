#!/usr/bin/env python3
"""PyTorch equivalents of bench_cuda_step's kernels, on the same shapes, in one table (issue #23).

Issue #23 asks for the step kernels side by side with what a PyTorch engine calls for the same job:
  BM_topk_batch                     torch.topk(rows [batch, V], k, sorted=True)
  BM_verify_greedy_batch            torch.argmax(logits [batch * (tree + 1), V], -1): the row scan a
                                    PyTorch engine runs before comparing with the draft tokens (the
                                    comparison and the walk are left out, so PyTorch gets the floor)
  BM_verify_sample_and_match_batch  torch.multinomial(probs [batch * (accept + 1), V], 1): one draw
                                    from every row the walk visits (default generator: graph-safe) (the rows a PyTorch engine would
                                    sample; the walk itself left out again)
  BM_kv_importance_batch            K [batch, context, 8 * 128] (bf16) times the group-summed queries
                                    as a block-diagonal [8 * 128, 8] matrix (TokenSwift Eq. 2), one bmm
  BM_kv_commit_batch                index_select + index_copy_ of the accepted rows of K and V in each of
                                    32 layers (bf16 [batch * 256, 8, 128]), the in-place commit as
                                    PyTorch engines write it
and FlashInfer's top-k / sampling kernels where `flashinfer` imports (it is not installed on the
machines seen so far; the column then says so).

Timing matches the C++ benchmarks and sdpa_compare.py: 10 calls captured in one CUDA graph over
enough input copies to read 3x the L2 size; the median replay time over `--reps` is one call's device
time. Calls that cannot be captured are timed eagerly between two events and marked "eager".
Given bench_cuda_step's JSON of the same run (--ours), each row gets specdec's time and the ratio.

Usage: python3 step_torch_compare.py [--ours bench_cuda_step.json] [--reps N] [--out table.md]
"""
import json
import sys

import torch

from torch_timing import GRAPH_CALLS, emit_table, parse_args, time_call, time_graph

def time_graph_or_eager(fns, reps):
    """(seconds per call, how): a graph replay of `fns`, or eager single calls if capture fails."""
    try:
        return time_graph(fns, reps), "graph"
    except Exception as e:  # noqa: BLE001 - fall back to eager timing, say so in the table
        print(f"  capture failed ({type(e).__name__}: {str(e)[:120]}); eager timing", flush=True)
        torch.cuda.synchronize()
        return time_call(fns[0], reps), "eager"


def copies(make, bytes_each, l2):
    sets = min(GRAPH_CALLS, max(1, -(-3 * l2 // bytes_each)))
    return [make() for _ in range(sets)]


UNITS = {"us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0}


def load_ours(path):
    """Benchmark name -> seconds from bench_cuda_step's JSON, or, when the JSON is cut short (the
    binary died or was timed out mid-run, as in session 31), from the console text beside it
    (<stem>.txt: 'name  time unit  cpu unit  iterations ...' lines)."""
    ours = {}
    if not path:
        return ours
    try:
        with open(path) as f:
            for bm in json.load(f)["benchmarks"]:
                if bm.get("run_type") != "aggregate":
                    ours[bm["name"]] = bm["real_time"] * UNITS[bm["time_unit"]]
        return ours
    except (OSError, ValueError, KeyError) as e:
        print(f"  {path}: {type(e).__name__}; reading the console text instead", flush=True)
    try:
        with open(path.rsplit(".", 1)[0] + ".txt") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0].startswith("BM_") and parts[2] in UNITS:
                    ours[parts[0]] = float(parts[1]) * UNITS[parts[2]]
    except (OSError, ValueError):
        pass
    return ours


def main():
    args = parse_args("bench_cuda_step --benchmark_out JSON of the same run", 20)
    ours = load_ours(args.ours)
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    try:
        import flashinfer  # noqa: F401
        fi = flashinfer
    except Exception:  # noqa: BLE001
        fi = None
    lines = [f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; "
             f"flashinfer {'importable' if fi else 'not importable'}", ""]
    head = "| specdec benchmark | specdec us | PyTorch call | PyTorch us | PyTorch / specdec |"
    lines += [head, "|---|---:|---|---:|---:|"]

    def row(name, call, fns):
        t, how = time_graph_or_eager(fns, args.reps)
        mine = ours.get(name)
        cols = [name, f"{mine * 1e6:.1f}" if mine else "-", f"{call} ({how})", f"{t * 1e6:.1f}",
                f"{t / mine:.2f}" if mine else "-"]
        lines.append("| " + " | ".join(cols) + " |")
        print(lines[-1], flush=True)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    for batch in (1, 8, 64):
        for V in (32768, 131072):
            for k in (50, 1024):
                for ties in (0, 1):
                    def make():
                        x = torch.rand(batch, V, device="cuda", generator=gen)
                        if ties:
                            x[torch.rand(batch, V, device="cuda", generator=gen) < 0.2] = 1.0
                        return x
                    xs = copies(make, batch * V * 4, l2)
                    name = f"BM_topk_batch/batch:{batch}/vocab:{V}/k:{k}/ties:{ties}/manual_time"
                    row(name, f"torch.topk(k={k})",
                        [(lambda x=xs[i % len(xs)]: torch.topk(x, k, dim=-1, sorted=True))
                         for i in range(GRAPH_CALLS)])
                    if fi is not None and hasattr(fi, "top_k_renorm_probs") and not ties:
                        row(name, f"flashinfer.top_k_renorm_probs(k={k})",
                            [(lambda x=xs[i % len(xs)]: fi.top_k_renorm_probs(x, k)) for i in range(GRAPH_CALLS)])
                    del xs
    for batch in (1, 8):
        for tree in (16, 64):
            for V in (32768, 131072):
                rows = batch * (tree + 1)
                xs = copies(lambda: torch.randn(rows, V, device="cuda", generator=gen), rows * V * 4, l2)
                name = f"BM_verify_greedy_batch/batch:{batch}/tree:{tree}/vocab:{V}/manual_time"
                row(name, "torch.argmax(-1)",
                    [(lambda x=xs[i % len(xs)]: torch.argmax(x, dim=-1)) for i in range(GRAPH_CALLS)])
                del xs
    for batch in (1, 8, 64):
        for V in (32768, 131072):
            for accept in (0, 4):
                rows = batch * (accept + 1)

                def make():
                    p = torch.rand(rows, V, device="cuda", generator=gen)
                    return p / p.sum(-1, keepdim=True)
                ps = copies(make, rows * V * 4, l2)
                name = (f"BM_verify_sample_and_match_batch/batch:{batch}/tree:16/vocab:{V}/accept:{accept}"
                        "/manual_time")
                row(name, "torch.multinomial(1)",
                    [(lambda p=ps[i % len(ps)]: torch.multinomial(p, 1)) for i in range(GRAPH_CALLS)])
                if fi is not None and hasattr(fi, "sampling_from_probs"):
                    row(name, "flashinfer.sampling_from_probs",
                        [(lambda p=ps[i % len(ps)]: fi.sampling_from_probs(p)) for i in range(GRAPH_CALLS)])
                del ps
        torch.cuda.empty_cache()
    for batch, context in ((1, 32768), (8, 32768), (1, 131072), (8, 131072)):
        q = torch.rand(batch, 32, 128, device="cuda", generator=gen).to(torch.bfloat16)
        ks = copies(lambda: torch.full((batch, context, 8, 128), 0.01, dtype=torch.bfloat16, device="cuda"),
                    batch * context * 8 * 128 * 2, l2)

        def importance(k):
            # the summed queries as a block-diagonal [1024, 8] matrix, so one bmm reads K once in place
            qs = q.view(batch, 8, 4, 128).float().sum(2)
            qbd = torch.diag_embed(qs.transpose(1, 2)).permute(0, 2, 1, 3).reshape(batch, 1024, 8)
            return torch.bmm(k.view(batch, context, 1024), qbd.to(torch.bfloat16))
        name = f"BM_kv_importance_batch/batch:{batch}/context:{context}/manual_time"
        row(name, "group-sum + bmm with block-diagonal q (bf16)", [(lambda k=ks[i % len(ks)]: importance(k)) for i in range(GRAPH_CALLS)])
        del ks
    torch.cuda.empty_cache()
    layers, hkv, d, tree, cap = 32, 8, 128, 64, 256
    committed = cap - tree
    for batch in (1, 8, 64):
        for accept in (4, 16):
            kv = [torch.full((batch * cap, hkv, d), 0.5, dtype=torch.bfloat16, device="cuda")
                  for _ in range(2 * layers)]
            # accepted nodes 0, 4, 8, ...: node 0 is in place, the others move to committed + j
            src = torch.tensor([r * cap + committed + 4 * j for r in range(batch) for j in range(1, accept)],
                               device="cuda")
            dst = torch.tensor([r * cap + committed + j for r in range(batch) for j in range(1, accept)],
                               device="cuda")

            def commit():
                for t in kv:
                    t.index_copy_(0, dst, t.index_select(0, src))
            name = f"BM_kv_commit_batch/batch:{batch}/accept:{accept}/manual_time"
            row(name, "32 x 2 x (index_select + index_copy_)", [commit] * GRAPH_CALLS)
            del kv
    torch.cuda.empty_cache()
    emit_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
