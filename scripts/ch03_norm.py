"""Chapter 3: RMSNorm. What it does to the scale of a vector, and why the stored weight is 1 + w."""
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.embedding import Embedding
from qwen.norm import RMSNorm
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)                              # we only run the parts, never train them
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, "layers.0.input_layernorm.")

ids = torch.tensor([tok.encode("The cat sat on the mat. 猫坐在垫子上。").ids])
x = emb(ids)                                               # [1, T, dim]
rms = lambda v: v.pow(2).mean(-1).sqrt()                   # root mean square over the last dim
print(f"{ids.shape[1]} tokens; rms of their embeddings: {rms(x).min():.4f} .. {rms(x).max():.4f}")
y = norm(x)
print(f"after layer 0's input_layernorm: {rms(y).min():.3f} .. {rms(y).max():.3f}"
      f"   (rms of 1 + w: {rms(1 + norm.weight):.3f})")
print("scale-free: norm(10 x) == norm(x):", torch.allclose(norm(10 * x), y, atol=1e-5))

w = norm.weight
print(f"stored weight w: mean {w.mean():+.3f}, range {w.min():+.3f} .. {w.max():+.3f}")
# the bug: w instead of 1 + w
plain = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * w
cos = torch.nn.functional.cosine_similarity(plain, y, dim=-1)
print(f"using w instead of 1 + w: cosine with the right output {cos.mean():.2f}, "
      f"rms {rms(plain).mean():.3f} instead of {rms(y).mean():.3f}")

names = ["input_layernorm", "post_attention_layernorm"]
scale = {n: [(1 + W[f"layers.{i}.{n}.weight"]).abs().mean().item()
             for i in range(cfg.num_hidden_layers)] for n in names}
final = (1 + W["norm.weight"]).abs().mean().item()
print(f"mean |1 + w| per layer, input_layernorm:          "
      f"{' '.join(f'{s:.2f}' for s in scale[names[0]])}")
print(f"mean |1 + w| per layer, post_attention_layernorm: "
      f"{' '.join(f'{s:.2f}' for s in scale[names[1]])}")
print(f"final norm: {final:.2f}")
n_attn = cfg.layer_types.count("full_attention")
n_norms = 2 * cfg.num_hidden_layers + 1 + 2 * n_attn
print(f"zero-centred RMSNorms: {n_norms} (2 per layer, the final one, "
      f"q_norm and k_norm in {n_attn} attention layers); "
      f"gated RMSNorms: {cfg.num_hidden_layers - n_attn} (one per DeltaNet)")
record(n_norms=n_norms, final_scale=f"{final:.2f}", bug_cosine=f"{cos.mean():.2f}",
       n_layers=cfg.num_hidden_layers, n_attention=n_attn)
official = Config.load(Path("book/data/qwen3.5-0.8b"))    # the 0.8B's config.json, in the repo
official_attn = official.layer_types.count("full_attention")
record(official_layers=official.num_hidden_layers, official_attention=official_attn,
       official_norms=2 * official.num_hidden_layers + 1 + 2 * official_attn,
       official_gated=official.num_hidden_layers - official_attn)


def draw(t):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    layers = range(cfg.num_hidden_layers)
    ax.plot(layers, scale[names[0]], "o-",
            label=t("注意力/DeltaNet 之前 (input_layernorm)",
                    "before the mixer (input_layernorm)"))
    ax.plot(layers, scale[names[1]], "s-",
            label=t("MLP 之前 (post_attention_layernorm)",
                    "before the MLP (post_attention_layernorm)"))
    ax.axhline(final, color="gray", ls="--", label=t("最后的 norm", "final norm"))
    ax.set_xlabel(t("层", "layer"))
    ax.set_ylabel(t("平均 |1 + w|", "mean |1 + w|"))
    ax.set_title(t("每个 RMSNorm 实际乘上的尺度",
                   "The scale each RMSNorm actually applies"))
    ax.legend(fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


save_figure("ch03_norm_scales", draw)
