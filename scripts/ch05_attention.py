"""Chapter 5: gated attention.
Causality, grouped KV heads, the output gate, and one head's attention pattern."""
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.attention import Attention
from qwen.embedding import Embedding
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding, apply_rope
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
i = cfg.layer_types.index("full_attention")  # the first attention layer
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, f"layers.{i}.input_layernorm.")
attn = load(Attention(cfg), W, f"layers.{i}.self_attn.")
rope = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)

text = "The cat sat on the mat because the cat was tired."
ids = torch.tensor([tok.encode(text).ids])
T = ids.shape[1]
x = norm(emb(ids))                           # this layer's input, without the layers before it
cos, sin = rope(torch.arange(T))
y = attn(x, cos, sin)
print(f"layer {i}: {tuple(x.shape)} -> {tuple(y.shape)}; "
      f"{attn.n_head} query heads share {attn.n_kv_head} KV heads of {attn.head_dim} dims")
print(f"q_proj {tuple(attn.q_proj.weight.shape)}: "
      f"per head {attn.head_dim} query rows, then {attn.head_dim} gate rows")

changed = ids.clone()
changed[0, -1] = tok.encode(" dog").ids[0]   # change the last token only
y2 = attn(norm(emb(changed)), cos, sin)
print("causal: changing the last token moves earlier outputs by",
      (y2[:, :-1] - y[:, :-1]).abs().max().item(),
      "and the last by", f"{(y2[:, -1] - y[:, -1]).abs().max():.2f}")

B, nh, hd = 1, attn.n_head, attn.head_dim
q, gate = attn.q_proj(x).view(B, T, nh, 2 * hd).chunk(2, dim=-1)
gate = torch.sigmoid(gate)                   # [B, T, nh, hd], 0 shuts a channel, 1 lets it through
print(f"output gate: mean {gate.mean():.2f}; "
      f"{(gate < 0.1).float().mean():.0%} of channels below 0.1, "
      f"{(gate > 0.9).float().mean():.0%} above 0.9")

# [B, nh, T, hd], the steps of Attention.forward
q = apply_rope(attn.q_norm(q).transpose(1, 2), cos, sin)
k = apply_rope(attn.k_norm(attn.k_proj(x).view(B, T, -1, hd)).transpose(1, 2), cos, sin)
k = k.repeat_interleave(nh // attn.n_kv_head, dim=1)
att = (q @ k.transpose(-2, -1)) * hd**-0.5
att = (att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
       .softmax(-1)[0])                      # [nh, T, T]
first = att[:, 1:, 0].mean(-1)               # attention every later token pays to the first one
print("share of attention on the first token, per head:", " ".join(f"{s:.2f}" for s in first))
kv = 2 * attn.n_kv_head * hd * 2             # keys and values, bf16 bytes per token per layer
print(f"KV cache per token and layer in bf16: {kv:,} bytes; "
      f"with one KV head per query head it would be {kv * nh // attn.n_kv_head:,}")
record(attn_layer=i, gate_mean=f"{gate.mean():.2f}", kv_bytes=f"{kv:,}",
       gqa_factor=nh // attn.n_kv_head, n_heads=nh, n_kv_heads=attn.n_kv_head, head_dim=hd)
official = Config.load(Path("book/data/qwen3.5-0.8b"))    # the 0.8B's config.json, in the repo
record(official_gqa_factor=official.num_attention_heads // official.num_key_value_heads)
labels = [tok.decode([t]) for t in ids[0].tolist()]
h = int(first.argmin())                      # the head that looks least at the first token


def draw(t):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.imshow(att[h], cmap="Blues", vmin=0)
    ax.set_xticks(range(T), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(T), labels, fontsize=8)
    ax.set_xlabel(t("被看的 token（key）", "attended token (key)"))
    ax.set_ylabel(t("提问的 token（query）", "attending token (query)"))
    ax.set_title(t(f"第 {i} 层第 {h} 个头的注意力权重",
                   f"Attention weights, layer {i}, head {h}"))
    return fig


save_figure("ch05_attention_pattern", draw)
