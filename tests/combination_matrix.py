#!/usr/bin/env python3
"""The combination matrices of `axonn train`'s features.

Every feature that changes what a step computes or stores is a factor below; a case sets
each factor to one of its levels. The cases form a covering array of strength 2: every pair
of levels of two factors that some valid case can hold is held by at least one case. They
are chosen greedily (each new case the valid one covering the most pairs not yet covered,
ties broken by a seeded random order), so the list is reproducible and adding a factor or a
level regrows it without hand-picking.

Two matrices:
  process  tests/combination_matrix.txt, run by tests/test_train_matrix.cpp: `axonn run` as
           users run it (real processes, Gloo, checkpoints), each case also saved, verified
           and resumed at another world size. The first QUICK cases are the quick subset
           (ctest label `mp`); the rest are labelled `mp` and `matrix_tail` (CI runs them all;
           a developer's `ctest -L mp -LE matrix_tail` runs the quick subset).
  device   tests/combination_matrix_device.txt, run by
           tests/cuda_emulator/test_train_matrix_emulated.cpp: the CUDA backend on the CPU
           emulation, ranks as threads, over Gloo or the emulated NCCL, in float32 and in
           bfloat16 (which only the CUDA backend runs, and one emulated GPU per process
           allows only in-process ranks: no resume factor here).

  /usr/bin/python3 tests/combination_matrix.py [--device] > FILE   # regenerate
  /usr/bin/python3 tests/combination_matrix.py [--device] --check FILE

--check regenerates the list, compares it with the committed file, and verifies on its own
that every allowed pair is covered and that no case breaks a rule (ctest runs it).

A case line: `name key=value ...`, keys as the matrix's factors.
"""
import itertools
import random
import sys

import numpy  # Debian's python3-numpy (scripts/install-deps.sh)

SEED = 20261203
QUICK = 10

# Factor -> levels. Layouts of 2 and 4 ranks ("eN": expert parallelism N, MoE only); the
# resume layout has another world size than the case's.
FACTORS = {
    "layout": ["2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "2x1x1x2", "2x2x1x1", "1x2x1x2",
               "2x1x1x1e2", "4x1x1x1e2", "2x1x1x2e2"],
    # dense; MoE with 4 experts, top-1 or top-2, dropless or with capacity 1.5 (drops tokens)
    "model": ["dense", "top1", "top2", "top2-capacity"],
    # gpt2: LayerNorm, GELU, learned positions, biases, tied embeddings; llama: RMSNorm, RoPE,
    # grouped-query attention (half as many key/value heads as heads), no biases, untied
    # embeddings, SwiGLU MLPs, dense and the experts' (Mixtral's shape)
    "architecture": ["gpt2", "llama"],
    "recompute": ["none", "attention", "block"],
    "shard_optimizer": ["false", "true"],
    "overlap_comm": ["false", "true"],
    # training.tp_chunks: the linear layers' x and y all-reduces in 1 or 4 row chunks
    "tp_chunks": ["1", "4"],
    "moe_chunks": ["1", "2"],
    # one micro-batch per rank (micro_batch = global_batch), or several (micro_batch 2)
    "micro_batches": ["one", "several"],
    # training.grad_clip: 1.0 (on) or 0 (off)
    "grad_clip": ["on", "off"],
    "resume_at": ["1x1x1x1", "1x1x1x2", "3x1x1x1", "2x1x2x1", "4x1x1x1e2"],
    # the data: the built-in corpus alone, or a weighted mixture of it and a text file with a
    # held-out fraction evaluated every other step (docs/data.md)
    "data": ["corpus", "mixture"],
    # the run at the case's layout trains uninterrupted, or loses its last rank to SIGKILL after
    # step 3 and goes on under `axonn run --max-restarts 1` from the newest checkpoint
    "failure": ["none", "rank-killed"],
    # checkpoint.memory_interval: off, a copy of the state every step ("on") or as often as the
    # run measures fits 2% of training time ("auto": in 4 steps, its calibration copy of step 2)
    # in the memory of the case's pretend nodes (2 when it has 4 ranks, the other node keeping
    # each rank's copy too, else 1): a restart after the kill loads the newest step held whole
    # there when it is newer than the disk's
    "memory_copies": ["off", "on", "auto"],
}

