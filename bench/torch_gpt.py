"""The models and the optimizer step both PyTorch benchmark sides train (train_cpu_torch.py,
train_gpu_torch.py), so the two cannot drift apart from each other or from our trainer.

GPT-2 (--architecture gpt2, the default) is nanoGPT's: token + learned position embeddings,
pre-LN blocks, causal multi-head attention, GELU (tanh approximation), 4x MLP, final
LayerNorm, head tied to the token embedding. Llama (--architecture llama) is as Hugging
Face's LlamaForCausalLM computes it: RMSNorm, grouped-query attention (--kv-heads) with
rotate-half RoPE (--rope-theta), a SwiGLU MLP of --mlp-hidden, no biases, a head of its own
unless --tied. Both end in a mean cross-entropy (in float32); --recompute checkpoints
activations as our trainer's training.recompute does. One step = zero_grad, forward + backward
over the micro-batches, clip_grad_norm_(1.0), AdamW (weight decay 0.1 on the 2-D tensors
only), exactly the trainer's step. torch is imported by the caller (the CPU side must set
OpenBLAS's thread count before the import) and passed in.
"""
import math
import time


def add_model_args(p, warmup, steps):
    """The command-line flags bench_train_cpu and bench_train_gpu pass to either side."""
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--sequence", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="sequences per optimizer step")
    p.add_argument("--micro-batch", type=int, required=True, help="sequences per forward/backward")
    p.add_argument("--warmup", type=int, default=warmup, help="untimed steps first")
    p.add_argument("--steps", type=int, default=steps, help="timed steps")
    p.add_argument("--architecture", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: --heads)")
    p.add_argument("--mlp-hidden", type=int, default=0, help="llama: the MLP's width (0: 4 x --hidden)")
    p.add_argument("--rope-theta", type=float, default=10000.0, help="llama: RoPE's base")
    p.add_argument("--norm-eps", type=float, default=1e-5, help="llama: RMSNorm's epsilon")
    p.add_argument("--tied", action="store_true", help="llama: the head reads the token embedding")
    p.add_argument("--recompute", choices=["none", "attention", "block"], default="none",
                   help="activation checkpointing as our trainer's training.recompute (recomputed())")


def recomputed(torch, args, layer, part, mode):
    """part of block `layer` (mode "attention": from the ln1 output to the attention's output;
    "block": the whole block) under activation checkpointing when args.recompute is mode, else
    part itself: our trainer's recomputation (training.recompute), which leaves the last block
    alone (its activations are in place when the backward starts)."""
    if args.recompute != mode or layer == args.layers - 1:
        return part
    import torch.utils.checkpoint

    def checkpointed(*inputs):
        return torch.utils.checkpoint.checkpoint(part, *inputs, use_reentrant=False)

    return checkpointed


def make_model(torch, args, attention):
    """The model --architecture names, of args' shape; attention as make_gpt's."""
    return make_llama(torch, args, attention) if args.architecture == "llama" else make_gpt(torch, args, attention)


