"""Chapter 9: the decoder layer and the whole model.
The first real prediction, and how it forms layer by layer."""
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from book.tiny import is_tiny
from qwen.model import from_pretrained
from qwen.weights import Config, find_model

torch.set_grad_enabled(False)
path = find_model()
model = from_pretrained(path, torch.float32)
cfg = model.cfg
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
if is_tiny(path):
    print("(the tiny test model: its weights are random, so its predictions are too)\n")
n_params = sum(p.numel() for p in model.parameters())        # the tied table is counted once
print(f"{n_params:,} parameters; layers:",
      "".join("L" if t == "linear_attention" else "A" for t in cfg.layer_types))
print("lm_head.weight is embed_tokens.weight:", model.lm_head.weight is model.embed_tokens.weight)

prompt = "The capital of France is"
ids = torch.tensor([tok.encode(prompt).ids])
probs = model(ids)[0, -1].softmax(-1)                       # the next token's distribution
top = probs.topk(5)
print(f"{prompt!r} -> next token:",
      ", ".join(f"{tok.decode([i])!r} {p:.2f}"
                for p, i in zip(top.values.tolist(), top.indices.tolist())))
out = ids
# greedy, recomputing the whole sequence each step
for _ in range(8):
    out = torch.cat([out, model(out)[:, -1:].argmax(-1)], dim=1)
print("greedy:", repr(tok.decode(out[0].tolist())))

# The same forward pass by hand, reading the residual stream after every layer (the "logit lens").
T = ids.shape[1]
cos, sin = model.rotary_emb(torch.arange(T))
x = model.embed_tokens(ids)
rms, lens = [], []
target = top.indices[0]
for layer in model.layers:
    x = layer(x, cos, sin)
    rms.append(x[0, -1].pow(2).mean().sqrt().item())
    # as if this were the last layer
    lens.append(model.lm_head(model.norm(x[:, -1]))[0].softmax(-1)[target].item())
print("by hand == model(ids):", torch.allclose(model.lm_head(model.norm(x)), model(ids), atol=1e-5))
print(f"logit lens, p({tok.decode([target])!r}) after each layer:",
      " ".join(f"{p:.2f}" for p in lens))
first = next(i for i, p in enumerate(lens) if p > 0.5 * lens[-1])
print(f"it reaches half its final probability at layer {first}; "
      f"the residual stream's rms grows from {rms[0]:.2f} to {rms[-1]:.2f}")
record(n_params=f"{n_params:,}", next_token=tok.decode([target]), next_p=f"{top.values[0]:.2f}",
       lens_half_layer=first, n_layers=cfg.num_hidden_layers,
       layer_pattern="".join("L" if t == "linear_attention" else "A" for t in cfg.layer_types),
       official_layers=Config.load(Path("book/data/qwen3.5-0.8b")).num_hidden_layers)


def draw(t):
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    attn = [i for i, k in enumerate(cfg.layer_types) if k == "full_attention"]
    word = repr(tok.decode([target]))
    for ax, ys, label in ((a, rms, t("残差流的 RMS（最后一个 token）",
                                     "rms of the residual stream (last token)")),
                          (b, lens, t(f"p({word})，若在此层结束",
                                      f"p({word}) if the model ended here"))):
        ax.plot(range(len(ys)), ys, "o-", ms=3)
        ax.plot(attn, [ys[i] for i in attn], "s", color="C3", ms=6,
                label=t("注意力层", "attention layers"))
        ax.set_xlabel(t("层", "layer"))
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    a.set_yscale("log")
    a.set_title(t("每层之后残差流的 RMS", "RMS of the residual stream after each layer"))
    b.set_title(t("logit lens：在每层停下时最终 token 的概率",
                  "Logit lens: p(final token) if the model stopped at each layer"))
    fig.tight_layout()
    return fig


save_figure("ch09_logit_lens", draw)