# The device matrix: the same features less the resume, plus the element type of activations
# and GEMM weights (training.dtype) and the communicators' backend.
DEVICE_FACTORS = {
    "dtype": ["float32", "bfloat16"],
    "comm": ["gloo", "nccl"],
    "layout": ["2x1x1x1", "1x2x1x1", "1x1x2x1", "1x1x1x2", "2x1x1x2", "2x2x1x1", "1x2x1x2",
               "2x1x1x1e2", "4x1x1x1e2", "2x1x2x1e2"],
    "model": FACTORS["model"],
    "architecture": FACTORS["architecture"],
    "recompute": FACTORS["recompute"],
    "shard_optimizer": FACTORS["shard_optimizer"],
    "overlap_comm": FACTORS["overlap_comm"],
    "tp_chunks": FACTORS["tp_chunks"],
    "moe_chunks": FACTORS["moe_chunks"],
    "micro_batches": FACTORS["micro_batches"],
    "grad_clip": FACTORS["grad_clip"],
}


def world(layout):
    d, x, y, z = (int(v) for v in layout.split("e")[0].split("x"))
    return d * x * y * z


def experts(layout):
    return int(layout.split("e")[1]) if "e" in layout else 1


def broken_rule(case):
    """The rule a case breaks, or None. Rules are what cannot run, never a preference:
    - expert parallelism needs an MoE model; model.moe_chunks pipelines the MoE exchange;
    - the sharded optimizer does not go with expert parallelism: `axonn train` refuses it
      (exit 2, naming both settings), test_train_matrix checks that refusal;
    - the resume is at another world size;
    - an MoE model with several micro-batches per rank computes its balance loss over each
      micro-batch step's tokens (docs/moe.md), a grouping that depends on the layout: such
      cases train with aux_loss_weight = 0, which the case's job sets, so no rule here."""
    moe = case["model"] != "dense"
    for key in ("layout", "resume_at"):
        if key not in case:
            continue
        if experts(case[key]) > 1 and not moe:
            return f"{key} {case[key]} has expert parallelism and the model is dense"
        if experts(case[key]) > 1 and case["shard_optimizer"] == "true":
            return f"{key} {case[key]} has expert parallelism and the optimizer is sharded"
    if case["moe_chunks"] != "1" and not moe:
        return "moe_chunks > 1 on a dense model"
    if "resume_at" in case and world(case["resume_at"]) == world(case["layout"]):
        return "the resume is at the same world size"
    return None


def pairs(case):
    items = sorted(case.items())
    return {(a, b) for a, b in itertools.combinations(items, 2)}


class ValidCases:
    """Every case of `factors` that breaks no rule, in the generator's order (the product's,
    shuffled with SEED). `levels[i, f]` is case i's level number of factor number f, and
    `holds[f][l]` a bool array over the cases, true where factor f is at level l: the greedy
    choice and the check count pairs with these arrays, over all cases at once, rather than
    listing each case's pairs (the process matrix has 435456 cases of 91 pairs each)."""

    def __init__(self, factors):
        self.factors = factors
        self.names = list(factors)
        numbers = [n for n in itertools.product(*(range(len(levels)) for levels in factors.values()))
                   if broken_rule(self.case(n)) is None]
        random.Random(SEED).shuffle(numbers)
        self.levels = numpy.array(numbers, dtype=numpy.int8)  # [cases, factors]
        self.holds = [[self.levels[:, f] == l for l in range(len(factors[name]))]
                      for f, name in enumerate(self.names)]

    def case(self, numbers):
        """The case of level numbers `numbers` (one per factor): {factor: level}."""
        return {name: self.factors[name][l] for name, l in zip(self.names, numbers)}

    def held(self, f, a, g, b):
        """The cases holding level a of factor f and level b of factor g (bool array)."""
        return self.holds[f][a] & self.holds[g][b]

    def pairs(self):
        """Every pair of levels some case holds, as (f, a, g, b) with f < g."""
        found = set()
        for f, g in itertools.combinations(range(len(self.names)), 2):
            for a in range(len(self.holds[f])):
                for b in range(len(self.holds[g])):
                    if self.held(f, a, g, b).any():
                        found.add((f, a, g, b))
        return found

    def named(self, pair):
        """(f, a, g, b) as pairs(case) gives it: ((name, level), (name, level)), by name."""
        f, a, g, b = pair
        return tuple(sorted([(self.names[f], self.factors[self.names[f]][a]),
                             (self.names[g], self.factors[self.names[g]][b])]))


