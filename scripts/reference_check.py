#!/usr/bin/python3
"""Our trainer against an independent PyTorch reference: same GPT-2, same initial weights,
same batches, same optimizer, N steps; prints the per-step loss and gradient-norm differences
and the final weights' differences, for a one-rank run and for multi-rank layouts.

    /usr/bin/python3 scripts/reference_check.py [--axonn build/bin/axonn] [--job job_templates/tiny.toml]
        [--text FILE] [--steps N] [--layout 1x1x1x1] [--layout 2x1x2x1] [--set SECTION.KEY=VALUE]
        [--work DIR] [--slack 2]

Run it with /usr/bin/python3, where Debian's python3-torch and python3-h5py live. ctest runs it
(label mp, tests/CMakeLists.txt: reference.*) on the dense and the MoE tiny jobs at several
layouts, with recomputation, the sharded optimizer and overlap.

The reference runs in float64. The same PyTorch code in float32 is the yardstick: its distance
from the reference is what float32 rounding alone does to this run (a loss spike amplifies it
by orders of magnitude within a few steps). Exit code 0 when our losses and final weights are
within --slack times the yardstick's distance of the reference (an MoE model's balance losses
too, or within 1e-6 relative), 1 otherwise, 2 for bad arguments.

The route, chosen so that the reference shares nothing with our code but the initial weights:
- Data: a plain text file (default: Debian's GPL-3 text), trained with `data.format = "text"`:
  one token per byte, which Python reads with open(..., "rb"). The sample order (a keyed
  Feistel permutation per epoch, trainer/data/sample_order.cpp) is reimplemented here from
  its description; a wrong order would show as a loss difference at the first step.
- Weights: `axonn run -n 1 JOB --init-only` writes the initial state as checkpoint step 0; its
  index.h5 is read with h5py. The final weights come from each run's last checkpoint.
- Model (trainer/model/gpt.hpp, parameters.hpp): token + learned position embeddings, pre-LN
  blocks (LayerNorm eps 1e-5), causal multi-head attention, GELU tanh approximation, 4x MLP,
  final LayerNorm, head tied to wte; weights in x @ W convention, qkv.weight [C, 3, C] =
  GPT-2's c_attn [C, 3C] with q | k | v column blocks.
- Step: the loss is the mean over the global batch's B*T tokens, accumulated over micro-batches
  of the job's micro_batch; torch.nn.utils.clip_grad_norm_; torch.optim.AdamW with decoupled
  weight decay on wte, wpe and the linear weights only; warmup + cosine learning rate as
  trainer/optim/lr_schedule.cpp defines it.
- Mixture of experts (`model.experts` E > 0), from docs/moe.md's description: the MLP of blocks
  moe_every-1, 2*moe_every-1, ... is a router h.<l>.mlp.router.weight [C, E] (logits = x @ W_r,
  softmax, the top_k largest with ties to the lower index, renormalized to sum to 1 when
  top_k = 2; these are the gates) and E GELU MLPs h.<l>.mlp.experts.{fc,proj}.{weight,bias}
  ([E, C, 4C], [E, 4C], [E, 4C, C], [E, C]); a token's output is the gate-weighted sum of its
  experts' outputs. With capacity_factor c > 0 each expert takes at most max(1, ceil(c*T*k/E))
  (token, choice) pairs of each sequence, all first choices before second choices, earlier
  tokens first; a dropped pair contributes nothing. The balance loss w*E*sum_i f_i*P_i (f_i:
  the fraction of all routed pairs, before the capacity, that chose i, a count without
  gradient; P_i: the mean router probability of i) is taken over the global batch's tokens,
  which is what the trainer computes when every rank runs one micro-batch per step
  (micro_batch >= global_batch / (D*Z)); a layout that does not is refused. Its gradient is
  added to the language-model loss's; the reported loss is the language-model loss alone, and
  the balance loss (summed over the MoE blocks) is compared with metrics.jsonl's balance_loss.
  AdamW decays the router and the expert weights, not the expert biases (the trainer's decay
  flags, trainer/model/parameters.cpp). Routing is discrete: the reference prints its smallest
  margin between a chosen and a passed-over expert, below which rounding could flip a choice.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import tomllib

import h5py
import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# TrainingConfig's defaults (config/job_config.hpp), for keys a job leaves out.
TRAINING_DEFAULTS = {
    "global_batch": 8, "micro_batch": 1, "steps": 100, "lr": 3e-4, "min_lr": 3e-5, "warmup_steps": 10,
    "schedule": "cosine", "weight_decay": 0.1, "grad_clip": 1.0, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
    "seed": 1337,
}
MODEL_DEFAULTS = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "sequence": 64,
                  "experts": 0, "top_k": 2, "moe_every": 1, "capacity_factor": 0.0, "aux_loss_weight": 0.01}


# ---- the sample order (trainer/data/sample_order.cpp, reimplemented from its comments)

def splitmix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def epoch_permutation(seed, epoch, n):
    """The keyed permutation of [0, n) for one epoch: 4 Feistel rounds on two halves of
    max(1, ceil(bit_width(n-1)/2)) bits, cycle-walked back into [0, n)."""
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = (1 << half) - 1
    epoch_key = splitmix64(splitmix64(seed) ^ epoch)
    keys = [splitmix64(epoch_key ^ r) for r in range(4)]

    def network(x):
        left, right = x >> half, x & mask
        for key in keys:
            left, right = right, left ^ (splitmix64(key ^ right) & mask)
        return (left << half) | right

    def permute(i):
        x = network(i)
        while x >= n:
            x = network(x)
        return x

    return permute


class SampleOrder:
    def __init__(self, seed, token_count, sequence):
        self.seed, self.sequence = seed, sequence
        self.n = (token_count - 1) // sequence
        self.cache = {}

    def start(self, g):
        if self.n == 1:
            return 0
        epoch = g // self.n
        if epoch not in self.cache:
            self.cache[epoch] = epoch_permutation(self.seed, epoch, self.n)
        return self.cache[epoch](g % self.n) * self.sequence


# ---- the schedule (trainer/optim/lr_schedule.cpp)

def learning_rate(t, step):
    if step < t["warmup_steps"]:
        return t["lr"] * (step + 1) / t["warmup_steps"]
    if t["schedule"] == "constant":
        return t["lr"]
    decay_steps = max(1, t["steps"] - t["warmup_steps"])
    progress = min(1.0, (step - t["warmup_steps"]) / decay_steps)
    return t["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t["lr"] - t["min_lr"])


# ---- the model

def decayed(name, shape):
    """GPT-2's AdamW groups: wte, wpe and every linear weight decay; biases and LayerNorm don't."""
    return name in ("wte", "wpe") or (name.endswith(".weight") and len(shape) >= 2)


def capacity_per_sequence(m):
    """Pairs an expert takes from one sequence (layout/model_plan.cpp); 0: dropless."""
    if m["experts"] <= 0 or m["capacity_factor"] <= 0:
        return 0
    return max(1, math.ceil(m["capacity_factor"] * m["sequence"] * m["top_k"] / m["experts"] - 1e-9))


def moe_mlp(P, m, p, x, margins):
    """The MoE layer of block prefix p on the LayerNorm output x (b, T, C): its output and its
    balance loss. Appends the routing's smallest margin (the k-th largest probability minus the
    next one, where a rounding difference could flip a choice) to `margins`."""
    b, T, C = x.shape
    E, k = m["experts"], m["top_k"]
    rows = x.reshape(b * T, C)
    probs = torch.softmax(rows @ P[p + "mlp.router.weight"], dim=-1)  # (n, E)
    # Top-k with ties to the lower index: argmax returns the first maximum; mask it, again.
    masked = probs.detach().clone()
    chosen = []
    for _ in range(k):
        e = masked.argmax(dim=-1)
        chosen.append(e)
        masked[torch.arange(b * T), e] = float("-inf")
    choice = torch.stack(chosen, dim=1)  # (n, k)
    if E > k:
        kth = probs.detach().gather(1, choice[:, -1:]).squeeze(1)
        margins.append(float((kth - masked.max(dim=-1).values).min()))
    top = probs.gather(1, choice)
    gates = top / top.sum(dim=1, keepdim=True) if k == 2 else top
    keep = torch.ones(b * T, k, dtype=torch.bool)
    cap = capacity_per_sequence(m)
    if cap:
        # Per sequence, pairs in priority order (choice s, then token t); a pair's place in its
        # expert's queue is the count of earlier pairs to that expert.
        order = choice.reshape(b, T, k).transpose(1, 2).reshape(b, k * T)
        onehot = F.one_hot(order, E)
        place = (onehot.cumsum(dim=1) * onehot).sum(dim=-1) - 1  # (b, k*T)
        keep = (place < cap).reshape(b, k, T).transpose(1, 2).reshape(b * T, k)
    out = torch.zeros_like(rows)
    for e in range(E):
        token, slot = ((choice == e) & keep).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        hidden = F.gelu(rows[token] @ P[p + "mlp.experts.fc.weight"][e] + P[p + "mlp.experts.fc.bias"][e],
                        approximate="tanh")
        y = hidden @ P[p + "mlp.experts.proj.weight"][e] + P[p + "mlp.experts.proj.bias"][e]
        out = out.index_add(0, token, gates[token, slot].unsqueeze(1) * y)
    f = torch.bincount(choice.reshape(-1), minlength=E).to(probs.dtype) / (b * T * k)
    balance = m["aux_loss_weight"] * E * (f * probs.mean(dim=0)).sum()
    return out.reshape(b, T, C), balance


def gpt_loss_sum(P, m, idx, targets, margins=None):
    """Sum of the token losses of idx (b, T) -> targets (b, T), and the MoE blocks' balance
    losses summed (0.0 for a dense model)."""
    C, H, V = m["hidden"], m["heads"], m["vocab"]
    b, T = idx.shape
    d = C // H
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def ln(x, name):
        return F.layer_norm(x, (C,), P[name + ".weight"], P[name + ".bias"], eps=1e-5)

    x = P["wte"][idx] + P["wpe"][:T]
    balance = 0.0
    for layer in range(m["layers"]):
        p = f"h.{layer}."
        qkv = ln(x, p + "ln1") @ P[p + "attn.qkv.weight"].reshape(C, 3 * C) + P[p + "attn.qkv.bias"].reshape(3 * C)
        q, k, v = (t.reshape(b, T, H, d).transpose(1, 2) for t in qkv.split(C, dim=-1))  # (b, H, T, d)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(b, T, C) @ P[p + "attn.proj.weight"] + P[p + "attn.proj.bias"]
        if m["experts"] > 0 and (layer + 1) % m["moe_every"] == 0:
            out, layer_balance = moe_mlp(P, m, p, ln(x, p + "ln2"), margins if margins is not None else [])
            x, balance = x + out, balance + layer_balance
            continue
        hidden = F.gelu(ln(x, p + "ln2") @ P[p + "mlp.fc.weight"] + P[p + "mlp.fc.bias"], approximate="tanh")
        x = x + hidden @ P[p + "mlp.proj.weight"] + P[p + "mlp.proj.bias"]
    logits = ln(x, "ln_f") @ P["wte"].t()  # tied head
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="sum"), balance


def read_checkpoint(step_dir, dtype):
    """The parameter tensors (not the Adam moments) of a committed step, whole."""
    with h5py.File(os.path.join(step_dir, "index.h5"), "r") as f:
        names = [str(n) for n in f.attrs["tensor_names"] if not str(n).startswith("adam.")]
        return {n: torch.tensor(np.asarray(f[n]), dtype=dtype) for n in names}


def latest_step_dir(ckpt_dir):
    with open(os.path.join(ckpt_dir, "latest")) as f:
        return os.path.join(ckpt_dir, f.read().strip())


def torch_run(init, job, tokens, steps):
    """Trains from `init` (in its dtype) for `steps` steps; returns per-step (loss, grad norm, lr,
    balance loss, smallest routing margin) and the final weights."""
    m, t = job["model"], job["training"]
    T, B = m["sequence"], t["global_batch"]
    moe = m["experts"] > 0
    # An MoE model's balance loss is over the global batch (one micro-batch per rank): one pass.
    mb = B if moe else max(d for d in range(1, min(t["micro_batch"], B) + 1) if B % d == 0)
    P = {n: v.clone().requires_grad_(True) for n, v in init.items()}
    groups = [
        {"params": [P[n] for n in P if decayed(n, P[n].shape)], "weight_decay": t["weight_decay"]},
        {"params": [P[n] for n in P if not decayed(n, P[n].shape)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=t["lr"], betas=(t["beta1"], t["beta2"]), eps=t["eps"])
    order = SampleOrder(t["seed"], len(tokens), T)
    history = []
    for step in range(steps):
        windows = np.stack([tokens[order.start(step * B + i):][:T + 1] for i in range(B)])
        inputs, targets = torch.from_numpy(windows[:, :T]), torch.from_numpy(windows[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss_sum, balance_sum, margins = 0.0, 0.0, []
        for i in range(0, B, mb):
            loss, balance = gpt_loss_sum(P, m, inputs[i:i + mb], targets[i:i + mb], margins)
            total = loss / (B * T)
            if moe:
                total = total + balance
                balance_sum += float(balance)
            total.backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), t["grad_clip"]) if t["grad_clip"] > 0 else None
        lr = learning_rate(t, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        history.append((loss_sum / (B * T), float(norm) if norm is not None else float("nan"), lr, balance_sum,
                        min(margins, default=float("inf"))))
    return history, {n: v.detach() for n, v in P.items()}


# ---- running axonn

def run_axonn(axonn, job_path, work, ranks, layout, overrides, extra=()):
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env.pop("AXONN_LAYOUT", None)
    if layout:
        env["AXONN_LAYOUT"] = layout
    cmd = [axonn, "run", "-n", str(ranks), job_path, *extra, *overrides]
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"reference_check: {' '.join(cmd)} (in {work}) failed with {out.returncode}:\n"
                 f"{out.stdout}{out.stderr}")
    return cmd


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_job(path, settings=()):
    """The job's model and training sections with their defaults, then each `section.key=value`
    of settings applied (the value in TOML syntax, as axonn's own overrides take it)."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    job = {"model": {**MODEL_DEFAULTS, **raw.get("model", {})},
           "training": {**TRAINING_DEFAULTS, **raw.get("training", {})}}
    for setting in settings:
        key, _, value = setting.partition("=")
        section, _, name = key.partition(".")
        if section in job:
            job[section][name] = toml_value(value)
    return job