def make_gpt(torch, args, attention):
    """GPT-2 of args' shape. attention: "sdpa" (F.scaled_dot_product_attention, is_causal:
    the fused flash kernel on a GPU) or "masked" (a masked softmax, as PyTorch 1.13 has no
    SDPA)."""
    nn, F = torch.nn, torch.nn.functional
    C, H, T, V, L = args.hidden, args.heads, args.sequence, args.vocab, args.layers

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)
            if attention == "masked":
                self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

        def attend(self, q, k, v):  # (B, H, T, d) each
            if attention == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            return F.softmax(att.masked_fill(~self.mask, float("-inf")), dim=-1) @ v

        def attention(self, h):  # h = ln1(x) (B, T, C) -> the heads' outputs (B, T, C)
            B = h.shape[0]
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(h).split(C, dim=2))
            return self.attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)

        def forward(self, x):  # x (B, T, C)
            attention = recomputed(torch, args, self.layer, self.attention, "attention")
            x = x + self.proj(attention(self.ln1(x)))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block(layer) for layer in range(L))
            self.ln_f = nn.LayerNorm(C)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = recomputed(torch, args, b.layer, b, "block")(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head, (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    return Gpt()


def make_llama(torch, args, attention):
    """Llama of args' shape (module docstring); attention as make_gpt's."""
    nn, F = torch.nn, torch.nn.functional
    C, H, T, V, L = args.hidden, args.heads, args.sequence, args.vocab, args.layers
    KV, d = args.kv_heads or H, C // H
    FF = args.mlp_hidden or 4 * C
    # RoPE's angles, (T, d): position t times the inverse frequencies, the two halves alike.
    inverse = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(T, dtype=torch.float32), inverse).repeat(1, 2)

    def rotate_half(x):
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)

    class RmsNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            x32 = x.float()
            return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + args.norm_eps)).type_as(x) * self.weight

    class Block(nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer
            self.ln1, self.ln2 = RmsNorm(), RmsNorm()
            self.q = nn.Linear(C, H * d, bias=False)
            self.kv = nn.Linear(C, 2 * KV * d, bias=False)
            self.o = nn.Linear(C, C, bias=False)
            self.gate_up = nn.Linear(C, 2 * FF, bias=False)
            self.down = nn.Linear(FF, C, bias=False)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            if attention == "masked":
                self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

        def attend(self, q, k, v):  # q (B, H, T, d), k and v (B, KV, T, d)
            k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
            if attention == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            return F.softmax(att.masked_fill(~self.mask, float("-inf")), dim=-1) @ v

        def attention(self, h):  # h = ln1(x) (B, T, C) -> the heads' outputs (B, T, C)
            B = h.shape[0]
            q = self.q(h).view(B, T, H, d).transpose(1, 2)
            k, v = (t.view(B, T, KV, d).transpose(1, 2) for t in self.kv(h).split(KV * d, dim=2))
            q, k = (t * self.cos.to(t.dtype) + rotate_half(t) * self.sin.to(t.dtype) for t in (q, k))
            return self.attend(q, k, v).transpose(1, 2).contiguous().view(B, T, C)

        def forward(self, x):  # x (B, T, C)
            attention = recomputed(torch, args, self.layer, self.attention, "attention")
            x = x + self.o(attention(self.ln1(x)))
            gate, up = self.gate_up(self.ln2(x)).split(FF, dim=2)
            return x + self.down(F.silu(gate) * up)

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.blocks = nn.ModuleList(Block(layer) for layer in range(L))
            self.ln_f = RmsNorm()
            self.lm_head = None if args.tied else nn.Linear(C, V, bias=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.wte(idx)
            for b in self.blocks:
                x = recomputed(torch, args, b.layer, b, "block")(x)
            x = self.ln_f(x)
            logits = x @ self.wte.weight.t() if self.lm_head is None else self.lm_head(x)  # (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    return Llama()


def make_adamw(torch, model, **options):
    """AdamW as the trainer's: decay on the 2-D tensors only."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **options)


def make_step(torch, args, model, opt, forward, autocast=None):
    """One optimizer step over random tokens (the data does not change a step's time) on the
    model's device; forward(inputs, targets) -> loss (the model, or its compiled form);
    autocast: a context factory around each forward, or None."""
    micro = args.batch // args.micro_batch
    device = next(model.parameters()).device
    data = torch.randint(0, args.vocab, (args.batch, args.sequence + 1), device=device)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(micro):
            rows = slice(i * args.micro_batch, (i + 1) * args.micro_batch)
            if autocast is None:
                loss = forward(inputs[rows], targets[rows]) / micro
            else:
                with autocast():
                    loss = forward(inputs[rows], targets[rows]) / micro
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def time_steps(step, warmup, steps, synchronize=lambda: None):
    """Seconds of each of `steps` steps after `warmup` untimed ones."""
    times = []
    for s in range(warmup + steps):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        if s >= warmup:
            times.append(time.perf_counter() - start)
    return times
