"""Chapter 18: gradients through the model you wrote. A training mode, one backward through the
whole model, what autograd keeps for it (measured, against sequence length, for the tiny model and
for 0.8B's widths), and activation checkpointing: the same gradients for one more forward."""
from collections import Counter

import torch
from torch.utils.flop_counter import FlopCounterMode

from book.out import record, save_figure
from book.tiny import is_tiny
from qwen import fast, train
from qwen.embedding import LMHead
from qwen.model import DecoderLayer, from_pretrained
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding
from qwen.train import CheckpointedLayer, SavedBytes, next_token_loss, trainable
from qwen.weights import Config, find_model

torch.set_grad_enabled(True)              # the chapters before turn autograd off; training needs it
torch.manual_seed(0)
path = find_model()
if is_tiny(path):
    print("(the tiny test model: random weights; what is measured here is shapes and bytes)\n")
ids = torch.randint(0, 200_000, (1, 130), generator=torch.Generator().manual_seed(0))

# --8<-- [start:frozen]
model = from_pretrained(path)                    # inference: no parameter takes a gradient
try:
    next_token_loss(model(ids), ids).backward()
except RuntimeError as e:
    print("from_pretrained, then backward:", e)
try:
    trainable(fast.from_pretrained(path, quantize="int8", activations="fp32"))
except ValueError as e:
    print("trainable(int8 model):", e)
# --8<-- [end:frozen]

# --8<-- [start:backward]
trainable(model)                                 # requires_grad on every parameter, train()
loss = next_token_loss(model(ids), ids)
loss.backward()
params = list(model.named_parameters())
print(f"\nloss {loss:.3f}; {sum(p.grad is not None for _, p in params)} of {len(params)} "
      f"parameters have a gradient, {sum(p.numel() for _, p in params):,} numbers")
for name in ("embed_tokens.weight", "layers.0.linear_attn.A_log",
             "layers.3.self_attn.q_proj.weight", "norm.weight"):
    print(f"  |grad| of {name:34} {dict(params)[name].grad.norm():.2e}")
# --8<-- [end:backward]


# --8<-- [start:measure]
class Kept(SavedBytes):
    """SavedBytes, split by where each tensor was saved: a DeltaNet layer, an attention layer, or
    outside the layers (the final norm, the head, the loss); and by shape."""

    def __init__(self, model, layers):
        super().__init__(model)
        self.where, self.parts, self.shapes = "head and loss", Counter(), Counter()
        self.hooks = []
        for layer in layers:
            kind = "DeltaNet" if layer.layer_type == "linear_attention" else "attention"
            self.hooks += [layer.register_forward_pre_hook(lambda *a, k=kind: self.at(k)),
                           layer.register_forward_hook(lambda *a: self.at("head and loss"))]

    def at(self, where):
        self.where = where

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        return super().__exit__(*exc)

    def pack(self, t):
        before = self.bytes
        packed = super().pack(t)
        self.parts[self.where] += self.bytes - before
        self.shapes[tuple(t.shape), str(t.dtype)[6:]] += self.bytes - before
        return packed
# --8<-- [end:measure]


def kept_by_model(model, T):
    """Bytes autograd keeps for the backward of the loss on T tokens, by part."""
    x = torch.randint(0, 200_000, (1, T), generator=torch.Generator().manual_seed(T))
    with Kept(model, model.layers) as kept:
        next_token_loss(model(x), x)
    return kept


# --8<-- [start:checkpointing]
ckpt = trainable(from_pretrained(path), checkpointing=True)
calls = Counter()
for m in (model, ckpt):
    for layer in m.layers:                            # count the MLPs' forwards as they start
        layer.mlp.register_forward_pre_hook(lambda mod, a, m=m: calls.update([id(m)]))
flops = {}
for name, m in (("plain", model), ("checkpointed", ckpt)):
    m.zero_grad()
    calls.clear()
    with FlopCounterMode(display=False) as count:
        next_token_loss(m(ids), ids).backward()
    flops[name] = count.get_total_flops(), calls[id(m)]
