"""Chapter 19: the chunked gated delta rule's backward by hand.
The gradients of autograd, from the inputs and one state per chunk."""
import copy
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, record_error, save_figure
from qwen.backward import HandDeltaNet, chunk_gated_delta_rule_hand
from qwen.deltanet import GatedDeltaNet, chunk_gated_delta_rule, l2norm
from qwen.embedding import Embedding
from qwen.fast import swap
from qwen.norm import RMSNorm
from qwen.train import SavedBytes
from qwen.weights import Config, find_model, load, load_weights

path = find_model()
cfg = Config.load(path)
dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
NAMES = ("q", "k", "v", "g", "beta", "state")


def inputs(T, state, dtype=torch.float32, B=2, H=2, seed=0):
    """Inputs of the kind the layer makes, at this model's head sizes."""
    gen = torch.Generator().manual_seed(seed)
    xs = [l2norm(torch.randn(B, H, T, dk, generator=gen)) * dk**-0.5,     # q
          l2norm(torch.randn(B, H, T, dk, generator=gen)),                # k
          torch.randn(B, H, T, dv, generator=gen),                        # v
          -torch.rand(B, H, T, generator=gen),                            # g <= 0
          torch.rand(B, H, T, generator=gen),                             # beta in (0, 1)
          torch.randn(B, H, dk, dv, generator=gen) if state else None]    # initial state
    return [None if x is None else x.to(dtype).requires_grad_() for x in xs]


def gradients(rule, xs):
    """d/d(inputs) of a random linear function of (o, final state)."""
    o, S = rule(*xs)
    gen = torch.Generator().manual_seed(1)
    loss = ((o * torch.randn(o.shape, generator=gen).to(o.dtype)).sum()
            + (S * torch.randn(S.shape, generator=gen).to(S.dtype)).sum())
    return torch.autograd.grad(loss, [x for x in xs if x is not None])


def rel(ours, theirs):
    """max |ours - theirs| over the largest |theirs|: the difference at the gradient's own scale."""
    scale = theirs.abs().max().item()
    # a gradient that is 0 in exact arithmetic (g's, for one token and no state) is rounding
    # noise at either precision: compare it absolutely
    return (ours.double() - theirs.double()).abs().max().item() / (scale if scale > 1e-12 else 1.0)


# 1. the hand-written gradients against autograd's, on lengths that are not multiples of 64
print(f"gradients, hand-written vs autograd (fp32), max |diff| / max |autograd|, "
      f"heads of dk = {dk}, dv = {dv}:")
print(f"{'T':>5} {'state':>5}  " + "  ".join(f"{n:>7}" for n in NAMES))
worst, truth_gap = 0.0, {"autograd": 0.0, "hand": 0.0}
for T in (1, 63, 65, 150):
    for state in (False, True):
        xs = inputs(T, state)
        want = gradients(chunk_gated_delta_rule, xs)
        got = gradients(chunk_gated_delta_rule_hand, xs)
        gaps = [rel(a, b) for a, b in zip(got, want)]
        worst = max(worst, *gaps)
        shown = [record_error(f"rel_{T}_{'state' if state else 'none'}_{n}", e, below=1e-5)
                 for n, e in zip(NAMES, gaps)]                  # their digits are the CPU's
        print(f"{T:>5} {'yes' if state else 'no':>5}  " + "  ".join(f"{e:>7}" for e in shown))
        exact = gradients(chunk_gated_delta_rule, [None if x is None else x.detach().double()
                                                   .requires_grad_() for x in xs])
        for name, ours in (("autograd", want), ("hand", got)):
            truth_gap[name] = max(truth_gap[name], *(rel(a, b) for a, b in zip(ours, exact)))
print(f"largest: {record_error('max_rel_grad', worst, below=1e-5)}")
fp32 = record_error("autograd_vs_fp64", truth_gap["autograd"], below=1e-4)
print(f"against float64 autograd: fp32 autograd {fp32}, "
      f"fp32 by hand {record_error('hand_vs_fp64', truth_gap['hand'], below=1e-4)}")

# 2. the model's first DeltaNet layer on real text: every parameter's gradient
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, "layers.0.input_layernorm.")
plain = load(GatedDeltaNet(cfg), W, "layers.0.linear_attn.").requires_grad_(True)
hand = swap(copy.deepcopy(plain), HandDeltaNet)
text = ("The backward pass walks the chunks in reverse. Each chunk recomputes what it needs "
        "from its inputs and the state that entered it, then hands a gradient to the chunk "
        "before. ") * 2
