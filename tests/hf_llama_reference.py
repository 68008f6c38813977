#!/usr/bin/env python3
"""A small Llama in Hugging Face's on-disk form, and its loss from a plain PyTorch forward.

    hf_llama_reference.py make DIR [--dtype f32|bf16] [--shards N] [--seed S]
        DIR/config.json                      LlamaForCausalLM, Llama 3.1's rope scaling
        DIR/model.safetensors, or N shards   random weights as transformers saves them:
          model-0000i-of-0000N.safetensors     [out, in] linears, q_proj/k_proj rows permuted
          + model.safetensors.index.json       for rotate-half RoPE (Meta's conversion script)
        DIR/tokens.bin                       nanoGPT uint16 tokens: exactly BATCH samples
        DIR/reference.json                   {"loss": mean next-token cross-entropy over them}

    hf_llama_reference.py loss DIR           prints the loss of DIR's weights (any model
                                             directory in this form, e.g. an export) on
                                             DIR/tokens.bin, or on --tokens FILE

The forward is written here for the test, from the published architecture (RMSNorm, SwiGLU,
rotate-half RoPE with Llama 3.1's frequency scaling, grouped-query attention, untied head),
in float64, reading safetensors with nothing but json and numpy: it shares no code with
axonn or with transformers. The shapes are the test's (tests/test_hf_llama_cli.cpp).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQUENCE, BATCH = 2, 32, 4, 2, 48, 64, 16, 4
THETA, EPS = 500000.0, 1e-5
SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}


def config():
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "num_hidden_layers": LAYERS, "vocab_size": VOCAB,
        "max_position_embeddings": 131072, "rms_norm_eps": EPS, "rope_theta": THETA,
        "rope_scaling": SCALING, "tie_word_embeddings": False, "attention_bias": False,
        "mlp_bias": False, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
        "initializer_range": 0.02,
    }


def to_hf_rotary(w, heads):
    """Meta's interleaved q/k rows -> Hugging Face's rotate-half rows, as Meta's
    convert_llama_weights_to_hf.py permutes them."""
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, w.shape[1]).transpose(1, 2).reshape(heads * d, w.shape[1])


def random_weights(seed):
    g = torch.Generator().manual_seed(seed)
    d = HIDDEN // HEADS

    def normal(*shape, std=0.2):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    w = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN, std=1.0)}
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        w[p + "self_attn.q_proj.weight"] = to_hf_rotary(normal(HEADS * d, HIDDEN), HEADS)
        w[p + "self_attn.k_proj.weight"] = to_hf_rotary(normal(KV_HEADS * d, HIDDEN), KV_HEADS)
        w[p + "self_attn.v_proj.weight"] = normal(KV_HEADS * d, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * d)
        w[p + "mlp.gate_proj.weight"] = normal(FFN, HIDDEN)
        w[p + "mlp.up_proj.weight"] = normal(FFN, HIDDEN)
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, FFN)
        w[p + "input_layernorm.weight"] = 1.0 + normal(HIDDEN, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1.0 + normal(HIDDEN, std=0.1)
    w["model.norm.weight"] = 1.0 + normal(HIDDEN, std=0.1)
    w["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return w


DTYPES = {"f32": ("F32", torch.float32, torch.int32), "bf16": ("BF16", torch.bfloat16, torch.int16)}


def write_safetensors(path, tensors, dtype):
    """The format: u64 header length, JSON header padded with spaces to 8 bytes, data."""
    name, torch_dtype, bits = DTYPES[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for key, t in tensors.items():
        blob = t.to(torch_dtype).contiguous().view(bits).numpy().tobytes()
        header[key] = {"dtype": name, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data, out = raw[8 + n:], {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = np.frombuffer(data[begin:end], dtype={"F32": np.float32, "BF16": np.uint16}[info["dtype"]])
        if info["dtype"] == "BF16":  # bfloat16 is float32's upper half
            buf = (buf.astype(np.uint32) << 16).view(np.float32)
        out[key] = torch.from_numpy(buf.astype(np.float64).reshape(info["shape"]))
    return out


def read_model(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(directory, "model.safetensors"))
    weights = {}
    with open(index) as f:
        for shard in sorted(set(json.load(f)["weight_map"].values())):
            weights.update(read_safetensors(os.path.join(directory, shard)))
    return weights


def inverse_frequencies(d):
    inv = 1.0 / THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    s = SCALING
    old, low, high = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"]
    wavelength = 2 * math.pi / inv
    scaled = torch.where(wavelength > old / low, inv / s["factor"], inv)
    smooth = (old / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = (wavelength >= old / high) & (wavelength <= old / low)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rms_norm(x, weight):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * weight


def loss_of(w, tokens):
    """Mean cross-entropy of predicting tokens[:, 1:] from tokens[:, :-1]."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = inputs.shape
    d, group = HIDDEN // HEADS, HEADS // KV_HEADS
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inverse_frequencies(d))
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    causal = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    h = w["model.embed_tokens.weight"][inputs]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        x = rms_norm(h, w[p + "input_layernorm.weight"])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(B, T, HEADS, d).transpose(1, 2)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV_HEADS, d).transpose(1, 2)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV_HEADS, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + causal, dim=-1)
        h = h + (scores @ v).transpose(1, 2).reshape(B, T, HIDDEN) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"])
        gate, up = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    logits = rms_norm(h, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)).item()


def read_tokens(path):
    """BATCH samples of SEQUENCE + 1 tokens, overlapping by one, as axonn's windows read them."""
    tokens = torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))
    return torch.stack([tokens[i * SEQUENCE:i * SEQUENCE + SEQUENCE + 1] for i in range(BATCH)])


def make(args):
    os.makedirs(args.dir, exist_ok=False)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
    weights = random_weights(args.seed)
    names = list(weights)
    if args.shards == 1:
        write_safetensors(os.path.join(args.dir, "model.safetensors"), weights, args.dtype)
    else:
        weight_map, total = {}, 0
        for s in range(args.shards):
            file = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            part = {n: weights[n] for n in names[s::args.shards]}
            write_safetensors(os.path.join(args.dir, file), part, args.dtype)
            for n, t in part.items():
                weight_map[n] = file
                total += t.numel() * (4 if args.dtype == "f32" else 2)
        with open(os.path.join(args.dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    g = torch.Generator().manual_seed(args.seed + 1)
    tokens = torch.randint(0, VOCAB, (BATCH * SEQUENCE + 1,), generator=g)
    tokens.numpy().astype(np.uint16).tofile(os.path.join(args.dir, "tokens.bin"))
    loss = loss_of(read_model(args.dir), read_tokens(os.path.join(args.dir, "tokens.bin")))
    with open(os.path.join(args.dir, "reference.json"), "w") as f:
        json.dump({"loss": loss}, f)
    print(f"{args.dir}: {len(names)} tensors ({args.dtype}, {args.shards} file(s)), reference loss {loss:.9f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--dtype", choices=DTYPES, default="f32")
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--seed", type=int, default=1234)
    l = sub.add_parser("loss")
    l.add_argument("dir")
    l.add_argument("--tokens")
    args = parser.parse_args()
    if args.command == "make":
        make(args)
    else:
        tokens = read_tokens(args.tokens or os.path.join(args.dir, "tokens.bin"))
        print(f"{loss_of(read_model(args.dir), tokens):.9f}")


if __name__ == "__main__":
    sys.exit(main())
