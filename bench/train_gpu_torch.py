#!/usr/bin/env python3
"""The PyTorch side of bench_train_gpu: the same GPT-2 and optimizer step in PyTorch on GPU 0.

Run by bench/train_gpu.cpp (one process per model) with the python3 that holds PyTorch with
CUDA. The model is GPT-2 as a PyTorch user on a GPU writes it today: token + learned position
embeddings, pre-LN blocks, causal attention through F.scaled_dot_product_attention
(is_causal=True, so the fused flash kernel), GELU (tanh approximation), 4x MLP, final
LayerNorm, head tied to the token embedding, mean cross-entropy; float32 parameters with bf16
autocast, torch.compile, fused AdamW. One step = zero_grad, forward + backward over the
micro-batches, clip_grad_norm_, AdamW (weight decay on the 2-D tensors only), the trainer's
step. Tokens are random: the data does not change the time of a step. The first --warmup
steps (torch.compile's compilation among them) are not timed.

--matmul N also times a bf16 N x N x N torch.matmul: the tensor-core rate a native bf16 GEMM
reaches on this GPU, beside the trainer's GEMM rate that bench_train_gpu measures.

Prints one JSON line last: {"tokens_per_s": ..., "step_s": [...], "params": N,
"torch": "2.x", "device": "...", "matmul_tflops": ... (with --matmul)}.
"""
import argparse
import json
import math
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--sequence", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="sequences per optimizer step")
    p.add_argument("--micro-batch", type=int, required=True, help="sequences per forward/backward")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation among them)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
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
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("train_gpu_torch.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    if args.batch % args.micro_batch != 0:
        print(f"train_gpu_torch.py: --batch {args.batch} is not a multiple of --micro-batch {args.micro_batch}",
              file=sys.stderr)
        return 2
    torch.manual_seed(1337)
    torch.set_float32_matmul_precision("high")
    C, H, T, V = args.hidden, args.heads, args.sequence, args.vocab

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)

        def forward(self, x):  # x (B, T, C)
            B = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, d)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(C)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * args.layers) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head, (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    model = Gpt().cuda()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
        fused=True,
    )
    forward = model if args.no_compile else torch.compile(model)
    micro = args.batch // args.micro_batch
    data = torch.randint(0, V, (args.batch, T + 1), device="cuda")
    inputs, targets = data[:, :T].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(micro):
            rows = slice(i * args.micro_batch, (i + 1) * args.micro_batch)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = forward(inputs[rows], targets[rows]) / micro
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    times = []
    for s in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if s >= args.warmup:
            times.append(time.perf_counter() - start)
    result = {
        "tokens_per_s": args.batch * T / statistics.median(times),
        "step_s": times,
        "params": params,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
    }
    if args.matmul > 0:
        del model, opt, forward, data, inputs, targets
        torch.cuda.empty_cache()
        result["matmul_tflops"] = matmul_tflops(torch, args.matmul)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