ids = torch.tensor([tok.encode(text).ids])
with torch.no_grad():
    x = norm(emb(ids))
r = torch.randn(1, ids.shape[1], cfg.hidden_size, generator=torch.Generator().manual_seed(2))
for layer in (plain, hand):
    (layer(x) * r).sum().backward()
theirs = dict(plain.named_parameters())
layer_gap = max(rel(p.grad, theirs[n].grad) for n, p in hand.named_parameters())
print(f"\nlayer 0 on {ids.shape[1]} tokens of text: {len(theirs)} parameters, largest gradient "
      f"difference {record_error('layer_rel_grad', layer_gap, below=1e-3)}")
record(layer_tokens=ids.shape[1])

# 3. the bytes kept for the backward, at the 0.8B's DeltaNet shapes (16 heads, dk = dv = 128)
big = Config.load(Path("book/data/qwen3.5-0.8b"))
H0, d0, C = big.linear_num_value_heads, big.linear_key_head_dim, 64


def kept(rule, T, H):
    """Bytes autograd keeps between forward and backward for one call, batch 1."""
    xs = [torch.zeros(1, H, T, d0, requires_grad=True) for _ in range(3)]
    xs += [torch.zeros(1, H, T, requires_grad=True) for _ in range(2)]
    counter = SavedBytes()
    with counter:
        rule(*xs)
    return counter.bytes


MiB = 2**20
lengths = [256, 512, 1024, 2048, 4096]
saved = {T: (kept(chunk_gated_delta_rule, T, H0), kept(chunk_gated_delta_rule_hand, T, H0))
         for T in lengths}
print(f"\nbytes kept for the backward, {H0} heads of dk = dv = {d0}, batch 1, fp32:")
print(f"{'T':>6} {'autograd MiB':>13} {'by hand MiB':>12} {'ratio':>6}")
for T, (a, h) in saved.items():
    print(f"{T:>6} {a / MiB:>13.1f} {h / MiB:>12.1f} {h / a:>6.2f}")
a, h = saved[4096]
n = 4096 // C
per_chunk = h // (n * H0)
print(f"T = 4096: by hand {h:,} bytes = {per_chunk:,} per chunk and head, "
      f"autograd {a / (n * H0):,.0f}")
heads = [1, 2, 4, 8, 16]
per_head = {H: (kept(chunk_gated_delta_rule, 4096, H), kept(chunk_gated_delta_rule_hand, 4096, H))
            for H in heads}
print(f"MiB per head at T = 4096, with {', '.join(map(str, heads))} heads:")
print("  autograd " + ", ".join(f"{per_head[H][0] / H / MiB:.2f}" for H in heads))
print("  by hand  " + ", ".join(f"{per_head[H][1] / H / MiB:.2f}" for H in heads))
record(longest=f"{lengths[-1]:,}", ratio_4096=f"{h / a:.2f}", hand_mib_4096=f"{h / MiB:.1f}",
       autograd_mib_4096=f"{a / MiB:.1f}", per_chunk=f"{per_chunk:,}",
       autograd_per_chunk=f"{a / (n * H0):,.0f}",
       per_token=f"{h / (4096 * H0):,.0f}", autograd_per_token=f"{a / (4096 * H0):,.0f}",
       state_share=f"{d0 * d0 * 4 / per_chunk:.0%}")


def draw(t):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for i, name in enumerate((t("autograd", "autograd"), t("手写反向", "by hand"))):
        left.plot(lengths, [saved[T][i] / MiB for T in lengths], "o-", ms=4, label=name)
        right.plot(heads, [per_head[H][i] / MiB for H in heads], "o-", ms=4, label=name)
    left.set_xlabel(t("序列长度 T", "sequence length T"))
    left.set_ylabel(t("为反向保存的 MiB", "MiB kept for the backward"))
    left.set_title(t(f"{H0} 个头，d = {d0}：都随 T 线性增长",
                     f"{H0} heads, d = {d0}: both linear in T"))
    right.set_xlabel(t("头数（T = 4096）", "heads (T = 4096)"))
    right.set_ylabel(t("为反向保存的 MiB", "MiB kept for the backward"))
    right.set_title(t("也随头数线性增长", "and linear in the heads"))
    for ax in (left, right):
        ax.legend(fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


save_figure("ch19_backward", draw)
