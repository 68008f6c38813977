#!/usr/bin/env python3
"""The PyTorch side of bench_train_gpu: the same GPT-2 and optimizer step in PyTorch on GPU 0.

Run by bench/train_gpu.cpp (one process per model) with the python3 that holds PyTorch with
CUDA. The model and the step are torch_gpt.py's, as a PyTorch user on a GPU writes them today:
attention through F.scaled_dot_product_attention (is_causal=True, so the fused flash kernel),
float32 parameters with bf16 autocast, torch.compile, fused AdamW; --recompute mirrors our
trainer's recomputation with activation checkpointing (torch_gpt.recomputed). The first
--warmup steps (torch.compile's compilation among them) are not timed; bench_train_gpu runs
this script once per round, and the later rounds take the compiled graphs from inductor's
cache where this PyTorch has one.

--matmul N also times a bf16 N x N x N torch.matmul: the tensor-core rate a native bf16 GEMM
reaches on this GPU, beside the trainer's GEMM rate that bench_train_gpu measures.

Prints one JSON line last: {"tokens_per_s": ..., "step_s": [...], "params": N,
"torch": "2.x", "device": "...", "matmul_tflops": ... (with --matmul)}.
"""
import argparse
import json
import statistics
import sys

import torch_gpt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    torch_gpt.add_model_args(p, warmup=3, steps=10)
    p.add_argument("--matmul", type=int, default=0, help="also time a bf16 N^3 matmul (0: no)")
    p.add_argument("--no-compile", action="store_true", help="eager mode (torch.compile is the default)")
    return p.parse_args()


def matmul_tflops(torch, n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 10
    start.record()
    for _ in range(calls):
        a @ b
    end.record()
    end.synchronize()
    return 2.0 * n**3 * calls / (start.elapsed_time(end) * 1e-3) / 1e12


def main():
    args = parse_args()
    import torch

    if not torch.cuda.is_available():
        print("train_gpu_torch.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    if args.batch % args.micro_batch != 0:
        print(f"train_gpu_torch.py: --batch {args.batch} is not a multiple of --micro-batch {args.micro_batch}",
              file=sys.stderr)
        return 2
    torch.manual_seed(1337)
    torch.set_float32_matmul_precision("high")
    model = torch_gpt.make_model(torch, args, attention="sdpa").cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch_gpt.make_adamw(torch, model, fused=True)
    try:  # later rounds reuse the first's compiled graphs (PyTorch >= 2.1; on by default since 2.4)
        import torch._inductor.config as inductor_config
        inductor_config.fx_graph_cache = True
    except (ImportError, AttributeError):
        pass
    forward = model if args.no_compile else torch.compile(model)
    step = torch_gpt.make_step(torch, args, model, opt, forward,
                               autocast=lambda: torch.autocast("cuda", dtype=torch.bfloat16))
    times = torch_gpt.time_steps(step, args.warmup, args.steps, synchronize=torch.cuda.synchronize)
    T = args.sequence
    result = {
        "tokens_per_s": args.batch * T / statistics.median(times),
        "step_s": times,
        "params": params,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    }
    if args.matmul > 0:
        del model, opt, forward, step
        torch.cuda.empty_cache()
        result["matmul_tflops"] = matmul_tflops(torch, args.matmul)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
