#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on the shapes of bench_cuda_attention's BM_hybrid_attention.

Issue #7 asks for specdec's CUDA hybrid tree attention side by side with SDPA given the equivalent
full boolean mask (cache keys all visible, tree keys visible along the ancestor path) and with SDPA
over the cache alone without a mask. This script times those SDPA calls on the same shapes (bf16,
32 query / 8 KV heads, D = 128, cache 4K/32K/128K, tree 1/16/64, batch 1/8), and, given the JSON
that bench_cuda_attention wrote in the same command (--benchmark_out), prints one table with both.

Masked SDPA is timed two ways and the faster one is compared against: with enable_gqa=True on the
8-head K/V, and on K/V repeated to 32 heads beforehand (outside the timing), which may let PyTorch
pick another kernel. Timing matches the C++ benchmark: 10 calls captured in one CUDA graph, over
enough copies of K/V to read 3x the L2 size, the median replay time over 10 is one call's device
time; "eager" is the median of single calls between two events (Python dispatch included). The same random-tree topology generator as the C++ benchmark is not
reproduced bit for bit (numpy's generator draws the parents), so the visible-pair counts differ
slightly; the masked SDPA kernels do not skip masked pairs, so their time does not depend on them.

Usage: python3 sdpa_compare.py [--ours bench.json] [--reps N] [--out table.md]
"""
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

from torch_timing import GRAPH_CALLS, emit_table, parse_args, time_call, time_graph

HQ, HKV, D = 32, 8, 128
CACHES = (4096, 32768, 131072)
TREES = (1, 16, 64)
BATCHES = (1, 8)


def tree_mask(tree, rng):
    """Ancestor mask (tree x tree, bool) of a random tree: node i's parent is uniform in [0, i)."""
    m = np.zeros((tree, tree), dtype=bool)
    for i in range(tree):
        if i > 0:
            m[i] = m[rng.integers(0, i)]
        m[i, i] = True
    return m


def sdpa_kernel_name(fn):
    """The CUDA kernel that took most of the call's time, read off the profiler ('?' if unknown)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        top = max(events, key=lambda e: e.device_time_total)
        print(f"  top kernel: {top.key[:300]}", flush=True)  # whole name in the log, its tail in the table
        name = top.key.split("(")[0].split("<")[0]
        return name[-40:]
    except Exception:  # noqa: BLE001 - diagnostic only
        return "?"


def measure_roofs(reps):
    n = 1 << 29  # 1 GiB of bf16 each way
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    b = torch.empty_like(a)
    copy = time_call(lambda: b.copy_(a), reps)
    del a, b
    m = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    mm = time_call(lambda: m @ m, reps)
    del m
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / copy, 2 * 8192 ** 3 / mm


def main():
    args = parse_args("bench_cuda_attention --benchmark_out JSON of the same run", 30)

    torch.manual_seed(0)
    rng = np.random.default_rng(42)
    props = torch.cuda.get_device_properties(0)
    copy_bw, mm_rate = measure_roofs(args.reps)
    lines = [f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}",
             f"torch roofs: device copy {copy_bw * 1e-9:.0f} GB/s (read + write), "
             f"bf16 matmul 8192^3 {mm_rate * 1e-12:.0f} TFLOP/s"]

    ours = {}
    if args.ours:
        with open(args.ours) as f:
            for bm in json.load(f)["benchmarks"]:
                name = bm["name"]
                if not name.startswith("BM_hybrid_attention/"):
                    continue
                kv = dict(part.split(":") for part in name.split("/")[1:] if ":" in part)
                key = (int(kv["cache"]), int(kv["tree"]), int(kv["batch"]))
                unit = {"us": 1e-6, "ms": 1e-3, "ns": 1e-9}[bm["time_unit"]]
                ours[key] = (bm["real_time"] * unit, bm.get("x_roofline", float("nan")),
                             bm.get("eager_us", float("nan")) * 1e-6)

    head = ("| cache | tree | batch | specdec us (eager) | x_roofline | SDPA masked us (eager; kernel) "
            "| speedup vs masked | SDPA cache-only, no mask us | specdec / cache-only |")
    lines += ["", head, "|" + "---|" * (head.count("|") - 1)]
    l2 = props.L2_cache_size
    scale = 1.0 / math.sqrt(D)
    for cache in CACHES:
        for tree in TREES:
            for batch in BATCHES:
                T, L = tree, cache
                kv_bytes = 2 * batch * HKV * (L + T) * D * 2
                sets = min(GRAPH_CALLS, max(1, -(-3 * l2 // kv_bytes)))
                q = torch.empty(batch, HQ, T, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
                ks = [torch.empty(batch, HKV, L + T, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
                      for _ in range(sets)]
                vs = [torch.empty_like(ks[0]).uniform_(-1, 1) for _ in range(sets)]
                mask = torch.ones(batch, 1, T, L + T, dtype=torch.bool, device="cuda")
                for r in range(batch):
                    mask[r, 0, :, L:] = torch.from_numpy(tree_mask(T, rng)).cuda()

                def masked_gqa(i):
                    return lambda: F.scaled_dot_product_attention(q, ks[i], vs[i], attn_mask=mask, scale=scale,
                                                                  enable_gqa=True)

                def cache_only(i):
                    return lambda: F.scaled_dot_product_attention(q, ks[i][:, :, :L], vs[i][:, :, :L], scale=scale,
                                                                  enable_gqa=True)

                calls = lambda make: [make(i % sets) for i in range(GRAPH_CALLS)]  # noqa: E731
                t_gqa = time_graph(calls(masked_gqa), args.reps)
                e_gqa = time_call(masked_gqa(0), args.reps)
                k_gqa = sdpa_kernel_name(masked_gqa(0))
                t_cache = time_graph(calls(cache_only), args.reps)
                k_cache = sdpa_kernel_name(cache_only(0))
                ref = masked_gqa(0)().float()
                kes = [k.repeat_interleave(HQ // HKV, dim=1) for k in ks]
                ves = [v.repeat_interleave(HQ // HKV, dim=1) for v in vs]

                def masked_expanded(i):
                    return lambda: F.scaled_dot_product_attention(q, kes[i], ves[i], attn_mask=mask, scale=scale)

                t_exp = time_graph(calls(masked_expanded), args.reps)
                e_exp = time_call(masked_expanded(0), args.reps)
                k_exp = sdpa_kernel_name(masked_expanded(0))
                # The two masked forms must agree (sanity check of the comparison itself).
                err = (ref - masked_expanded(0)().float()).abs().max().item()
                if not err < 2e-2:
                    print(f"masked SDPA forms disagree: max |diff| {err}", file=sys.stderr)
                    return 1
                del kes, ves
                if t_gqa <= t_exp:
                    t_masked, e_masked, kind = t_gqa, e_gqa, f"gqa {k_gqa}"
                else:
                    t_masked, e_masked, kind = t_exp, e_exp, f"expanded {k_exp}"
                mine = ours.get((cache, tree, batch))
                theirs = f"{t_masked * 1e6:.1f} ({e_masked * 1e6:.0f}; {kind})"
                if mine:
                    cols = (f"{mine[0] * 1e6:.1f} ({mine[2] * 1e6:.0f})", f"{mine[1]:.2f}", theirs,
                            f"{t_masked / mine[0]:.1f}x", f"{t_cache * 1e6:.1f} ({k_cache})",
                            f"{mine[0] / t_cache:.2f}")
                else:
                    cols = ("-", "-", theirs, "-", f"{t_cache * 1e6:.1f} ({k_cache})", "-")
                lines.append(f"| {cache} | {tree} | {batch} | " + " | ".join(cols) + " |")
                print(lines[-1], flush=True)
                del q, ks, vs, mask, ref
                torch.cuda.empty_cache()
    emit_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
