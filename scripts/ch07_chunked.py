"""Chapter 7: Gated DeltaNet, the chunked form.
Same numbers as the recurrence, in T/64 sequential steps."""
from pathlib import Path
from types import SimpleNamespace

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.deltanet import GatedDeltaNet
from qwen.embedding import Embedding
from qwen.norm import RMSNorm
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, "layers.0.input_layernorm.")
gdn = load(GatedDeltaNet(cfg), W, "layers.0.linear_attn.")
H, dk, dv, C = gdn.n_v_head, gdn.k_dim, gdn.v_dim, 64

text = ("A recurrent network reads one token at a time and carries a state from each step "
        "to the next. That is cheap in memory but slow on parallel hardware, because step t "
        "must wait for step t - 1. ") * 4
ids = torch.tensor([tok.encode(text).ids])
T = ids.shape[1]
x = norm(emb(ids))                                          # [1, T, dim]

chunked = gdn(x)                                            # T > 1 and no cache: the chunked form
memory = SimpleNamespace(conv=torch.zeros(1, gdn.conv_dim, gdn.conv_kernel - 1),
                         state=torch.zeros(1, H, dk, dv))
# one token per call: the recurrence
recurrent = torch.cat([gdn(x[:, t:t + 1], memory) for t in range(T)], dim=1)
gap = ((chunked - recurrent).abs().max() / recurrent.abs().max()).item()
print(f"{T} tokens = {-(-T // C)} chunks of {C}: "
      f"chunked and token-by-token outputs agree to 1e-5 of their size: {gap < 1e-5}")
print(f"sequential steps: {T} for the recurrence, {-(-T // C)} for the chunked form")


def flops(T, c=cfg):
    """Multiply-adds x 2 of one layer's mixing kernel over T tokens (projections excluded), at
    config c's sizes."""
    dk, dv, H = c.linear_key_head_dim, c.linear_value_head_dim, c.linear_num_value_heads
    # decay, read k, write, read q: four dk x dv passes
    recurrent = 8 * dk * dv * H * T
    # per chunk: C x C products, two solves, three state products
    chunked = (6 * dk * dv + C * (5 * dk + 3 * dv)) * H * T
    # causal q.k and p.v
    attention = 2 * T * (T + 1) * c.head_dim * c.num_attention_heads
    return recurrent, chunked, attention


cross = next(n for n in range(1, 10**6) if flops(n)[2] > flops(n)[1])
for n in (1024, 32768):
    r, c, a = flops(n)
    print(f"T = {n:>6,}: recurrent {r / 1e9:8.2f} GFLOP, chunked {c / 1e9:8.2f}, "
          f"full attention {a / 1e9:10.2f}")
print(f"one attention layer's kernel costs more than one DeltaNet layer's after {cross:,} tokens")
record(tokens=T, chunks=-(-T // C), crossover=f"{cross:,}", head_k_dim=dk)
official = Config.load(Path("book/data/qwen3.5-0.8b"))    # the same count at the 0.8B's sizes
crossover = next(n for n in range(1, 10**6) if flops(n, official)[2] > flops(n, official)[1])
r, c, a = flops(32768, official)
print(f"at the 0.8B's sizes: attention costs more after {crossover:,} tokens; at T = 32,768 "
      f"recurrent {r / 1e12:.3f} TFLOP, chunked {c / 1e12:.3f}, full attention {a / 1e12:.1f}")
record(official_crossover=f"{crossover:,}", official_attention_tflop=f"{a / 1e12:.1f}",
       official_chunked_tflop=f"{c / 1e12:.3f}", official_attention_x=f"{a / c:.0f}",
       official_recurrent_mflop=f"{r / 32768 / 1e6:.1f}",      # per token, per layer
       official_chunked_mflop=f"{c / 32768 / 1e6:.1f}")
lengths = [2**n for n in range(6, 18)]
cost = {n: flops(n, official) for n in lengths}             # the right panel: the 0.8B's sizes


def draw(t):
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    a.plot(chunked[0, :, 0], lw=1.5, label=t("分块形式", "chunked"))
    a.plot(recurrent[0, :, 0], ".", ms=3, label=t("逐 token 递推", "token by token"))
    for c in range(C, T, C):
        a.axvline(c, color="gray", ls=":", lw=1)
    a.set_xlabel(t("位置（虚线：块边界）", "position (dotted: chunk borders)"))
    a.set_ylabel(t("输出第 0 维", "output, channel 0"))
    a.set_title(t("两种算法，同一个输出", "Two algorithms, one output"))
    a.legend(fontsize=8)
    for i, name in enumerate((t("DeltaNet 递推", "DeltaNet recurrent"),
                              t("DeltaNet 分块", "DeltaNet chunked"),
                              t("完整注意力", "full attention"))):
        b.loglog(lengths, [cost[n][i] for n in lengths], "o-" if i < 2 else "s-", ms=3, label=name)
    b.set_xlabel(t("序列长度 T", "sequence length T"))
    b.set_ylabel(t("一层的浮点运算量", "FLOPs of one layer's kernel"))
    b.set_title(t("Qwen3.5-0.8B 配置：线性 vs 平方", "Qwen3.5-0.8B config: linear vs quadratic"))
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


save_figure("ch07_chunked", draw)
