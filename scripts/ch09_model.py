"""Chapter 9: the decoder layer and the whole model.
The first real prediction, how it forms layer by layer, and one input traced through every step."""
from functools import partial
from pathlib import Path

import torch
from tokenizers import Tokenizer

from book.out import record, save_figure
from book.tiny import is_tiny
from qwen.model import Qwen, from_pretrained
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

# --8<-- [start:trace]
# One 6-token input through every step, read by forward hooks on the model's own modules.
def trace(model, ids):
    """Every module call's inputs and output, by module name, and the cache the pass filled."""
    inputs, outputs = {}, {}

    def hook(module, i, o, name):
        inputs[name], outputs[name] = i[0], o

    hooks = [m.register_forward_hook(partial(hook, name=name))
             for name, m in model.named_modules() if name]
    cache = model.new_cache()
    cos, sin = model.rotary_emb(torch.arange(ids.shape[1], device=ids.device))
    x = model.embed_tokens(ids)                       # the forward pass by hand, as above
    for layer, c in zip(model.layers, cache.layers):
        x = layer(x, cos, sin, c)
    model.lm_head(model.norm(x))
    for h in hooks:
        h.remove()
    return inputs, outputs, cache


def steps(model, ids):
    """(step, tensor or text): the entrance, layers 0 (DeltaNet) and 3 (attention), the exit."""
    inp, out, cache = trace(model, ids)
    dn, at = "layers.0.linear_attn", "layers.3.self_attn"

    def mlp_branch(i):                                # the same in every layer
        L = f"layers.{i}"
        return [("  + residual: x + mixer", inp[f"{L}.post_attention_layernorm"]),
                ("  post_attention_layernorm", out[f"{L}.post_attention_layernorm"]),
                ("  mlp.gate_proj", out[f"{L}.mlp.gate_proj"]),
                ("  mlp.up_proj", out[f"{L}.mlp.up_proj"]),
                ("  mlp.down_proj", out[f"{L}.mlp.down_proj"]),
                ("  + residual: h + mlp", out[L])]

    return [("ids", ids), ("embed_tokens", out["embed_tokens"]),
            ("rotary_emb: cos (and sin)", out["rotary_emb"][0]),
            ("layers.0  linear_attention", None),
            ("  input_layernorm", out["layers.0.input_layernorm"]),
            ("  linear_attn.in_proj_qkv  q | k | v", out[f"{dn}.in_proj_qkv"]),
            ("  linear_attn.in_proj_z  output gate", out[f"{dn}.in_proj_z"]),
            ("  linear_attn.in_proj_b  write strength", out[f"{dn}.in_proj_b"]),
            ("  linear_attn.in_proj_a  decay input", out[f"{dn}.in_proj_a"]),
            ("  linear_attn.conv1d  in: K - 1 past + T", inp[f"{dn}.conv1d"]),
            ("  linear_attn.conv1d  out", out[f"{dn}.conv1d"]),
            ("  state  one k x v matrix per head", cache.layers[0].state),
            ("  linear_attn.norm  gated, per head", out[f"{dn}.norm"]),
            ("  linear_attn.out_proj", out[f"{dn}.out_proj"]),
            *mlp_branch(0),
            ("layers.1, layers.2  as layers.0", None),
            ("layers.3  full_attention", None),
            ("  input_layernorm", out["layers.3.input_layernorm"]),
            ("  self_attn.q_proj  query | gate", out[f"{at}.q_proj"]),
            ("  self_attn.k_proj", out[f"{at}.k_proj"]),
            ("  self_attn.v_proj", out[f"{at}.v_proj"]),
            ("  self_attn.q_norm  per head", out[f"{at}.q_norm"]),
            ("  self_attn.k_norm  per head", out[f"{at}.k_norm"]),
            ("  cache.k  keys after RoPE", cache.layers[3].k),
            ("  self_attn.o_proj  in: heads x gate", inp[f"{at}.o_proj"]),
            ("  self_attn.o_proj  out", out[f"{at}.o_proj"]),
            *mlp_branch(3),
            ("the pattern again", f"layers 4-{len(model.layers) - 1}"),
            ("norm", out["norm"]),
            ("lm_head: logits", out["lm_head"])]


text = "今天天气不错，我们去公园"
ids6 = torch.tensor([tok.encode(text).ids])
# the official config's model on the meta device: shapes, no weights (chapter 14)
with torch.device("meta"):
    big = Qwen(Config.load(Path("book/data/qwen3.5-0.8b")))
show = lambda v: "" if v is None else v if isinstance(v, str) else str(list(v.shape))
print(f"\n{ids6.shape[1]} tokens of {text!r} through every step, shapes [B, T, ...]:")
print(f"{'step':<40} {'this model':<18} Qwen3.5-0.8B (meta device)")
rows, big_rows = steps(model, ids6), steps(big, ids6.to("meta"))
for (step, a), (_, b) in zip(rows, big_rows):
    print(f"{step:<40} {show(a):<18} {show(b)}".rstrip())
big_rows = dict(big_rows)
record(trace_tokens=ids6.shape[1], state_08b=show(big_rows["  state  one k x v matrix per head"]),
       kv_08b=show(big_rows["  cache.k  keys after RoPE"]))
# --8<-- [end:trace]


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
    from matplotlib.ticker import FuncFormatter, LogFormatter

    # plain numbers (1, 2, 3) where matplotlib would write 2 x 10^0, on the same ticks
    a.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
    a.set_title(t("每层之后残差流的 RMS", "RMS of the residual stream after each layer"))
    b.set_title(t("logit lens：在每层停下时最终 token 的概率",
                  "Logit lens: p(final token) if the model stopped at each layer"))
    fig.tight_layout()
    return fig


save_figure("ch09_logit_lens", draw)
