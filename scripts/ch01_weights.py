"""Chapter 1: open the checkpoint, read its config, and count what is inside."""
import json
from collections import Counter

from book.out import record, save_figure
from qwen.weights import Config, find_model, load_weights

path = find_model()
cfg = Config.load(path)
W = load_weights(path)                                   # name -> tensor, text model only

print(f"hidden {cfg.hidden_size}, MLP {cfg.intermediate_size}, {cfg.num_hidden_layers} layers, vocabulary {cfg.vocab_size:,}")
print("layer types:", "".join("L" if t == "linear_attention" else "A" for t in cfg.layer_types),
      "(L = Gated DeltaNet, A = full attention)")
print(f"attention: {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} KV heads of {cfg.head_dim}; "
      f"RoPE theta {cfg.rope_theta:g} on {cfg.partial_rotary_factor:.0%} of each head")

every = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]   # all names in the file
kinds = Counter(n.split(".")[0] if not n.startswith("model.") else ".".join(n.split(".")[:2]) for n in every)
print(f"the file holds {len(every)} tensors: " + ", ".join(f"{k}.* {v}" for k, v in sorted(kinds.items())))
print(f"we keep the {len(W)} of the text model, stored as {W['embed_tokens.weight'].dtype}")

for name in ("embed_tokens.weight", "layers.0.linear_attn.in_proj_qkv.weight", "layers.3.self_attn.q_proj.weight",
             "layers.3.mlp.down_proj.weight", "norm.weight"):
    print(f"  {name:42} {str(tuple(W[name].shape)):>14}")


def block(name):
    """Which part of the model a tensor belongs to."""
    if not name.startswith("layers."):
        return "embedding" if name.startswith("embed") else "final norm"
    part = name.split(".")[2]
    return {"linear_attn": "DeltaNet mixers", "self_attn": "attention mixers", "mlp": "MLPs"}.get(part, "layer norms")


budget = Counter()
for name, t in W.items():
    budget[block(name)] += t.numel()
total = sum(budget.values())
print(f"parameters: {total:,} (the output layer reuses the embedding, so it adds none)")
for part, n in budget.most_common():
    print(f"  {part:18} {n:>13,}  {n / total:6.1%}")
record(total_params=f"{total:,}", embedding_share=f"{budget['embedding'] / total:.0%}",
       n_text_tensors=len(W), n_file_tensors=len(every))


def draw(t):
    import matplotlib.pyplot as plt
    labels = {"embedding": t("嵌入表", "embedding"), "DeltaNet mixers": t("DeltaNet 混合层", "DeltaNet mixers"),
              "attention mixers": t("注意力混合层", "attention mixers"), "MLPs": t("MLP", "MLPs"),
              "layer norms": t("层内 RMSNorm", "layer norms"), "final norm": t("最后的 RMSNorm", "final norm")}
    parts = budget.most_common()
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh([labels[p] for p, _ in parts][::-1], [n / 1e6 for _, n in parts][::-1], color="#3f51b5")
    for i, (_, n) in enumerate(parts[::-1]):
        ax.text(n / 1e6, i, f" {n / total:.1%}", va="center", fontsize=9)
    ax.set_xlabel(t("参数量（百万）", "parameters (millions)"))
    ax.set_title(t("参数都花在哪里", "Where the parameters are"))
    ax.spines[["top", "right"]].set_visible(False)
    return fig


save_figure("ch01_budget", draw)
