#!/usr/bin/env python3
"""Would the suite notice? One-line mutations of the core invariants, each applied alone,
rebuilt and tested; a mutation the tests fail on is killed, one they pass survives.

    python3 scripts/mutation_check.py [--build build] [--only NAME ...] [--list]

Each mutation names a file, the exact text it replaces (which must occur there once) and the
ctest regex of the tests that should kill it: the layout model's volume, the checksums, the
rectangle algebra, the reshard plan, the optimizer and the model's wiring. The source is
restored after each one (also on Ctrl-C) and the build rebuilt at the end. Not run by CI (a
rebuild per mutation, ~30 minutes on 2 cores); run it before resolving a change to these
invariants, and add a mutation when a new one matters. Exit 0 when every mutation is killed.
"""
import argparse
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (name, file, old text, new text, ctest -R regex of the tests expected to kill it)
MUTATIONS = [
    ("checksum combine big-endian", "checkpoint/checksum.cpp",
     "static_cast<unsigned char>(hashes[i] >> (8 * b))", "static_cast<unsigned char>(hashes[i] >> (8 * (7 - b)))",
     r"^(Checkpoint|Rect)"),
    ("validate_rect takes a zero count", "checkpoint/rect.cpp",
     "if (rect.count[d] <= 0 || rect.offset[d] < 0 ||", "if (rect.count[d] < 0 || rect.offset[d] < 0 ||",
     r"^(Checkpoint|Rect)"),
    ("validate_rect takes a negative offset", "checkpoint/rect.cpp",
     "if (rect.count[d] <= 0 || rect.offset[d] < 0 ||", "if (rect.count[d] <= 0 ||",
     r"^(Checkpoint|Rect)"),
    ("rectangles that touch intersect", "checkpoint/rect.cpp",
     "if (hi <= lo) return std::nullopt;", "if (hi < lo) return std::nullopt;",
     r"^(Checkpoint|Rect|Reshard)"),
    ("a partial last row of tiles is not read", "checkpoint/blocks.cpp",
     "ceil_div(r1, grid.rows_per_block), c0 / grid.cols_per_block", "r1 / grid.rows_per_block, c0 / grid.cols_per_block",
     r"^(Checkpoint|RawRead|Reshard|Blocks|ReadPlan)"),
    ("the reshard plan accepts a gap", "checkpoint/reshard.cpp",
     "if (covered != element_count(wanted)) {", "if (covered > element_count(wanted)) {",
     r"^(Checkpoint|Reshard)"),
    ("the layout model counts one layer-norm all-reduce stage", "layout/layout_volume.cpp",
     "v.add(CommAxis::x, K::all_reduce, A * layer_norms * 2, m * stat);",
     "v.add(CommAxis::x, K::all_reduce, A * layer_norms, m * stat);",
     r"^TrainerModel\."),
    ("AdamW's second bias correction uses beta1", "trainer/op_checks.hpp",
     "std::pow(static_cast<double>(step.beta2), t)", "std::pow(static_cast<double>(step.beta1), t)",
     r"^(TrainerOps|reference\.TinyAtEveryAxis$)"),
    ("AdamW decays every tensor", "trainer/op_checks.hpp",
     "k.wd = decay ? step.weight_decay : 0.0f;", "k.wd = decay || step.t > 0 ? step.weight_decay : 0.0f;",
     r"^(TrainerOps|reference\.TinyAtEveryAxis$)"),
    ("ln1 and ln2 swapped, forward and backward alike", "trainer/model/gpt.cpp",
     'params.param(p + "ln1.weight"),\n        params.param(p + "ln1.bias"),\n'
     '        params.param(p + "ln2.weight"),\n        params.param(p + "ln2.bias"),\n'
     '        params.grad(p + "ln1.weight"),\n        params.grad(p + "ln1.bias"),\n'
     '        params.grad(p + "ln2.weight"),\n        params.grad(p + "ln2.bias"),',
     'params.param(p + "ln2.weight"),\n        params.param(p + "ln2.bias"),\n'
     '        params.param(p + "ln1.weight"),\n        params.param(p + "ln1.bias"),\n'
     '        params.grad(p + "ln2.weight"),\n        params.grad(p + "ln2.bias"),\n'
     '        params.grad(p + "ln1.weight"),\n        params.grad(p + "ln1.bias"),',
     r"^(TrainerGradcheck|TrainerModel\.|reference\.TinyAtEveryAxis$)"),
]


def run(cmd, timeout):
    start = time.monotonic()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="a configured build directory (default: build)")
    ap.add_argument("--only", action="append", help="run only mutations whose name contains this; repeatable")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(o in m[0] for o in args.only)]
    if args.list or not chosen:
        for name, path, _, _, tests in MUTATIONS:
            print(f"{name}: {path}, killed by ctest -R '{tests}'")
        return 0 if args.list else 2
    survivors = []
    for name, path, old, new, tests in chosen:
        full = os.path.join(REPO, path)
        with open(full) as f:
            original = f.read()
        if original.count(old) != 1:
            print(f"{name}: the text to mutate occurs {original.count(old)} times in {path}; update the mutation")
            return 2
        try:
            with open(full, "w") as f:
                f.write(original.replace(old, new))
            code, out, _ = run(["cmake", "--build", args.build], 3600)
            if code != 0:
                verdict = "killed (does not build)"
            else:
                code, out, seconds = run(["ctest", "--test-dir", args.build, "-R", tests, "-j", "2",
                                          "--timeout", "600"], 7200)
                # ctest's summary lists "  12 - Name (Failed)"; disabled tests appear there too.
                failed = [m.group(1) for m in re.finditer(r"^\s*\d+ - (\S+) \((?!Disabled|Not Run)", out, re.M)]
                ran = "no tests ran" not in out.lower() and "No tests were found" not in out
                if not ran:
                    verdict = f"NO TESTS match {tests}"
                    survivors.append(name)
                elif code != 0:
                    verdict = f"killed by {len(failed)} test(s) in {seconds:.0f} s, e.g. {failed[0] if failed else '?'}"
                else:
                    verdict = "SURVIVED"
                    survivors.append(name)
        finally:
            with open(full, "w") as f:
                f.write(original)
        print(f"{name} ({path}): {verdict}", flush=True)
    run(["cmake", "--build", args.build], 3600)
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} killed" +
          (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
