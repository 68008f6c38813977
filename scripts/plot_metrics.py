#!/usr/bin/python3
"""Plots loss, tokens/s and MFU (and, for MoE runs, expert load and balance loss) over steps into a PNG.

    /usr/bin/python3 scripts/plot_metrics.py runs/tiny/metrics.jsonl [more.jsonl ...] -o out.png
        [--label NAME ...] [--title TEXT]

Each file is one run (`axonn train` writes <run.dir>/metrics.jsonl, one JSON object per step);
its label defaults to the run directory's name. When a run is an MoE model (its lines carry
expert_load and balance_loss, docs/moe.md), two more panels show the expert load (max over mean
tokens per expert: 1 is balanced) and the balance loss. A resumed run appends to the same file, so a
step may appear twice: the later line wins. Uses Debian's python3-matplotlib (Agg backend, no
display needed); run it with /usr/bin/python3.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def read_metrics(path):
    """Steps of one metrics.jsonl in step order; a repeated step (after a resume) keeps the last line."""
    by_step = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                by_step[int(row["step"])] = row
            except (ValueError, KeyError) as e:
                sys.exit(f"plot_metrics: {path}:{number}: not a metrics line ({e})")
    if not by_step:
        sys.exit(f"plot_metrics: {path} holds no steps")
    return [by_step[s] for s in sorted(by_step)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="metrics.jsonl files")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--label", action="append", help="one per file, in order (default: the run directory's name)")
    ap.add_argument("--title", help="figure title")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.files):
        ap.error(f"{len(args.label)} --label for {len(args.files)} files")

    runs = []
    for i, path in enumerate(args.files):
        label = args.label[i] if args.label else os.path.basename(os.path.dirname(os.path.abspath(path)))
        runs.append((label, read_metrics(path)))

    panels = [("loss", "loss (mean per token)", 1.0), ("tokens_per_s", "tokens/s", 1.0), ("mfu", "MFU (%)", 100.0)]
    if any("expert_load" in rows[0] for _, rows in runs):
        panels += [("expert_load", "expert load (max/mean tokens)", 1.0), ("balance_loss", "balance loss", 1.0)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), constrained_layout=True)
    for ax, (key, name, unit) in zip(axes, panels):
        for label, rows in runs:
            rows = [r for r in rows if key in r]  # a dense run has no MoE panels' keys
            steps = [r["step"] for r in rows]
            ax.plot(steps, [r[key] * unit for r in rows], marker="." if len(rows) <= 60 else None, label=label)
        ax.set_xlabel("step")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if key != "loss":
            ax.set_ylim(bottom=0)
    if len(runs) > 1:
        axes[0].legend()
    if args.title:
        fig.suptitle(args.title)
    fig.savefig(args.output, dpi=110)
    print(f"plot_metrics: wrote {args.output} ({len(runs)} run(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