def covering_array(valid):
    uncovered = valid.pairs()
    # Each case's count of pairs no chosen case holds yet: all its pairs at first. A chosen
    # case's new pairs lower the count of every case holding them; argmax takes the first case
    # of the most, so the shuffled order breaks ties.
    factor_pairs = list(itertools.combinations(range(len(valid.names)), 2))
    uncovered_count = numpy.full(len(valid.levels), len(factor_pairs), dtype=numpy.int32)
    chosen = []
    while uncovered:
        best = valid.levels[int(uncovered_count.argmax())]
        chosen.append(valid.case(best))
        for f, g in factor_pairs:
            pair = (f, int(best[f]), g, int(best[g]))
            if pair in uncovered:
                uncovered.remove(pair)
                uncovered_count -= valid.held(*pair)
    return chosen


def lines(valid):
    out = []
    for i, case in enumerate(covering_array(valid)):
        name = f"case{i:02d}"
        out.append(name + " " + " ".join(f"{k}={v}" for k, v in case.items()))
    return out


def check(path, factors):
    with open(path) as f:
        committed = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
    valid = ValidCases(factors)
    want = lines(valid)
    device = " --device" if factors is DEVICE_FACTORS else ""
    if committed != want:
        print(f"{path} is not what tests/combination_matrix.py{device} generates; regenerate it:\n"
              f"  /usr/bin/python3 tests/combination_matrix.py{device} > {path}", file=sys.stderr)
        return 1
    # Independently of the greedy choice: every pair some valid case holds is held by a
    # committed case, and no committed case breaks a rule.
    cases = [dict(kv.split("=") for kv in l.split()[1:]) for l in committed]
    for c in cases:
        if set(c) != set(factors) or any(c[k] not in factors[k] for k in c):
            print(f"a case with unknown factors or levels: {c}", file=sys.stderr)
            return 1
        if broken_rule(c):
            print(f"a case breaks a rule ({broken_rule(c)}): {c}", file=sys.stderr)
            return 1
    allowed = {valid.named(pair) for pair in valid.pairs()}
    held = set().union(*(pairs(c) for c in cases))
    missing = allowed - held
    if missing:
        print(f"{len(missing)} allowed pairs are not covered, e.g. {sorted(missing)[:3]}", file=sys.stderr)
        return 1
    print(f"{len(cases)} cases cover all {len(allowed)} allowed pairs of {len(factors)} factors")
    return 0


def main(argv):
    factors = FACTORS
    if argv[:1] == ["--device"]:
        factors = DEVICE_FACTORS
        argv = argv[1:]
    if len(argv) == 2 and argv[0] == "--check":
        return check(argv[1], factors)
    if argv:
        print("usage: combination_matrix.py [--device] [--check FILE]", file=sys.stderr)
        return 2
    print("# Generated by tests/combination_matrix.py%s (seed %d): do not edit by hand."
          % (" --device" if factors is DEVICE_FACTORS else "", SEED))
    if factors is FACTORS:
        print("# The first %d cases are the quick subset; the rest are labelled matrix_tail." % QUICK)
    print("\n".join(lines(ValidCases(factors))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
