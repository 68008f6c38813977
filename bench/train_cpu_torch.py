#!/usr/bin/python3
"""The PyTorch side of bench_train_cpu: the same GPT-2 and optimizer step in PyTorch CPU.

Run by bench/train_cpu.cpp (one process per round), with /usr/bin/python3 (Debian's
python3-torch 1.13). The model and the step are torch_gpt.py's, with a masked-softmax
attention, as a PyTorch user on a CPU writes it in 1.13 (no scaled_dot_product_attention
there).

Prints one JSON line: {"step_s": [...], "params": N, "torch": "1.13.1", "threads": n}.
"""
import argparse
import json
import os
import sys

import torch_gpt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_gpt.add_model_args(p, warmup=2, steps=5)
    p.add_argument("--threads", type=int, required=True)
    return p.parse_args()


def main():
    args = parse_args()
    # OpenBLAS (Debian's torch calls it for every matmul) reads its thread count at load time.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    model = torch_gpt.make_model(torch, args, attention="masked")
    opt = torch_gpt.make_adamw(torch, model)
    step = torch_gpt.make_step(torch, args, model, opt, model)
    times = torch_gpt.time_steps(step, args.warmup, args.steps)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"step_s": times, "params": params, "torch": torch.__version__, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
