#!/usr/bin/python3
"""Plots tokens/s per GPU, total tokens/s and, where the site gives them, energy and cost from `axonn layout --scan --json` into a PNG.

    axonn layout --site S --job J --scan 128:2048 --json > scan.json
    /usr/bin/python3 scripts/plot_scaling.py scan.json [more.json ...] -o out.png [--label NAME ...] [--title TEXT]

Each file is one scan; its label defaults to "<site>, <job file name>". The x axis is the GPU
count on a log2 scale; dashed lines continue the smallest count's tokens/s per GPU (perfect
scaling), and a dotted vertical line marks the knee, where each added GPU buys less than half
of that. Counts where no layout fits are left out. The energy (to train) and cost (per million
tokens) panels appear when a scan has them (the site's cost.gpu_power_watts and
cost.gpu_hour_cost). Uses Debian's python3-matplotlib (Agg backend, no display needed); run it
with /usr/bin/python3.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402


def read_scan(path):
    """The scan's object and its rows where a layout fits, in GPU order."""
    try:
        with open(path) as f:
            scan = json.load(f)
        rows = [r for r in scan["rows"] if r["fits"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_scaling: {path}: not the JSON of `axonn layout --scan --json` ({e})")
    if not rows:
        sys.exit(f"plot_scaling: {path}: no GPU count of the scan fits a layout; nothing to plot")
    return scan, sorted(rows, key=lambda r: r["gpus"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="JSON files written by axonn layout --scan --json")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--label", action="append", help="one per file, in order (default: site, job file name)")
    ap.add_argument("--title", help="figure title")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.files):
        ap.error(f"{len(args.label)} --label for {len(args.files)} files")

    scans = []
    for i, path in enumerate(args.files):
        scan, rows = read_scan(path)
        label = args.label[i] if args.label else f"{scan['site']}, {os.path.basename(scan['job'])}"
        scans.append((label, scan, rows))

    # (key in a row, panel title, scale, whether perfect scaling has a line there)
    panels = [("tokens_per_s_per_gpu", "tokens/s per GPU", 1.0, True), ("tokens_per_s", "tokens/s (millions)", 1e-6, True)]
    if any("energy_kwh" in rows[0] for _, _, rows in scans):
        panels.append(("energy_kwh", "energy to train, MWh (GPUs only)", 1e-3, False))
    if any("cost_per_million_tokens" in rows[0] for _, _, rows in scans):
        panels.append(("cost_per_million_tokens", "cost per million tokens", 1.0, False))

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), constrained_layout=True)
    gpus_seen = sorted({r["gpus"] for _, _, rows in scans for r in rows})
    for ax, (key, name, unit, ideal) in zip(axes, panels):
        for n, (label, scan, rows) in enumerate(scans):
            color = f"C{n}"
            have = [r for r in rows if key in r]
            if not have:
                continue
            gpus = [r["gpus"] for r in have]
            ax.plot(gpus, [r[key] * unit for r in have], marker="o", color=color, label=label)
            if ideal:
                first = rows[0]
                per_gpu = first["tokens_per_s_per_gpu"]
                perfect = [per_gpu * (g if key == "tokens_per_s" else 1) * unit for g in gpus]
                ax.plot(gpus, perfect, linestyle="--", color=color, alpha=0.5,
                        label=(f"perfect scaling from {first['gpus']}" if len(scans) == 1
                               else "perfect scaling from each smallest count") if n == 0 else None)
            if "knee" in scan:
                ax.axvline(scan["knee"]["gpus"], linestyle=":", color=color, alpha=0.8,
                           label=f"knee ({scan['knee']['gpus']} GPUs)" if len(scans) == 1 else None)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(gpus_seen))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(g) for g in gpus_seen], rotation=45 if len(gpus_seen) > 6 else 0)
        ax.set_xlabel("GPUs")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.savefig(args.output, dpi=110)
    print(f"plot_scaling: wrote {args.output} ({len(scans)} scan(s), {len(panels)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
