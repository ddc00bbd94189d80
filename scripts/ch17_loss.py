"""Chapter 17: the loss and perplexity. The next-token cross-entropy by hand against torch's, the
shift and the ignore index, what a uniform guess scores, and perplexity on held-out real text: of
the model, and of chapter 16's bf16, int8, w8a8 and int4 variants next to fp32's."""
import math

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from book import sft_data
from book.lessons import load_prose
from book.out import record, record_error, record_measured, save_figure
from book.tiny import is_tiny
from qwen import fast
from qwen.model import from_pretrained
from qwen.train import IGNORE, cross_entropy, next_token_loss, next_token_targets, perplexity
from qwen.weights import find_model

torch.set_grad_enabled(False)
torch.manual_seed(0)
path = find_model()
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
model = from_pretrained(path, torch.float32)
V = model.cfg.vocab_size
if is_tiny(path):
    print("(the tiny test model: random weights, the real tokenizer and vocabulary)\n")

# --8<-- [start:shift]
prompt, answer = "The capital of France is", " Paris."
ids = torch.tensor([tok.encode(prompt + answer).ids])                 # [1, T]
mask = torch.arange(ids.shape[1]) >= len(tok.encode(prompt).ids)      # the answer only
targets = next_token_targets(ids, mask[None])
print("position  reads       predicts")
for t in range(ids.shape[1]):
    want = "-" if targets[0, t] == IGNORE else repr(tok.decode([targets[0, t].item()]))
    print(f"{t:8}  {tok.decode([ids[0, t].item()])!r:11} {want}")
logits = model(ids)                                                   # [1, T, vocab]
ours = next_token_loss(logits, ids, mask[None])
theirs = F.cross_entropy(logits[0], targets[0], ignore_index=IGNORE)  # torch's
print(f"loss over the answer's {int((targets != IGNORE).sum())} tokens: ours {ours:.4f}, "
      f"torch's {theirs:.4f}")
# --8<-- [end:shift]
record_error("ours_vs_torch", (ours - theirs).abs() / theirs, below=1e-6)
print("every token scored, the prompt too:", f"{next_token_loss(logits, ids):.4f}")

# --8<-- [start:uniform]
texts, credit = load_prose()
held_out = tok.encode(texts[-1]).ids[:1024]                           # the corpus' last text
window = 512
z = model(torch.tensor([held_out[:window + 1]]))[0, :-1]              # [512, vocab]
y = torch.tensor(held_out[1:window + 1])
uniform = torch.zeros(8, V, dtype=torch.float64)                      # each token 1 / V
print(f"\nuniform guess over {V:,} tokens: loss ln V = {math.log(V):.3f}, "
      f"perplexity {math.exp(cross_entropy(uniform, y[:8])):,.0f}")
print(f"the model's logits: std {z.std():.2f}; loss {cross_entropy(z, y):.3f} "
      f"on the first {window} tokens")
scales = [i / 10 for i in range(0, 21, 2)]                            # s = 0 is uniform
curve = [math.exp(cross_entropy(z[:256] * s, y[:256])) for s in scales]
# --8<-- [end:uniform]
best = min(range(len(scales)), key=curve.__getitem__)
print("perplexity of the first 256, the logits scaled by s: " + ", ".join(
    f"s={s:g}: {curve[i]:.3g}" for i, s in enumerate(scales) if i % 5 == 0))
print(f"lowest at s = {scales[best]:g}")

# --8<-- [start:held_out]
ppl, n = perplexity(model, held_out, window=window)
print(f"\nheld-out text: {len(held_out):,} tokens, read in windows of {window}; {n:,} predicted")
print(f"fp32: loss {math.log(ppl):.3f}, perplexity {ppl:.4g}")
# --8<-- [end:held_out]
print("corpus:", credit)
pairs = sft_data.load(("chinese",))["held_out"]                # chapter 20's held-out split
zh = tok.encode("\n".join(f"{q}\n{a}" for q, a, _ in pairs)).ids
ppl_zh, n_zh = perplexity(model, zh, window=window)
print(f"Chinese: {len(pairs)} held-out chat pairs, {len(zh):,} tokens; fp32: loss "
      f"{math.log(ppl_zh):.3f}, perplexity {ppl_zh:.4g}")
