"""Chapter 4: RoPE. Which dims turn, how fast, and why the score then depends only on distance."""
import math
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.embedding import Embedding
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding, apply_rope
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)                              # we only run the parts, never train them
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
rope = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)
rot = 2 * rope.inv_freq.numel()
wavelength = 2 * math.pi / rope.inv_freq                   # tokens for one full turn, per frequency
print(f"head_dim {cfg.head_dim}: the first {rot} dims turn ({rot // 2} frequencies), "
      f"the other {cfg.head_dim - rot} never do")
print(f"theta {cfg.rope_theta:g}: one turn takes {wavelength[0]:.1f} tokens at the fastest "
      f"frequency, {wavelength[-1]:,.0f} at the slowest")
for m in range(0, rot // 2, max(1, rot // 16)):
    print(f"  pair {m:2}: dims ({m}, {m + rot // 2}), {wavelength[m]:>14,.1f} tokens per turn")

# Real queries and keys: the first attention layer's projections and norms, on embedded text.
i = cfg.layer_types.index("full_attention")
L = f"layers.{i}.self_attn."
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
q_norm = load(RMSNorm(cfg.head_dim, cfg.rms_norm_eps), W, L + "q_norm.")
k_norm = load(RMSNorm(cfg.head_dim, cfg.rms_norm_eps), W, L + "k_norm.")
x = emb(torch.tensor([tok.encode("Rotary embeddings encode where a token sits.").ids]))[0]
T = x.shape[0]                                             # x: [T, dim]
# head 0's query, and its KV head
q = q_norm((x @ W[L + "q_proj.weight"].T).view(T, -1, 2 * cfg.head_dim)[:, 0, :cfg.head_dim])
k = k_norm((x @ W[L + "k_proj.weight"].T).view(T, -1, cfg.head_dim)[:, 0])


def scores(start):
    """q_i . k_j of every pair, with the tokens placed at positions start, start + 1, ..."""
    cos, sin = rope(torch.arange(start, start + T))
    return apply_rope(q, cos, sin) @ apply_rope(k, cos, sin).T


shift = (scores(1000) - scores(0)).abs().max() / scores(0).abs().max()
print(f"{T} tokens moved from position 0 to 1000: do the q.k scores stay "
      f"(to 1e-5 of their size)? {bool(shift < 1e-5)}")
cos, sin = rope(torch.arange(T))
print("dims past the rotary part pass through unchanged:",
      torch.equal(apply_rope(q, cos, sin)[:, rot:], q[:, rot:]))

# one query dotted with itself placed d tokens later; at position 0 nothing turns
dist = torch.arange(2049)
same = apply_rope(q[:1].expand(len(dist), -1), *rope(dist)) @ q[0]
record(head_dim=cfg.head_dim, rotary_dims=rot, n_freq=rot // 2, fastest_turn=f"{wavelength[0]:.1f}",
       slowest_turn=f"{wavelength[-1]:,.0f}")
official = Config.load(Path("book/data/qwen3.5-0.8b"))    # the 0.8B's config.json, in the repo
official_rope = RotaryEmbedding(official.head_dim, official.partial_rotary_factor,
                                official.rope_theta)
# the left plot draws the 0.8B's frequencies, whichever model the script runs on
official_wavelength = 2 * math.pi / official_rope.inv_freq
record(official_head_dim=official.head_dim, official_rotary_dims=2 * official_rope.inv_freq.numel(),
       official_n_freq=official_rope.inv_freq.numel(),
       official_slowest_turn=f"{2 * math.pi / official_rope.inv_freq[-1].item():,.0f}")


def draw(t):
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    n, longest = len(official_wavelength), official.max_position_embeddings
    a.semilogy(range(n), official_wavelength, "o-", ms=3)
    for at, label in ((2048, "2K"), (longest, f"{longest // 1024}K")):
        a.axhline(at, color="gray", ls=":", lw=1)
        a.text(0, at, " " + label, va="bottom", fontsize=8, color="gray")
    a.set_xlabel(t("频率编号 m", "frequency index m"))
    a.set_ylabel(t("转一圈需要的 token 数", "tokens per full turn"))
    a.set_title(t(f"Qwen3.5-0.8B 配置：{n} 个旋转频率（θ = {official.rope_theta:,.0f}）",
                  f"Qwen3.5-0.8B config: {n} frequencies (θ = {official.rope_theta:,.0f})"),
                fontsize=10)
    b.plot(dist, same, lw=0.6)
    b.set_xlabel(t("距离（token）", "distance (tokens)"))
    b.set_ylabel("q · R(d) q")
    b.set_title(t("同一个向量相隔 d 个位置的点积",
                  "One query dotted with itself, d positions apart"))
    for ax in (a, b):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


save_figure("ch04_rope_frequencies", draw)
