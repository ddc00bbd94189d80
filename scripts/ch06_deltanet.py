"""Chapter 6: Gated DeltaNet, the recurrent form.
A memory of fixed size that forgets, and writes only its error."""
import math

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.deltanet import GatedDeltaNet, recurrent_gated_delta_rule
from qwen.embedding import Embedding
from qwen.norm import RMSNorm
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)
torch.manual_seed(0)
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, "layers.0.input_layernorm.")
gdn = load(GatedDeltaNet(cfg), W, "layers.0.linear_attn.")
H, dk, dv = gdn.n_v_head, gdn.k_dim, gdn.v_dim
linear = [i for i, t in enumerate(cfg.layer_types) if t == "linear_attention"]
state_bytes = H * dk * dv * 4
print(f"layer 0: {H} heads, a {dk} x {dv} state per head = "
      f"{state_bytes // 1024:,} KiB in fp32 at any length; "
      f"{len(linear)} DeltaNet layers: {len(linear) * state_bytes // 1024:,} KiB")

# 1. The delta rule is a memory: write key -> value pairs, read a value back with its key.
n = 8
keys = torch.linalg.qr(torch.randn(dk, n))[0].T             # n orthonormal keys     [n, dk]
vals = torch.randn(n, dv)
write = lambda k, v, g, beta, S: recurrent_gated_delta_rule(
    k[None, None], k[None, None], v[None, None], g[None, None], beta[None, None], S)
# no decay, beta = 1: store all 8 pairs
_, S = write(keys, vals, torch.zeros(n), torch.ones(n), None)
print(f"stored {n} pairs; read back with their keys, exact to 1e-5: "
      f"{bool((keys @ S[0, 0] - vals).abs().max() < 1e-5)}")
new = torch.randn(1, dv)
# write key 0 again, with a new value
_, S2 = write(keys[:1], new, torch.zeros(1), torch.ones(1), S)
plain = keys[:1].T @ vals[:1] + keys[:1].T @ new            # linear attention only adds: S += k v^T
print(f"key 0 rewritten: the delta rule returns the new value (error below 1e-5: "
      f"{bool((keys[:1] @ S2[0, 0] - new).norm() < 1e-5)}); "
      f"plain linear attention returns old + new (error {(keys[:1] @ plain - new).norm():.2f})")
half = 0.5 ** (1 / 10)                                      # decay that halves a memory in 10 steps
_, S3 = write(keys, vals, torch.full((n,), math.log(half)), torch.ones(n), None)
# how much of each value is still there
kept = (keys @ S3[0, 0] * vals).sum(-1) / vals.pow(2).sum(-1)
print("with alpha = 0.5^(1/10), what is left of pairs written 7..0 steps ago:",
      " ".join(f"{s:.2f}" for s in kept))

# 2. The real gates: decay alpha = exp(g) and write strength beta, per head, on a sentence.
ids = torch.tensor([tok.encode("The cat sat on the mat because the cat was tired.").ids])
x = norm(emb(ids))
g = -gdn.A_log.exp() * F.softplus(gdn.in_proj_a(x) + gdn.dt_bias)   # [1, T, H] log decay
beta = gdn.in_proj_b(x).sigmoid()
life = math.log(0.5) / g.mean(1)[0]                         # tokens until a memory is halved
print("layer 0, per head on the sentence: half-life in tokens / mean beta")
print("  " + "  ".join(f"{h:.1f}/{b:.2f}" for h, b in zip(life.tolist(), beta.mean(1)[0].tolist())))

neutral = torch.stack([math.log(0.5) / (-W[f"layers.{i}.linear_attn.A_log"].exp()
                                        * F.softplus(W[f"layers.{i}.linear_attn.dt_bias"]))
                       for i in linear])
print(f"all layers at a neutral input (a = 0): half-lives from {neutral.min():.2f} "
      f"to {neutral.max():,.0f} tokens, median {neutral.median():.1f}")
record(state_kib=f"{state_bytes // 1024:,}",
       all_states_kib=f"{len(linear) * state_bytes // 1024:,}",
       halflife_min=f"{neutral.min():.2f}", halflife_max=f"{neutral.max():,.0f}",
       halflife_median=f"{neutral.median():.1f}", n_pairs=n, oldest_age=n - 1,
       oldest_kept=f"{kept[0]:.2f}")


def draw(t):
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    fig, ax = plt.subplots(figsize=(8, 3.8))
    im = ax.imshow(neutral, cmap="viridis", norm=LogNorm(), aspect="auto")
    ax.set_xticks(range(H))
    ax.set_yticks(range(len(linear)), [str(i) for i in linear], fontsize=8)
    ax.set_xlabel(t("头", "head"))
    ax.set_ylabel(t("层", "layer"))
    ax.set_title(t("每个 DeltaNet 头的记忆半衰期（token，a = 0 时）",
                   "Memory half-life of each DeltaNet head (tokens, at a = 0)"))
    fig.colorbar(im, ax=ax, label=t("半衰期（token）", "half-life (tokens)"))
    return fig


save_figure("ch06_decay_gates", draw)