print("corpus:", sft_data.credit())
record(vocab=f"{V:,}", ln_vocab=f"{math.log(V):.3f}", held_out_tokens=f"{len(held_out):,}",
       window=window, scored=f"{n:,}", loss_fp32=f"{math.log(ppl):.3f}", ppl_fp32=f"{ppl:.4g}",
       logit_std=f"{z.std():.2f}", best_scale=f"{scales[best]:g}", zh_pairs=len(pairs),
       zh_tokens=f"{len(zh):,}", loss_zh=f"{math.log(ppl_zh):.3f}", ppl_zh=f"{ppl_zh:.4g}")

# --8<-- [start:variants]
plain = [s for s in fast.STEPS if s != "packed weights"]       # as in chapter 16
bf16 = torch.bfloat16


def made(quantize):                                             # chapter 16's made(), fp32 act
    return fast.from_pretrained(path, bf16, steps=plain, activations="fp32", quantize=quantize)


variants = {"bf16": lambda: from_pretrained(path, bf16),
            "int8": lambda: made("int8"), "int4": lambda: made("int4")}
got = {name: perplexity(make(), held_out, window)[0] for name, make in variants.items()}


def in_steps(model, ids, step=16):
    """exp(mean loss) of one window read `step` tokens per call through the cache: a call of at
    most 16 rows is where w8a8 rounds its activations (chapter 16), as decoding does."""
    ids, cache, total = torch.tensor(ids), model.new_cache(max_tokens=len(ids)), 0.0
    for a in range(0, len(ids) - 1, step):
        part = ids[a:a + step + 1]
        loss = cross_entropy(model(part[None, :-1], cache=cache)[0], part[1:]).item()
        total += loss * (len(part) - 1)
    return math.exp(total / (len(ids) - 1))


first = held_out[:window + 1]                                   # the window of z above
steps = {"fp32": math.exp(cross_entropy(z, y))}
for kind in ("int8", "w8a8"):
    if kind == "w8a8" and "fbgemm" not in torch.backends.quantized.supported_engines:
        continue
    steps[kind] = in_steps(made(kind), first)
# --8<-- [end:variants]
print(f"\nthe whole held-out text    {'perplexity':>12}{'loss':>9}{'vs fp32':>10}")
print(f"{'fp32':27}{ppl:>12.4g}{math.log(ppl):>9.3f}{'':>10}")


# through bf16 and int8 kernels the CPU moves the last digits; the tiny model's confident random
# logits move its mean loss by a few hundredths
tol = 4 if is_tiny(path) else 0.5                              # percentage points of perplexity


def row(name, key, p, ref):
    rel = record_measured(f"ppl_vs_fp32_{key}", f"{p / ref - 1:+.2%}", tol=tol)
    loss = record_measured(f"loss_{key}", f"{math.log(p):.3f}", tol=tol / 100)
    shown = record_measured(f"ppl_{key}", f"{p:.3g}", rel=tol / 100)  # e^loss: loss's tolerance
    print(f"{name:27}{shown:>12}{loss:>9}{rel:>10}")


for name, p in got.items():
    row(name, name, p, ppl)
print(f"\nthe first {window}, 16 tokens per call")
print(f"{'fp32 (one call)':27}{steps['fp32']:>12.4g}{math.log(steps['fp32']):>9.3f}")
for name in ("int8", "w8a8"):
    if name in steps:
        row(name, f"{name}_steps", steps[name], steps["fp32"])


def draw(t):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(scales, curve, marker="o", label=t("模型的 logits × s", "the model's logits × s"))
    ax.axhline(V, color="gray", ls="--",
               label=t(f"均匀猜测：V = {V:,}", f"uniform guess: V = {V:,}"))
    ax.set_yscale("log")
    ax.set_xlabel(t("logits 的缩放 s（s = 0：均匀分布）", "scale s of the logits (s = 0: uniform)"))
    ax.set_ylabel(t("困惑度（对数坐标）", "perplexity (log scale)"))
    ax.set_title(t("前 256 个留出词元上的困惑度", "perplexity on the first 256 held-out tokens"))
    ax.legend()
    return fig


save_figure("ch17_scale", draw)
