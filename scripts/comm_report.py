#!/usr/bin/python3
"""Draws a run's communication profile (summary.json's "comm_profile") as PNG figures.

`axonn train` writes, at the end of a run, rank 0's communication per axis and collective
kind: calls, bytes, a histogram of message sizes in powers of two, the time the calls took,
the bus bandwidth achieved, the share of the started calls' time that overlap hid, and the
layout model's time for the same calls. This draws, into <run>/comm_report/ (or --out):

    bytes_time.png      bytes and time per axis and kind, measured beside predicted
    sizes.png           message-size histogram: calls per power-of-two size, per axis and kind

and prints the table. Debian's interpreter with matplotlib (python3-matplotlib):

    /usr/bin/python3 scripts/comm_report.py runs/tiny
"""
import argparse
import json
import os
import sys


def load_profile(run_dir):
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path) as f:
            summary = json.load(f)
    except FileNotFoundError:
        sys.exit(f"comm_report.py: no {path}: give the run directory (run.dir) of a finished run")
    profile = summary.get("comm_profile")
    if profile is None:
        sys.exit(f"comm_report.py: {path} has no comm_profile (written by axonn train since the profile exists)")
    return profile, summary.get("end_step", 0) - summary.get("start_step", 0)


def size_label(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return str(nbytes)


def print_table(profile, steps):
    print(f"{'axis kind':24} {'ranks':>5} {'link':>12} {'calls':>7} {'MiB':>10} {'s':>9} {'pred. s':>9} "
          f"{'meas/pred':>9} {'bus GB/s':>9} {'hidden':>7} {'pred.':>7}")
    for e in profile:
        ratio = e["seconds"] / e["predicted_seconds"] if e["predicted_seconds"] > 0 else float("nan")
        hidden = "-" if e["hidden_fraction"] is None else f"{100 * e['hidden_fraction']:.0f}%"
        predicted = e.get("predicted_hidden_fraction")
        predicted = "-" if predicted is None else f"{100 * predicted:.0f}%"
        print(f"{e['axis'] + ' ' + e['kind']:24} {e['group_size']:>5} {e['link']:>12} {e['calls']:>7} "
              f"{e['bytes'] / 2**20:>10.3f} {e['seconds']:>9.4f} {e['predicted_seconds']:>9.4f} {ratio:>9.2f} "
              f"{e['bus_GBps']:>9.3g} {hidden:>7} {predicted:>7}")
    print(f"({steps} steps, rank 0)")


def draw(profile, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    names = [f"{e['axis']}\n{e['kind']}" for e in profile]
    x = range(len(profile))

    fig, (bytes_ax, time_ax) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(profile)), 4.5))
    bytes_ax.bar(x, [e["bytes"] / 2**20 for e in profile], color="tab:blue")
    bytes_ax.set_ylabel("MiB over the run")
    bytes_ax.set_title("bytes per axis and kind")
    width = 0.4
    time_ax.bar([i - width / 2 for i in x], [e["seconds"] for e in profile], width, label="measured")
    time_ax.bar([i + width / 2 for i in x], [e["predicted_seconds"] for e in profile], width, label="predicted")
    time_ax.set_ylabel("seconds over the run")
    time_ax.set_title("time: measured and the layout model's")
    time_ax.legend()
    for ax in (bytes_ax, time_ax):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "bytes_time.png"), dpi=110)
    plt.close(fig)

    buckets = sorted({int(b) for e in profile for b in e["size_histogram"]})
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(buckets)), 4.5))
    bottom = [0] * len(buckets)
    for e in profile:
        counts = [e["size_histogram"].get(str(b), 0) for b in buckets]
        ax.bar(range(len(buckets)), counts, bottom=bottom, label=f"{e['axis']} {e['kind']}")
        bottom = [a + b for a, b in zip(bottom, counts)]
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels([size_label(b) for b in buckets], rotation=45, fontsize=8)
    ax.set_xlabel("message size (powers of two, lower bound)")
    ax.set_ylabel("calls over the run")
    ax.set_title("message sizes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "sizes.png"), dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run directory (run.dir) holding summary.json")
    parser.add_argument("--out", help="the folder for the PNGs (default: <run>/comm_report)")
    parser.add_argument("--no-plots", action="store_true", help="print the table only")
    args = parser.parse_args()
    profile, steps = load_profile(args.run)
    print_table(profile, steps)
    if not profile:
        print("comm_report.py: the run had no collectives (one rank); nothing to draw")
        return
    if not args.no_plots:
        out_dir = args.out or os.path.join(args.run, "comm_report")
        draw(profile, out_dir)
        print(f"figures in {out_dir}: bytes_time.png, sizes.png")


if __name__ == "__main__":
    main()
