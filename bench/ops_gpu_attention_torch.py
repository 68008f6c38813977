#!/usr/bin/env python3
"""The PyTorch side of bench_ops_gpu --attention: causal SDPA in bf16 on GPU 0.

For each head size d of --head-dims and sequence T of --seqs: B = --tokens / T sequences,
h = --hidden / d heads; q, k, v are (B, T, h, d) tensors passed as their (B, h, T, d) views
(as a model's q.view(B, T, h, d).transpose(1, 2)), through
F.scaled_dot_product_attention(is_causal=True) restricted to its FlashAttention-2 kernel.
The forward is timed alone; the backward as torch.autograd.grad of the output, dout given,
over a kept graph. Each time is the median of 5 rounds of --calls calls (CUDA events), after
3 untimed calls, as bench_ops_gpu times ours.

Prints one JSON line per shape, {"sequence": T, "head_dim": d, "forward_s": .., "backward_s": ..},
then {"shapes": N, "kernel": "flash", "torch": "2.x", "device": "..."}.
"""
import argparse
import json
import statistics
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=16384, help="B x T")
    p.add_argument("--hidden", type=int, default=2048, help="h x d")
    p.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--calls", type=int, default=20)
    return p.parse_args()


def flash_only(torch):
    """A context in which SDPA may use only its FlashAttention-2 kernel."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # PyTorch >= 2.3
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)


def seconds_per_call(torch, calls, op):
    for _ in range(3):
        op()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            op()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1e-3 / calls)
    return statistics.median(rounds)


def main():
    args = parse_args()
    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("ops_gpu_attention_torch.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    shapes = 0
    with flash_only(torch):
        for d in (int(x) for x in args.head_dims.split(",")):
            for T in (int(x) for x in args.seqs.split(",")):
                if args.hidden % d or args.tokens % T:
                    continue
                B, h = args.tokens // T, args.hidden // d
                q, k, v = (torch.rand(B, T, h, d, device="cuda", dtype=torch.bfloat16).sub_(0.5).requires_grad_()
                           .transpose(1, 2) for _ in range(3))
                dout = torch.rand(B, h, T, d, device="cuda", dtype=torch.bfloat16).sub_(0.5)
                forward_s = seconds_per_call(torch, args.calls,
                                             lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                backward_s = seconds_per_call(
                    torch, args.calls, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                print(json.dumps({"sequence": T, "head_dim": d, "forward_s": forward_s, "backward_s": backward_s}),
                      flush=True)
                shapes += 1
                del q, k, v, dout, out
                torch.cuda.empty_cache()
    print(json.dumps({"shapes": shapes, "kernel": "flash", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
