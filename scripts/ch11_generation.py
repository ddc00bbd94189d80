"""Chapter 11: generation. Greedy and sampled continuations, and what the cache costs per token."""
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from book.tiny import is_tiny
from qwen.cache import Cache
from qwen.generate import generate
from qwen.model import from_pretrained
from qwen.weights import Config, find_model

torch.manual_seed(0)
path = find_model()
model = from_pretrained(path, torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
if is_tiny(path):
    print("(the tiny test model: its weights are random, so its text is random too)\n")

prompt = "The capital of France is"
ids = tok.encode(prompt).ids
greedy = list(generate(model, ids, 16))
print(f"greedy:       {prompt}|{tok.decode(greedy)!r}")
sampling = dict(temperature=0.8, top_k=20, top_p=0.95)
sampled = {seed: list(generate(model, ids, 16, **sampling, seed=seed)) for seed in (0, 1, 2)}
for seed, out in sampled.items():
    print(f"seed {seed}, T 0.8: {prompt}|{tok.decode(out)!r}")
print("seed 0 again gives the same tokens:",
      list(generate(model, ids, 16, **sampling, seed=0)) == sampled[0])

# The cache by hand: prefill the prompt, decode one token per call, and weigh the cache after each.
cache, sizes = Cache(model.cfg), []
with torch.no_grad():
    logits = model(torch.tensor([ids]), cache=cache)
    sizes.append((cache.seq_len, cache.nbytes()))
    for _ in range(32):
        # [1, 1]: the greedy token goes back in
        logits = model(logits[:, -1:].argmax(-1), cache=cache)
        sizes.append((cache.seq_len, cache.nbytes()))
(t0, first), (t1, last) = sizes[0], sizes[-1]
kv_per_token = (last["kv"] - first["kv"]) / (t1 - t0)
dn = last["deltanet"]
assert all(s["deltanet"] == dn for _, s in sizes), "the DeltaNet state must not grow"
n_attn = model.cfg.layer_types.count("full_attention")
print(f"\ncache after {t0} prompt tokens and after {t1}: "
      f"KV {first['kv']:,} -> {last['kv']:,} bytes, "
      f"DeltaNet {first['deltanet']:,} -> {dn:,} bytes")
print(f"KV cache: {kv_per_token:,.0f} bytes per token "
      f"({n_attn} attention layers, keys and values, fp32)")
print(f"DeltaNet states: {dn:,} bytes at any length ({len(model.cfg.layer_types) - n_attn} layers)")
longest = model.cfg.max_position_embeddings
print(f"the KV cache outgrows the DeltaNet states after {dn / kv_per_token:,.0f} tokens; "
      f"at {longest:,} tokens it holds {kv_per_token * longest / 2**30:.1f} GiB")
all_attn = kv_per_token * len(model.cfg.layer_types) / n_attn
print(f"were all {len(model.cfg.layer_types)} layers attention: {all_attn:,.0f} bytes per token")
record(kv_bytes_per_token=f"{kv_per_token:,.0f}", deltanet_bytes=f"{dn:,}",
       crossover_tokens=f"{dn / kv_per_token:,.0f}",
       kv_gib_at_max=f"{kv_per_token * longest / 2**30:.1f}")
c = model.cfg                                       # the factors of the two sizes, for the formulas
record(n_attn_layers=n_attn, n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
       n_deltanet_layers=len(c.layer_types) - n_attn, n_v_heads=c.linear_num_value_heads,
       k_dim=c.linear_key_head_dim, v_dim=c.linear_value_head_dim,
       conv_channels=cache.layers[0].conv.shape[1], conv_cols=cache.layers[0].conv.shape[2],
       value_bytes=torch.finfo(torch.float32).bits // 8, grown_tokens=t1 - t0,
       all_attn_factor=f"{len(c.layer_types) / n_attn:g}")


def cache_bytes(c, b):
    """The two formulas for config c, b bytes a value: KV bytes per token, DeltaNet bytes."""
    n_attn = c.layer_types.count("full_attention")
    conv = (2 * c.linear_num_key_heads * c.linear_key_head_dim  # q | k | v channels
            + c.linear_num_value_heads * c.linear_value_head_dim)
    state = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4  # fp32
    kv = 2 * n_attn * c.num_key_value_heads * c.head_dim * b
    return kv, (len(c.layer_types) - n_attn) * (state + conv * (c.linear_conv_kernel_dim - 1) * b)


print("the formulas give the bytes measured above:", cache_bytes(c, 4) == (kv_per_token, dn))
# The same formulas at the 0.8B's sizes, as it runs: bf16 keys, values and conv inputs.
official = Config.load(Path("book/data/qwen3.5-0.8b"))    # the 0.8B's config.json, in the repo
kv08, dn08 = cache_bytes(official, 2)
n08 = official.max_position_embeddings
all08 = kv08 * len(official.layer_types) / official.layer_types.count("full_attention")
print(f"Qwen3.5-0.8B in bf16: KV {kv08:,} bytes per token, DeltaNet {dn08:,} bytes; "
      f"the KV cache outgrows them after {dn08 / kv08:,.0f} tokens, "
      f"at {n08:,} tokens it holds {kv08 * n08 / 2**30:g} GiB")
record(official_kv_kib=f"{kv08 / 2**10:g}", official_deltanet_mib=f"{dn08 / 2**20:.1f}",
       official_crossover=f"{dn08 / kv08:,.0f}", official_kv_gib_at_max=f"{kv08 * n08 / 2**30:g}",
       official_all_attn_kib=f"{all08 / 2**10:g}", official_all_attn_factor=f"{all08 / kv08:g}")


def draw(t):
    import matplotlib.pyplot as plt
    T = torch.linspace(0, 6144, 97)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(T, T * kv08 / 2**20, label=t("KV 缓存（注意力层）", "KV cache (attention layers)"))
    ax.plot(T, torch.full_like(T, dn08 / 2**20), label=t("DeltaNet 状态", "DeltaNet states"))
    ax.plot(T, T * all08 / 2**20, "--",
            label=t("假如每层都是注意力", "if every layer were attention"))
    ax.axvline(dn08 / kv08, color="gray", ls=":", lw=1)
    ax.text(dn08 / kv08, 0, f" {dn08 / kv08:,.0f}", color="gray", fontsize=8, va="bottom")
    ax.set_ylim(0, T[-1] * kv08 / 2**20 * 1.1)            # the dashed line leaves at the top
    ax.set_xlabel(t("已读词元数", "tokens seen"))
    ax.set_ylabel("MiB")
    ax.set_title(t("Qwen3.5-0.8B 配置，bf16（DeltaNet 状态为 fp32）",
                   "Qwen3.5-0.8B config, bf16 (DeltaNet states in fp32)"), fontsize=10)
    ax.legend(fontsize=8, loc="upper center")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


save_figure("ch11_cache_memory", draw)
