"""Chapter 1: open the checkpoint, read its config, and count what is inside."""
import json
from collections import Counter
from pathlib import Path

from book.out import record, save_figure
from qwen.weights import Config, find_model, load_weights, parameter_budget

path = find_model()
cfg = Config.load(path)
W = load_weights(path)                                   # name -> tensor, text model only

print(f"hidden {cfg.hidden_size}, MLP {cfg.intermediate_size}, {cfg.num_hidden_layers} layers, "
      f"vocabulary {cfg.vocab_size:,}")
print("layer types:", "".join("L" if t == "linear_attention" else "A" for t in cfg.layer_types),
      "(L = Gated DeltaNet, A = full attention)")
print(f"attention: {cfg.num_attention_heads} query heads, "
      f"{cfg.num_key_value_heads} KV heads of {cfg.head_dim}; "
      f"RoPE theta {cfg.rope_theta:g} on {cfg.partial_rotary_factor:.0%} of each head")

# all names in the file
every = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
kinds = Counter(".".join(n.split(".")[:2]) if n.startswith("model.") else n.split(".")[0]
                for n in every)
print(f"the file holds {len(every)} tensors: "
      + ", ".join(f"{k}.* {v}" for k, v in sorted(kinds.items())))
print(f"we keep the {len(W)} of the text model, stored as {W['embed_tokens.weight'].dtype}")
for name in ("embed_tokens.weight", "layers.0.linear_attn.in_proj_qkv.weight",
             "layers.3.self_attn.q_proj.weight", "layers.3.mlp.down_proj.weight", "norm.weight"):
    print(f"  {name:42} {str(tuple(W[name].shape)):>14}")


def part(name):
    """Which part of the model a tensor belongs to."""
    if not name.startswith("layers."):
        return "embedding" if name.startswith("embed") else "final norm"
    return {"linear_attn": "DeltaNet mixers", "self_attn": "attention mixers", "mlp": "MLPs"}.get(
        name.split(".")[2], "layer norms")


counted = Counter()
for name, t in W.items():
    counted[part(name)] += t.numel()
total = sum(counted.values())
print(f"parameters: {total:,} (the output layer reuses the embedding table, so it adds none)")
for p, n in counted.most_common():
    print(f"  {p:18} {n:>13,}  {n / total:6.1%}")
print("counted from the tensors == computed from the config:",
      dict(counted) == parameter_budget(cfg))

# the official config.json, no weights
official = parameter_budget(Config.load(Path("book/data/qwen3.5-0.8b")))
print(f"Qwen3.5-0.8B from its config.json: {sum(official.values()):,} parameters, "
      f"embedding {official['embedding']:,} ({official['embedding'] / sum(official.values()):.0%})")
record(total_params=f"{total:,}", embedding_share=f"{counted['embedding'] / total:.0%}",
       hidden_size=cfg.hidden_size,
       n_text_tensors=len(W), n_file_tensors=len(every),
       official_total=f"{sum(official.values()):,}",
       official_embedding=f"{official['embedding']:,}")
# per layer, for chapter 9's table: each layer is a mixer, an MLP and two norms
off_cfg = Config.load(Path("book/data/qwen3.5-0.8b"))
n_layers = len(off_cfg.layer_types)
n_full = off_cfg.layer_types.count("full_attention")
per = {"deltanet": official["DeltaNet mixers"] // (n_layers - n_full),
       "attention": official["attention mixers"] // n_full,
       "mlp": official["MLPs"] // n_layers, "norms": official["layer norms"] // n_layers}
layers = {"deltanet": (n_layers - n_full) * (per["deltanet"] + per["mlp"] + per["norms"]),
          "attention": n_full * (per["attention"] + per["mlp"] + per["norms"])}
off_total = sum(official.values())
record(official_n_deltanet=n_layers - n_full, official_n_attention=n_full,
       official_final_norm=f"{official['final norm']:,}",
       official_layer_norms=f"{official['layer norms']:,}",
       official_embedding_share=f"{official['embedding'] / off_total:.0%}",
       **{f"official_{k}_per_layer": f"{n:,}" for k, n in per.items()},
       **{f"official_{k}_layers": f"{n:,}" for k, n in layers.items()},
       **{f"official_{k}_layers_share": f"{n / off_total:.0%}" for k, n in layers.items()})


def draw(t):
    import matplotlib.pyplot as plt
    labels = {"embedding": t("嵌入表（与输出层共用）",
                             "embedding (shared with the output layer)"),
              "DeltaNet mixers": t("18 个 DeltaNet 混合层", "18 DeltaNet mixers"),
              "attention mixers": t("6 个注意力混合层", "6 attention mixers"),
              "MLPs": t("24 个 MLP", "24 MLPs"),
              "layer norms": t("层内 RMSNorm", "layer norms"),
              "final norm": t("最后的 RMSNorm", "final norm")}
    parts = sorted(official.items(), key=lambda kv: kv[1])
    total = sum(official.values())
    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    ax.barh([labels[p] for p, _ in parts], [n / 1e6 for _, n in parts], color="#3f51b5")
    for i, (_, n) in enumerate(parts):
        count = f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,}"      # the norms: a few thousand
        ax.text(n / 1e6, i, f" {count}  {100 * n / total:.3g}%", va="center", fontsize=9)
    ax.set_xlabel(t("参数量（百万）", "parameters (millions)"))
    ax.set_xlim(0, max(official.values()) / 1e6 * 1.3)
    ax.set_title(t(f"Qwen3.5-0.8B 的 {total / 1e6:.0f}M 参数花在哪里"
                   "（由 config.json 算出）",
                   f"Where the {total / 1e6:.0f}M parameters of Qwen3.5-0.8B go "
                   "(computed from config.json)"))
    ax.spines[["top", "right"]].set_visible(False)
    return fig


save_figure("ch01_budget", draw)
