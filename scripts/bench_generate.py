"""Prefill and decode speed (tokens/s) of our model next to transformers', on the same \
machine and weights.

    python scripts/bench_generate.py                         # the tiny test model, fp32
    python scripts/bench_generate.py --size 0.8b --dtype bf16 --prompt-tokens 128 --new-tokens 16

--size 0.8b builds the real Qwen3.5-0.8B shapes with random weights (no download needed; speed
does not depend on the values). Greedy decoding with a cache for both; both compute the prefill
logits of the last position only (transformers: logits_to_keep=1, as its generate does; ours:
last_only=True). Timings vary between runs: not a test.
"""
import argparse
import json
import time

import torch
from transformers import DynamicCache, Qwen3_5ForCausalLM, Qwen3_5TextConfig

from qwen.cache import Cache
from qwen.model import Qwen
from qwen.weights import Config, load, load_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def real_text_config():
    """The text_config of Qwen/Qwen3.5-0.8B (the structure book/tiny.py copies),
    with the real dimensions."""
    layers = (["linear_attention"] * 3 + ["full_attention"]) * 6
    return {"vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584,
            "num_hidden_layers": 24, "layer_types": layers, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 256,
            "linear_num_key_heads": 16, "linear_num_value_heads": 16, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "tie_word_embeddings": True, "max_position_embeddings": 262144,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                                "mrope_interleaved": True}}


@torch.no_grad()
def random_weights(hf, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for name, p in hf.named_parameters():
        if name.endswith("A_log"):
            p.copy_(torch.empty(p.shape).uniform_(1, 16, generator=gen).log())
        elif p.ndim >= 2:
            p.copy_(torch.randn(p.shape, generator=gen) * p[0].numel() ** -0.5)
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return hf


def build(size, dtype):
    """(ours, transformers') with the same weights: the tiny test model's,
    or random ones of the real shapes."""
    if size == "tiny":
        from book.tiny import path
        folder = path()
        text = json.loads((folder / "config.json").read_text())["text_config"]
        hf = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text))
        W = load_weights(folder, torch.float32)
        hf.load_state_dict({"model." + k: v for k, v in W.items()}, strict=False)
    else:
        text = real_text_config()
        hf = random_weights(Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)))
    hf = hf.to(dtype).eval()
    ours = Qwen(Config(**{k: v for k, v in {**text, **text["rope_parameters"]}.items()
                          if k in Config.__dataclass_fields__ and k != "extra"}))
    W = {k.removeprefix("model."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    return load(ours, W).requires_grad_(False), hf


@torch.no_grad()
def speed(step, ids, new_tokens):
    """(prefill tok/s, decode tok/s, tokens) for step(x, state) -> (next id [1, 1], state)."""
    t0 = time.perf_counter()
    x, state = step(ids, None)
    t1 = time.perf_counter()
    out = [int(x)]
    for _ in range(new_tokens - 1):
        x, state = step(x, state)
        out.append(int(x))
    t2 = time.perf_counter()
    return ids.shape[1] / (t1 - t0), (new_tokens - 1) / (t2 - t1), out


def ours_step(model):
    def step(x, cache):
        cache = cache or Cache(model.cfg)
        return model(x, cache=cache, last_only=True)[:, -1:].argmax(-1), cache
    return step


def hf_step(model):
    def step(x, cache):
        cache = cache or DynamicCache(config=model.config)
        logits = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        return logits[:, -1:].argmax(-1), cache
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["tiny", "0.8b"], default="tiny")
    ap.add_argument("--dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ours, hf = build(args.size, DTYPES[args.dtype])
    ids = torch.randint(0, 200_000, (1, args.prompt_tokens),
                        generator=torch.Generator().manual_seed(0))
    print(f"{args.size}, {args.dtype}, {args.threads} CPU threads, "
          f"prompt {args.prompt_tokens} tokens, "
          f"{args.new_tokens} new tokens (best of {args.repeats})")
    results = {}
    for name, step in (("ours", ours_step(ours)), ("transformers", hf_step(hf))):
        speed(step, ids[:, :8], 3)                                  # warm up
        runs = [speed(step, ids, args.new_tokens) for _ in range(args.repeats)]
        results[name] = runs[0][2]
        print(f"  {name:13} prefill {max(r[0] for r in runs):8.1f} tok/s   "
              f"decode {max(r[1] for r in runs):7.2f} tok/s")
    same = results["ours"] == results["transformers"]
    print(f"  same greedy tokens: {same}"
          + ("" if same or args.dtype == "fp32" else " (bf16 rounding may differ)"))


if __name__ == "__main__":
    main()
