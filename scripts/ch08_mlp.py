"""Chapter 8: the SwiGLU MLP. A third of the parameters, and a gate that lets few channels pass."""
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen.embedding import Embedding
from qwen.mlp import MLP
from qwen.norm import RMSNorm
from qwen.weights import Config, find_model, load, load_weights

torch.set_grad_enabled(False)
path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
norm = load(RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), W, "layers.0.post_attention_layernorm.")
mlp = load(MLP(cfg.hidden_size, cfg.intermediate_size), W, "layers.0.mlp.")

per_layer = sum(p.numel() for p in mlp.parameters())
total = sum(t.numel() for t in W.values())
print(f"one MLP: 3 matrices {cfg.hidden_size} <-> {cfg.intermediate_size}, "
      f"{per_layer:,} parameters; "
      f"{cfg.num_hidden_layers} of them: {cfg.num_hidden_layers * per_layer:,}, "
      f"{cfg.num_hidden_layers * per_layer / total:.0%} of the model")

ids = torch.tensor([tok.encode("The cat sat on the mat because the cat was tired.").ids])
x = norm(emb(ids))                           # [1, T, dim]
gate, up = mlp.gate_proj(x), mlp.up_proj(x)  # [1, T, hidden] each
h = F.silu(gate) * up                        # what down_proj sees
print(f"{tuple(x.shape)} -> hidden {tuple(h.shape)} -> {tuple(mlp(x).shape)}")
print(f"silu(gate) < 0 for {(gate < 0).float().mean():.0%} of the entries "
      f"(silu never goes below {F.silu(torch.tensor(-1.2785)):.3f})")

energy = (h.pow(2).sort(-1, descending=True).values.cumsum(-1)
          / h.pow(2).sum(-1, keepdim=True))  # [1, T, hidden]
share = energy[0].mean(0)                    # mean over tokens: energy in the top n channels
n90 = int((share < 0.9).sum()) + 1
print(f"90% of the hidden energy sits in {n90} of {cfg.intermediate_size} channels "
      f"({n90 / cfg.intermediate_size:.0%})")
record(mlp_params=f"{per_layer:,}", mlp_share=f"{cfg.num_hidden_layers * per_layer / total:.0%}",
       top90=f"{n90 / cfg.intermediate_size:.0%}",
       negative_gates=f"{(gate < 0).float().mean():.0%}",
       hidden_size=cfg.hidden_size)


def draw(t):
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    z = torch.linspace(-6, 6, 241)
    a.hist(gate.flatten(), bins=80, range=(-6, 6), density=True, color="#cfd8dc")
    a2 = a.twinx()
    a2.plot(z, F.silu(z), label="SiLU")
    a2.plot(z, F.relu(z), ls="--", lw=1, label="ReLU")
    a2.legend(fontsize=8, loc="upper left")
    a.set_yticks([])
    a.set_xlabel(t("gate_proj(x)", "gate_proj(x)"))
    a.set_title(t("SiLU 门：负半轴不是直接截成 0",
                  "The SiLU gate: not a hard zero below 0"))
    b.plot(torch.arange(1, len(share) + 1) / len(share), share)
    b.axhline(0.9, color="gray", ls=":", lw=1)
    b.set_xlabel(t("按大小排序后取前多少通道（比例）",
                   "share of hidden channels, largest first"))
    b.set_ylabel(t("累计能量占比", "share of energy"))
    b.set_title(t("隐藏通道按能量排序后的累计能量占比",
                   "Cumulative share of energy, channels sorted by energy"))
    for ax in (a, b):
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


save_figure("ch08_mlp", draw)
