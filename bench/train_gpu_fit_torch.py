#!/usr/bin/env python3
"""The PyTorch side of bench_train_gpu --fit: which of a list of candidates trains on GPU 0.

--axis micro-batch: each candidate VALUE:RECOMPUTE is the model at --sequence with a
micro-batch of VALUE; --axis sequence: at micro-batch 1 with a sequence of VALUE. Each is
tried in order with one optimizer step of torch_gpt.py's model and step (SDPA, bf16 autocast,
fused AdamW, activation checkpointing as RECOMPUTE names it), in eager mode (compiling each
shape would take minutes), until one runs out of memory.

Prints a line per try ("  torch micro-batch 8, recompute none: fits, peak 41.2 GiB (3.1 s)"),
then one JSON line last: {"fitting": N (how many candidates fit, in order), "tried":
[{"value": v, "recompute": "none", "fits": true, "peak_bytes": n}], "torch": "2.x",
"device": "..."}.
"""
import argparse
import copy
import gc
import json
import sys
import time

import torch_gpt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_gpt.add_model_args(p, warmup=0, steps=1)
    p.add_argument("--axis", choices=["micro-batch", "sequence"], required=True)
    p.add_argument("--candidates", required=True, help="VALUE:RECOMPUTE,... in the order to try")
    return p.parse_args()


def candidate_args(args, value, recompute):
    """args for one candidate: the model and step at that micro-batch or sequence."""
    out = copy.copy(args)
    out.recompute = recompute
    if args.axis == "micro-batch":
        out.batch = out.micro_batch = value
    else:
        out.batch = out.micro_batch = 1
        out.sequence = value
    return out


def fits(torch, args):
    """(whether one step of args' model runs, its peak allocated bytes)."""
    model = opt = step = None
    try:
        with torch.device("cuda"):
            model = torch_gpt.make_model(torch, args, attention="sdpa")
        opt = torch_gpt.make_adamw(torch, model, fused=True)
        step = torch_gpt.make_step(torch, args, model, opt, model,
                                   autocast=lambda: torch.autocast("cuda", dtype=torch.bfloat16))
        step()
        torch.cuda.synchronize()
        return True, torch.cuda.max_memory_allocated()
    except torch.cuda.OutOfMemoryError:
        return False, torch.cuda.max_memory_allocated()
    finally:
        del model, opt, step
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main():
    args = parse_args()
    import torch

    if not torch.cuda.is_available():
        print("fit_gpu_torch.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(1337)
    torch.set_float32_matmul_precision("high")
    tried = []
    for word in args.candidates.split(","):
        value, _, recompute = word.partition(":")
        start = time.perf_counter()
        ok, peak = fits(torch, candidate_args(args, int(value), recompute or "none"))
        print(f"  torch {args.axis} {value}, recompute {recompute}: {'fits' if ok else 'does not fit'}, "
              f"peak {peak / 2**30:.1f} GiB ({time.perf_counter() - start:.1f} s)", flush=True)
        tried.append({"value": int(value), "recompute": recompute, "fits": ok, "peak_bytes": peak})
        if not ok:
            break
    fitting = sum(1 for t in tried if t["fits"])
    print(json.dumps({"fitting": fitting, "tried": tried, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
