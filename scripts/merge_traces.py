#!/usr/bin/env python3
"""Merges the per-rank timelines of a traced run into one Chrome trace file.

`axonn train` with run.trace_steps (or --trace-steps) writes one Chrome trace event file per
rank, <run.dir>/trace/rank-00003.json, each rank a process (pid = rank) with a track per
thread or stream: the backend's ops ("op"), the collectives ("comm": axis, kind, bytes,
group), the step's phases ("phase"), checkpoint copies and writes ("checkpoint") and the step
boundaries ("step", on the track "steps"). This puts them in one file, one process per rank
in rank order, which Perfetto (https://ui.perfetto.dev) and chrome://tracing open:

    scripts/merge_traces.py runs/tiny                  # -> runs/tiny/trace/merged.json
    scripts/merge_traces.py runs/tiny -o all.json
    scripts/merge_traces.py runs/tiny --hang           # the hang-rank-N.json files instead

Times are microseconds since the Unix epoch on each rank's host; ranks on hosts whose clocks
agree (NTP) line up. --align shifts each rank so that its first traced step starts at the
same time as rank 0's, for hosts whose clocks do not. Prints what it merged, per rank.
"""
import argparse
import glob
import json
import os
import re
import sys


def trace_files(trace_dir, hang):
    pattern = "hang-rank-*.json" if hang else "rank-*.json"
    number = re.compile(r"(\d+)\.json$")
    files = glob.glob(os.path.join(trace_dir, pattern))
    return sorted(files, key=lambda f: int(number.search(f).group(1)))


def first_step_start(events):
    starts = [e["ts"] for e in events if e.get("cat") == "step" and e.get("ph") == "X"]
    return min(starts) if starts else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="the run directory (run.dir) or its trace/ folder")
    parser.add_argument("-o", "--output", help="the merged file (default: <trace dir>/merged.json)")
    parser.add_argument("--hang", action="store_true", help="merge the hang-rank-N.json files")
    parser.add_argument("--align", action="store_true",
                        help="shift every rank so its first traced step starts with rank 0's")
    args = parser.parse_args()

    trace_dir = args.run if os.path.basename(os.path.normpath(args.run)) == "trace" else os.path.join(args.run, "trace")
    files = trace_files(trace_dir, args.hang)
    if not files:
        sys.exit(f"merge_traces.py: no {'hang-rank-*' if args.hang else 'rank-*'}.json in {trace_dir}; "
                 "train with run.trace_steps (e.g. --trace-steps 10-12) first")

    merged = []
    reference = None
    for path in files:
        with open(path) as f:
            try:
                events = json.load(f)["traceEvents"]
            except (json.JSONDecodeError, KeyError) as e:
                sys.exit(f"merge_traces.py: {path} is not a Chrome trace file ({e})")
        shift = 0.0
        if args.align:
            start = first_step_start(events)
            if reference is None:
                reference = start
            elif start is not None and reference is not None:
                shift = reference - start
        pids = {e["pid"] for e in events if "pid" in e}
        kinds = {}
        for e in events:
            if e.get("ph") in ("X", "i"):
                kinds[e.get("cat", "?")] = kinds.get(e.get("cat", "?"), 0) + 1
                if shift:
                    e["ts"] += shift
        merged.extend(events)
        counts = ", ".join(f"{n} {cat}" for cat, n in sorted(kinds.items()))
        print(f"{os.path.basename(path)}: rank {','.join(map(str, sorted(pids)))}: {counts}"
              + (f" (shifted {shift / 1e3:.3f} ms)" if shift else ""))

    output = args.output or os.path.join(trace_dir, "hang-merged.json" if args.hang else "merged.json")
    with open(output + ".part", "w") as f:
        json.dump({"displayTimeUnit": "ms", "traceEvents": merged}, f)
    os.replace(output + ".part", output)
    print(f"merged {len(files)} ranks, {len(merged)} events: {output} (open it in https://ui.perfetto.dev)")


if __name__ == "__main__":
    main()
