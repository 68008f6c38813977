#!/usr/bin/python3
"""The PyTorch side of bench_train_cpu: the same GPT-2 and optimizer step in PyTorch CPU.

Run by bench/train_cpu.cpp (one process per round), with /usr/bin/python3 (Debian's
python3-torch 1.13). The model is nanoGPT's, as a PyTorch user on a CPU would write it in
1.13 (no scaled_dot_product_attention there): token + learned position embeddings, pre-LN
blocks, causal multi-head attention with a masked softmax, GELU (tanh approximation), 4x MLP,
final LayerNorm, head tied to the token embedding, mean cross-entropy. One step = zero_grad,
forward + backward over the micro-batches, clip_grad_norm_, AdamW (weight decay on the 2-D
tensors only), exactly the trainer's step. Tokens are random: the data does not change the
time of a step.

Prints one JSON line: {"step_s": [...], "params": N, "torch": "1.13.1", "threads": n}.
"""
import argparse
import json
import math
import os
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
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    return p.parse_args()


def main():
    args = parse_args()
    # OpenBLAS (Debian's torch calls it for every matmul) reads its thread count at load time.
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
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
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

        def forward(self, x):  # x (B, T, C)
            B = x.shape[0]
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, d)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = F.softmax(att.masked_fill(~self.mask, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
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
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = Gpt()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    micro = args.batch // args.micro_batch
    data = torch.randint(0, V, (args.batch, T + 1))
    inputs, targets = data[:, :T].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(micro):
            rows = slice(i * args.micro_batch, (i + 1) * args.micro_batch)
            (model(inputs[rows], targets[rows]) / micro).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    times = []
    for s in range(args.warmup + args.steps):
        start = time.perf_counter()
        step()
        if s >= args.warmup:
            times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"step_s": times, "params": params, "torch": torch.__version__, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