same = all(torch.equal(p.grad, q.grad) for p, q in zip(model.parameters(), ckpt.parameters()))
# --8<-- [end:checkpointing]
L = len(model.layers)
print(f"\ncheckpointing: every gradient bit for bit the same: {same}")
for name, (f, n) in flops.items():
    print(f"  {name:13} {n:2} layer forwards for {L} layers, {f:,} FLOPs forward and backward")
extra = flops["checkpointed"][0] / flops["plain"][0] - 1
print(f"  one more forward of the layers (not of the head): {extra:+.1%} FLOPs")

lengths = [128, 256, 512, 1024]
tiny = {name: [kept_by_model(m, T) for T in lengths]
        for name, m in (("plain", model), ("checkpointed", ckpt))}
V = model.cfg.vocab_size
name = ("the tiny test model", "微型测试模型") if is_tiny(path) else ("the model", "模型")
print(f"\nbytes kept for the backward, {name[0]} ({L} layers); the logits alone are T x {V:,} x 4")
print(f"{'T':>6}{'plain':>16}{'checkpointed':>16}{'head and loss':>16}{'logits':>16}")
for i, T in enumerate(lengths):
    p, c = tiny["plain"][i], tiny["checkpointed"][i]
    print(f"{T:>6}{p.bytes:>16,}{c.bytes:>16,}{p.parts['head and loss']:>16,}{T * V * 4:>16,}")


# --8<-- [start:group]
cfg = Config.load("book/data/qwen3.5-0.8b")   # 0.8B's widths; one group of its 24 layers
group = torch.nn.ModuleList(DecoderLayer(cfg, t) for t in cfg.layer_types[:4])
for p in group.parameters():
    torch.nn.init.normal_(p, std=0.02)             # random weights: the bytes depend on shapes only
rope = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)


def kept_by_group(layers, T):
    x = torch.randn(1, T, cfg.hidden_size, requires_grad=True)
    cos, sin = rope(torch.arange(T))
    with Kept(layers, layers) as kept:
        for layer in layers:
            x = layer(x, cos, sin)
    return kept


def kept_by_head(T=64, chunk=None):
    """The final norm, the 248,320-row head and the loss at 0.8B's width, per token; with chunk,
    the loss of chunked_cross_entropy, which keeps no logits."""
    norm, head = RMSNorm(cfg.hidden_size), LMHead(torch.nn.Parameter(
        torch.zeros(cfg.vocab_size, cfg.hidden_size)))
    x = torch.randn(1, T, cfg.hidden_size, requires_grad=True)
    y = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
    with SavedBytes(torch.nn.ModuleList([norm, head])) as kept:
        if chunk is None:
            next_token_loss(head(norm(x)), y)
        else:
            train.chunked_cross_entropy(norm(x)[0, :-1], head, y[0, 1:], chunk)   # shifted by hand
    return kept.bytes // T
# --8<-- [end:group]


short = [128, 256, 512]                            # 0.8B's widths are slow on a CPU: up to 512
big = {"plain": [kept_by_group(group, T) for T in short]}
for layer in group:
    fast.swap(layer, CheckpointedLayer)              # what trainable(checkpointing=True) does
big["checkpointed"] = [kept_by_group(group, T) for T in short]
head, head_chunked = kept_by_head(), kept_by_head(chunk=16)
groups = len(cfg.layer_types) // 4
print(f"\n0.8B's widths: one group (3 DeltaNet + 1 attention layers, random weights) measured, "
      f"x {groups}; the head and loss measured at T = 64: {head:,} bytes per token")
print(f"{'T':>5}{'group plain':>13}{'DeltaNet':>9}{'attention':>10}{'0.8B plain':>15}"
      f"{'0.8B ckpt':>13}{'logits of them':>16}")
