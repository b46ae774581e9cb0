#!/usr/bin/python3
"""Plots benchmarks/demo_report.sh's TSV: tokens/s (autoregressive and each drafter) and tau against the
context length, greedy and sampled side by side.  plot_demo_report.py REPORT.tsv OUT.png"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
    modes = sorted({r["mode"] for r in rows}, key=lambda m: m != "greedy")
    names = list(dict.fromkeys(r["config"] for r in rows))  # one colour per configuration in every panel
    colour = {n: f"C{i % 10}" for i, n in enumerate(names)}
    fig, axes = plt.subplots(2, len(modes), figsize=(6 * len(modes), 8), squeeze=False)
    for col, mode in enumerate(modes):
        spec, tau, ar = defaultdict(list), defaultdict(list), defaultdict(list)
        for r in rows:
            if r["mode"] != mode:
                continue
            ctx = int(r["context"])
            spec[r["config"]].append((ctx, float(r["spec_tok_s"])))
            tau[r["config"]].append((ctx, float(r["tau"])))
            ar[ctx].append(float(r["ar_tok_s"]))
        top, bottom = axes[0][col], axes[1][col]
        xs = sorted(ar)
        top.plot(xs, [sorted(ar[x])[len(ar[x]) // 2] for x in xs], "k--o", label="autoregressive (median of runs)")
        for name, pts in spec.items():
            pts.sort()
            top.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color=colour[name], label=name)
            t = sorted(tau[name])
            bottom.plot([p[0] for p in t], [p[1] for p in t], "-o", color=colour[name], label=name)
        for ax, ylabel in ((top, "tokens/s"), (bottom, "tau (tokens per target forward)")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([f"{x / 1024:g}K" for x in xs])
            ax.set_xlabel("context (bytes = tokens)")
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
        top.set_title(f"specdec demo, trained byte-level pair: {mode}")
        top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print("wrote", sys.argv[2])


if __name__ == "__main__":
    main()
