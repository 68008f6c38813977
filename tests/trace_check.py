#!/usr/bin/python3
"""Checks what a traced run left in its run directory, for tests/test_observability.cpp.

    trace_check.py RUN_DIR RANKS FIRST LAST

- every rank's trace/rank-NNNNN.json is JSON in Chrome's trace event format, holds the steps
  FIRST..LAST (one "step N" event each), backend ops, step phases (each with its thread's CPU
  time, at most its length) and collectives;
- per rank, the collectives' bytes in the trace, per axis and kind, equal the layout model's
  bytes per step (summary.json's predicted_bytes_per_step, which the run checked its
  counters against) times the traced steps; no collective the model does not predict;
- scripts/merge_traces.py merges them into one file that loads, one process per rank;
- summary.json's comm_profile has, per axis and kind, the counted bytes (the prediction
  times steps_run), a size histogram summing to the calls, and a predicted time.
Exits 1 naming the first thing that does not hold.
"""
import json
import os
import subprocess
import sys


def fail(message):
    print(f"trace_check.py: {message}")
    sys.exit(1)


def main():
    run_dir, ranks, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    per_step = summary["predicted_bytes_per_step"]
    traced_steps = last - first + 1

    for rank in range(ranks):
        path = os.path.join(run_dir, "trace", f"rank-{rank:05d}.json")
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        spans = [e for e in events if e.get("ph") == "X"]
        for e in spans:
            if e["pid"] != rank or e["dur"] < 0 or not isinstance(e["ts"], (int, float)):
                fail(f"{path}: malformed event {e}")
        steps = sorted(int(e["args"]["step"]) for e in spans if e["cat"] == "step")
        if steps != list(range(first, last + 1)):
            fail(f"{path}: traced steps {steps}, expected {first}..{last}")
        communicates = any(v > 0 for v in per_step.values())
        for category in ("op", "phase") + (("comm",) if communicates else ()):
            if not any(e["cat"] == category for e in spans):
                fail(f"{path}: no '{category}' events")
        if not any(e["cat"] == "op" and e["name"].startswith("gemm") and int(e["args"]["flops"]) > 0 for e in spans):
            fail(f"{path}: no GEMM op with its FLOPs")
        # A phase's CPU time is its thread's: at most the phase's length (the two clocks are
        # read a moment apart, hence the slack), and some of it working.
        phases = [e for e in spans if e["cat"] == "phase"]
        for e in phases:
            cpu = e["args"].get("thread_cpu_us")
            if not isinstance(cpu, (int, float)) or cpu < 0 or cpu > e["dur"] + 50:
                fail(f"{path}: phase {e} has no thread_cpu_us within 0..its duration")
        if not any(e["name"] == "forward_backward" and e["args"]["thread_cpu_us"] > 0 for e in phases):
            fail(f"{path}: no forward_backward phase spent CPU time")
        traced = {}
        for e in spans:
            if e["cat"] == "comm":
                key = f"{e['args']['axis']}.{e['args']['kind']}"
                traced[key] = traced.get(key, 0) + int(e["args"]["bytes"])
                if not isinstance(e["args"]["group"], list) or rank not in e["args"]["group"]:
                    fail(f"{path}: collective {e} does not name a group holding rank {rank}")
        expected = {k: v * traced_steps for k, v in per_step.items() if v > 0}
        if traced != expected:
            fail(f"{path}: collective bytes per axis.kind in the trace {traced}, "
                 f"predicted x {traced_steps} steps {expected}")
        names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
        if "compute" not in names or "steps" not in names:
            fail(f"{path}: tracks {names} lack 'compute' or 'steps'")

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "merge_traces.py")
    merged_path = os.path.join(run_dir, "trace", "merged.json")
    result = subprocess.run([sys.executable, script, run_dir], capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"merge_traces.py failed: {result.stdout}{result.stderr}")
    with open(merged_path) as f:
        merged = json.load(f)["traceEvents"]
    if {e["pid"] for e in merged} != set(range(ranks)):
        fail(f"merged file's processes {sorted({e['pid'] for e in merged})}, expected 0..{ranks - 1}")

    steps_run = summary["end_step"] - summary["start_step"]
    profile = {f"{e['axis']}.{e['kind']}": e for e in summary["comm_profile"]}
    expected = {k for k, v in per_step.items() if v > 0}
    if set(profile) != expected:
        fail(f"comm_profile has {sorted(profile)}, the prediction {sorted(expected)}")
    for key, e in profile.items():
        if e["bytes"] != per_step[key] * steps_run:
            fail(f"comm_profile {key}: {e['bytes']} bytes, counted {per_step[key]} x {steps_run} steps")
        if sum(e["size_histogram"].values()) != e["calls"] or e["calls"] <= 0:
            fail(f"comm_profile {key}: histogram {e['size_histogram']} does not sum to {e['calls']} calls")
        if not e["predicted_seconds"] > 0 or not e["seconds"] > 0:
            fail(f"comm_profile {key}: no time or no predicted time: {e}")
    print(f"trace_check.py: {ranks} ranks, steps {first}-{last}, {len(merged)} merged events, "
          f"{len(profile)} profile entries: ok")


if __name__ == "__main__":
    main()