def toml_value(text):
    """A TOML value, else the text itself: `block` as well as `"block"`, as axonn reads it."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def weight_diff(mine, ref):
    """Max |mine - ref| over every tensor, and the largest such difference relative to its
    tensor's largest magnitude, with that tensor's name."""
    worst_abs, worst_rel, worst_name = 0.0, 0.0, ""
    for name, r in ref.items():
        diff = float((mine[name].double() - r.double()).abs().max())
        rel = diff / max(float(r.abs().max()), 1e-30)
        worst_abs = max(worst_abs, diff)
        if rel > worst_rel:
            worst_rel, worst_name = rel, name
    return worst_abs, worst_rel, worst_name


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--axonn", default=os.path.join(REPO, "build", "bin", "axonn"))
    ap.add_argument("--job", default=os.path.join(REPO, "job_templates", "tiny.toml"))
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3", help="training text, one token per byte")
    ap.add_argument("--steps", type=int, default=0, help="default: the job's training.steps")
    ap.add_argument("--layout", action="append",
                    help="DxXxYxZ, or DxXxYxZeN with N-way expert parallelism; repeatable "
                         "(default: 1x1x1x1 and 2x1x2x1)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a job setting for every run (and the reference, where it changes the math), e.g. "
                         "training.recompute=block; repeatable")
    ap.add_argument("--work", help="directory for the runs (default: a temporary one, removed)")
    ap.add_argument("--slack", type=float, default=2.0,
                    help="pass when ours is within SLACK x PyTorch float32's distance from the float64 reference")
    args = ap.parse_args()
    if not os.access(args.axonn, os.X_OK):
        ap.error(f"{args.axonn} is not an executable; build it (cmake --build build --target axonn) or pass --axonn")
    layouts = args.layout or ["1x1x1x1", "2x1x2x1"]
    job = load_job(args.job, args.set)
    steps = args.steps or job["training"]["steps"]
    job["training"]["steps"] = steps
    moe = job["model"]["experts"] > 0
    sizes = {}
    for layout in layouts:
        dims, _, experts = layout.split(":")[0].partition("e")
        try:
            sizes[layout] = [int(v) for v in dims.split("x")]
            int(experts or 1)
        except ValueError:
            ap.error(f"--layout {layout}: expected DxXxYxZ or DxXxYxZeN")
        if len(sizes[layout]) != 4:
            ap.error(f"--layout {layout}: expected DxXxYxZ or DxXxYxZeN")
        share = job["training"]["global_batch"] // max(1, sizes[layout][0] * sizes[layout][3])
        if moe and job["training"]["micro_batch"] < share:
            ap.error(f"--layout {layout}: each rank would run several micro-batches of its {share} sequences "
                     f"(micro_batch {job['training']['micro_batch']}), so the balance loss would be taken per "
                     f"micro-batch, which the reference does not model; set training.micro_batch >= {share}")
    torch.set_num_threads(1)
    with open(args.text, "rb") as f:
        tokens = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)

    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="axonn-refcheck-")
    work = os.path.abspath(args.work or tmp.name)
    overrides = [f"data.path={os.path.abspath(args.text)}", "data.format=text", "checkpoint.dir=ckpt",
                 "checkpoint.interval=0", "run.dir=run", f"training.steps={steps}", *args.set]
    job_path = os.path.abspath(args.job)
    m, t = job["model"], job["training"]
    print(f"job {args.job}: {m['layers']} layers, hidden {m['hidden']}, {m['heads']} heads, vocab {m['vocab']}, "
          f"sequence {m['sequence']}; batch {t['global_batch']} (micro {t['micro_batch']}), {steps} steps, "
          f"lr {t['lr']:g} -> {t['min_lr']:g}, clip {t['grad_clip']:g}, wd {t['weight_decay']:g}")
    if moe:
        print(f"mixture of experts: {m['experts']} experts, top {m['top_k']}, every {m['moe_every']} block(s), "
              f"capacity factor {m['capacity_factor']:g} ("
              f"{f'{capacity_per_sequence(m)} pairs per expert and sequence' if capacity_per_sequence(m) else 'dropless'}"
              f"), balance loss weight {m['aux_loss_weight']:g}")
    print(f"data: {args.text} ({len(tokens)} bytes = tokens, {(len(tokens) - 1) // m['sequence']} samples)")

    cmd = run_axonn(args.axonn, job_path, os.path.join(work, "init"), 1, "1x1x1x1", overrides, ["--init-only"])
    print("initial weights: axonn " + " ".join(cmd[1:]))
    init_dir = latest_step_dir(os.path.join(work, "init", "ckpt"))
    # The reference runs in float64. PyTorch in float32 is the yardstick: its distance from the
    # reference is what float32 rounding alone does to this run (loss spikes amplify it).
    ref, ref_final = torch_run(read_checkpoint(init_dir, torch.float64), job, tokens, steps)
    f32, f32_final = torch_run(read_checkpoint(init_dir, torch.float32), job, tokens, steps)
    print(f"reference: PyTorch {torch.__version__} in float64; yardstick: the same in float32 (t32)")
    if moe:
        margin = min(row[4] for row in ref)
        print(f"routing: the reference's smallest margin between a kept and a passed-over expert's probability "
              f"is {margin:.1e} (a rounding difference that large would flip a choice)")

    ok = True
    for layout in layouts:
        ranks = math.prod(sizes[layout])
        run_dir = os.path.join(work, layout)
        cmd = run_axonn(args.axonn, job_path, run_dir, ranks, layout, overrides)
        ours = read_metrics(os.path.join(run_dir, "run", "metrics.jsonl"))
        if len(ours) != steps:
            sys.exit(f"reference_check: {layout}: metrics.jsonl has {len(ours)} steps, expected {steps}")
        print(f"\nAXONN_LAYOUT={layout} axonn {' '.join(cmd[1:])}")
        print(f"{'step':>5} {'loss ref':>10} {'ours abs':>9} {'ours rel':>9} {'t32 rel':>9}   "
              f"{'gnorm ref':>10} {'ours rel':>9} {'t32 rel':>9}" +
              (f"   {'balance ref':>11} {'ours rel':>9} {'t32 rel':>9}" if moe else ""))
        worst = {"abs": 0.0, "rel": 0.0, "t32_abs": 0.0, "t32_rel": 0.0, "vs32": 0.0, "lr": 0.0,
                 "bal_rel": 0.0, "bal_t32_rel": 0.0}
        for row, (loss, gnorm, lr, balance, _), (loss32, gnorm32, _, balance32, _) in zip(ours, ref, f32):
            d, d32 = abs(row["loss"] - loss), abs(loss32 - loss)
            worst["abs"], worst["rel"] = max(worst["abs"], d), max(worst["rel"], d / loss)
            worst["t32_abs"], worst["t32_rel"] = max(worst["t32_abs"], d32), max(worst["t32_rel"], d32 / loss)
            worst["vs32"] = max(worst["vs32"], abs(row["loss"] - loss32))
            worst["lr"] = max(worst["lr"], abs(row["lr"] - lr) / lr)
            line = (f"{row['step']:>5} {loss:>10.6f} {d:>9.1e} {d / loss:>9.1e} {d32 / loss:>9.1e}   {gnorm:>10.6f} "
                    f"{abs(row['grad_norm'] - gnorm) / gnorm:>9.1e} {abs(gnorm32 - gnorm) / gnorm:>9.1e}")
            if moe:
                b_rel, b32_rel = abs(row["balance_loss"] - balance) / balance, abs(balance32 - balance) / balance
                worst["bal_rel"], worst["bal_t32_rel"] = max(worst["bal_rel"], b_rel), max(worst["bal_t32_rel"], b32_rel)
                line += f"   {balance:>11.8f} {b_rel:>9.1e} {b32_rel:>9.1e}"
            print(line)
        mine = read_checkpoint(latest_step_dir(os.path.join(run_dir, "ckpt")), torch.float64)
        w_abs, w_rel, w_name = weight_diff(mine, ref_final)
        w32_abs, w32_rel, _ = weight_diff(f32_final, ref_final)
        vs32_abs, _, _ = weight_diff(mine, f32_final)
        print(f"loss, max over {steps} steps: ours abs {worst['abs']:.2e} rel {worst['rel']:.2e}; "
              f"PyTorch float32 abs {worst['t32_abs']:.2e} rel {worst['t32_rel']:.2e} (lr schedule rel "
              f"{worst['lr']:.1e})")
        print(f"final weights, max abs diff: ours {w_abs:.2e} (relative to the tensor's largest magnitude "
              f"{w_rel:.2e}, {w_name}); PyTorch float32 {w32_abs:.2e} ({w32_rel:.2e})")
        print(f"ours vs PyTorch float32 directly: loss max abs diff {worst['vs32']:.2e}, final weights {vs32_abs:.2e}")
        if moe:
            print(f"balance loss, max rel diff: ours {worst['bal_rel']:.2e}; PyTorch float32 {worst['bal_t32_rel']:.2e}")
        ok &= worst["rel"] <= args.slack * worst["t32_rel"] + 1e-6 and w_abs <= args.slack * w32_abs + 1e-6
        # The balance loss is a few float32 sums: a few ulp (1e-6 relative) is its resolution.
        ok &= not moe or worst["bal_rel"] <= args.slack * worst["bal_t32_rel"] + 1e-6
    print(f"\n{'ok' if ok else 'FAILED'}: ours within {args.slack:g}x PyTorch float32's distance from the float64 "
          f"reference (losses{', balance losses' if moe else ''} and final weights)")
    if tmp:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