est = {"plain": [], "checkpointed": [], "chunked": []}
for i, T in enumerate(short):
    g = big["plain"][i]
    for name in ("plain", "checkpointed"):
        est[name].append(groups * big[name][i].bytes + head * T)
    est["chunked"].append(groups * big["checkpointed"][i].bytes + head_chunked * T)
    logits = T * cfg.vocab_size * 4
    print(f"{T:>5}{g.bytes:>13,}{g.parts['DeltaNet'] / g.bytes:>9.0%}"
          f"{g.parts['attention'] / g.bytes:>10.0%}{est['plain'][-1]:>15,}"
          f"{est['checkpointed'][-1]:>13,}"
          f"{logits / est['plain'][-1]:>8.0%}, {logits / est['checkpointed'][-1]:.0%}")
print(f"per token at T = {short[-1]}: plain {est['plain'][-1] / short[-1] / 2**20:.2f} MiB, "
      f"checkpointed {est['checkpointed'][-1] / short[-1] / 2**20:.2f} MiB")
print(f"the loss in chunks (chunked_cross_entropy): the head and loss keep {head_chunked:,} "
      f"bytes per token; with checkpointing, {est['chunked'][-1] / short[-1] / 2**20:.2f} MiB "
      f"per token, {est['chunked'][-1] / 2**30:.2f} GiB at T = {short[-1]}")
g = big["plain"][-1]
print(f"the largest tensors one group keeps at T = {short[-1]} (shape, dtype: bytes):")
for (shape, dtype), b in g.shapes.most_common(6):
    print(f"  {list(shape)!s:28} {dtype:8} {b:>12,}  {b / g.bytes:>4.0%}")

record(layers=L, vocab=f"{V:,}", extra_flops=f"{extra:+.1%}", same=str(same),
       tiny_plain_1024=f"{tiny['plain'][-1].bytes:,}",
       tiny_ckpt_1024=f"{tiny['checkpointed'][-1].bytes:,}",
       head_per_token=f"{head:,}", groups=groups,
       big_plain_512=f"{est['plain'][-1] / 2**30:.2f}",
       big_ckpt_512=f"{est['checkpointed'][-1] / 2**30:.2f}",
       big_chunked_512=f"{est['chunked'][-1] / 2**30:.2f}", head_chunked=f"{head_chunked:,}",
       group_512=f"{g.bytes:,}", deltanet_share=f"{g.parts['DeltaNet'] / g.bytes:.0%}",
       logits_share_plain=f"{short[-1] * cfg.vocab_size * 4 / est['plain'][-1]:.0%}",
       logits_share_ckpt=f"{short[-1] * cfg.vocab_size * 4 / est['checkpointed'][-1]:.0%}")


def draw(t):
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    small = {k: [x.bytes for x in v] for k, v in tiny.items()}
    for ax, xs, data, scale, unit in ((a, lengths, small, 2**20, "MiB"),
                                      (b, short, est, 2**30, "GiB")):
        ax.plot(xs, [v / scale for v in data["plain"]], marker="o", label=t("不做检查点", "plain"))
        ax.plot(xs, [v / scale for v in data["checkpointed"]], marker="o",
                label=t("激活检查点", "checkpointing"))
        if "chunked" in data:
            ax.plot(xs, [v / scale for v in data["chunked"]], marker="o",
                    label=t("检查点 + 分块损失", "checkpointing + chunked loss"))
        ax.plot(xs, [T * V * 4 / scale for T in xs], ls="--", color="gray",
                label=t("其中 logits（fp32）", "of which the logits (fp32)"))
        ax.set_xlabel(t("序列长度 T（词元）", "sequence length T (tokens)"))
        ax.set_ylabel(t(f"为反向保存的字节（{unit}）", f"bytes kept for the backward ({unit})"))
        ax.legend()
    a.set_title(t(f"{name[1]}（{L} 层）", f"{name[0]} ({L} layers)"))
    b.set_title(t("0.8B 的宽度：一组实测 × 6，加输出头", "0.8B's widths: one group measured x 6, "
                  "plus the head"))
    fig.tight_layout()
    return fig


save_figure("ch18_memory", draw)
