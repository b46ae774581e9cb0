"""Device timing of PyTorch calls, as the C++ CUDA benchmarks time theirs (shared by sdpa_compare.py
and step_torch_compare.py): one call's device time is the median replay time of a CUDA graph that
captured GRAPH_CALLS calls, divided by GRAPH_CALLS; single launches are timed between two events."""
import statistics

import torch

GRAPH_CALLS = 10


def time_call(fn, reps):
    """Median seconds of `reps` single launches, each between two CUDA events (3 warm-up calls)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def time_graph(fns, reps):
    """Median device seconds per call: `fns` (callables, warmed up on a side stream) captured in one
    CUDA graph, replayed `reps` times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    t = time_call(g.replay, reps)
    del g
    return t / len(fns)


def emit_table(lines, path=None):
    """Prints the table (a list of markdown lines) and writes it to `path` when given."""
    text = "\n".join(lines)
    print("\n" + text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")


def parse_args(ours_help, reps):
    """The options both comparison scripts take: --ours (the C++ benchmark's JSON of the same run),
    --reps (timed replays per cell) and --out (also write the table there)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help=ours_help)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--out", help="also write the table (markdown) here")
    return ap.parse_args()
