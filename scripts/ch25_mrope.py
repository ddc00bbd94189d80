"""Chapter 25: M-RoPE. Three positions per token; an image's tokens take (time, row, column)."""
import math
from pathlib import Path

import torch
from matplotlib import cbook
from tokenizers import Tokenizer

from book.out import record, save_figure
from qwen import vlm
from qwen.mrope import MRotaryEmbedding, rope_index
from qwen.rope import RotaryEmbedding
from qwen.weights import Config, find_model, read_json

path = find_model()
OFFICIAL = Path("book/data/qwen3.5-0.8b")     # the official config files, no weights
AXES = "THW"                                  # 0: time, 1: height, 2: width


def rope_of(folder):
    """config.json's text rope settings, and the M-RoPE they make."""
    cfg = Config.load(folder)
    params = read_json(folder / "config.json")["text_config"]["rope_parameters"]
    sections = vlm.mrope_sections(folder)
    return cfg, params, MRotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta,
                                         sections)


cfg, params, mrope = rope_of(path)
official_cfg, official_params, official_mrope = rope_of(OFFICIAL)
print("config.json text_config.rope_parameters:", params)
for name, c, p, m in (("this checkpoint", cfg, params, mrope),
                      ("Qwen3.5-0.8B", official_cfg, official_params, official_mrope)):
    n = len(m.inv_freq)
    print(f"  {name}: head_dim {c.head_dim} x {c.partial_rotary_factor} = {2 * n} rotated dims, "
          f"{n} frequencies = {' + '.join(map(str, p['mrope_section']))} (time + height + width)")

# which position each frequency reads: interleaved (Qwen3.5) or in blocks (Qwen2-VL)
sections = official_params["mrope_section"]
interleaved = official_mrope.axis.tolist()
blocks = [a for a, s in enumerate(sections) for _ in range(s)]
print("the axis each frequency j reads (T time, H height, W width):")
print("  this checkpoint, interleaved:", "".join(AXES[a] for a in mrope.axis.tolist()))
print("  Qwen3.5-0.8B, interleaved:   ", "".join(AXES[a] for a in interleaved))
print("  Qwen2-VL's contiguous blocks:", "".join(AXES[a] for a in blocks))
print("  frequencies per axis, interleaved:", [interleaved.count(a) for a in range(3)],
      "blocks:", [blocks.count(a) for a in range(3)])

# text: all three positions equal, and M-RoPE is chapter 4's RoPE, bit for bit
same = []
for c, m in ((cfg, mrope), (official_cfg, official_mrope)):
    p = torch.arange(4096)
    one = RotaryEmbedding(c.head_dim, c.partial_rotary_factor, c.rope_theta)(p)
    three = m(p.expand(3, 1, -1))                               # t = h = w = p
    same.append(all(torch.equal(a, b[0]) for a, b in zip(one, three)))
print(f"text, t = h = w = p for p < 4096: M-RoPE's cos and sin equal chapter 4's bit for bit: "
      f"{same[0]} (this checkpoint), {same[1]} (0.8B shapes)")

# the prompt: a chat turn with the photograph
tokens = vlm.vision_tokens(path)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
print("config.json's vision tokens:",
      ", ".join(f"{tok.id_to_token(i)} {i}" for i in tokens.values()))
photo = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
merge = read_json(path / "config.json")["vision_config"]["spatial_merge_size"]
images = vlm.read_images([photo], path)
n = images.tokens(merge)[0]
_, gh, gw = images.grid[0].tolist()
h, w = gh // merge, gw // merge
print(f"the photograph: grid_thw {images.grid[0].tolist()} patches -> {h} x {w} = {n} tokens")
question = "Who is this?"
ids = vlm.image_chat_ids(tok, [{"role": "user", "content": question, "images": [n]}], tokens)
positions, deltas = rope_index(torch.tensor([ids]), images.grid, tokens["image_pad"], merge)
pos = positions[:, 0]                                           # [3, T]
T = len(ids)
start = ids.index(tokens["image_pad"])
end = start + n                                                 # the first token after the image
print(f"prompt: {T} tokens; the image's {n} tokens are {start} .. {end - 1}")
print(f"  {'index':>5}  {'token':<18} {'t':>3} {'h':>3} {'w':>3}")
shown = [*range(start), *range(start, start + 3), None, *range(start + w - 1, start + w + 2),
         None, *range(end - 2, min(T, end + 4)), None, T - 1]
for i in shown:
    if i is None:
        print("  ...")
        continue
    t_, h_, w_ = pos[:, i].tolist()
    print(f"  {i:>5}  {tok.id_to_token(ids[i])!r:<18} {t_:>3} {h_:>3} {w_:>3}")
after = pos[0, end].item()
print(f"after the image: position {after} = {start} + max({h}, {w}), not {start} + {n} = "
      f"{start + n}")
print(f"largest position {pos.max().item()} with {T} tokens: delta = {deltas[0]}")
print(f"the first generated token, at index {T}, takes t = h = w = {T} + ({deltas[0]}) = "
      f"{T + deltas[0]}")

# an image token's frequencies read three different positions
last = pos[:, end - 1]
print(f"token {end - 1} at (t, h, w) = {tuple(last.tolist())}: the position frequency j reads:",
      " ".join(f"{j}:{AXES[a]}={last[a].item()}" for j, a in enumerate(mrope.axis.tolist())))

# the figure: the 0.8B's preprocessor_config.json on the same photograph (no weights involved)
big = vlm.read_images([photo], OFFICIAL)
big_n = big.tokens(merge)[0]
big_ids = vlm.image_chat_ids(tok, [{"role": "user", "content": question, "images": [big_n]}],
                             tokens)
big_pos = rope_index(torch.tensor([big_ids]), big.grid, tokens["image_pad"], merge)[0][:, 0]
big_start = big_ids.index(tokens["image_pad"])
_, bh, bw = (big.grid[0] // torch.tensor([1, merge, merge])).tolist()

# why interleave: the fastest frequency each axis gets, and how far it turns across the photograph
inv = official_mrope.inv_freq
fastest = {}
print(f"Qwen3.5-0.8B's preprocessing: the photograph is {bh} x {bw} tokens; the fastest "
      "frequency of each axis, and its turn from the first column to the last:")
for name, layout in (("interleaved", interleaved), ("blocks", blocks)):
    fastest[name] = [min(j for j, a in enumerate(layout) if a == axis) for axis in range(3)]
    j_t, j_h, j_w = fastest[name]
    print(f"  {name:11}: " + ", ".join(
        f"{AXES[a]} j = {j} ({2 * math.pi / inv[j].item():,.1f} tokens a turn)"
        for a, j in enumerate(fastest[name]))
        + f"; across {bw} columns W turns {(bw - 1) * inv[j_w].item():.2g} rad")
record(sections=str(sections), n_freq=len(official_mrope.inv_freq),
       axis_string="".join(AXES[a] for a in interleaved),
       blocks_string="".join(AXES[a] for a in blocks),
       here_sections=str(params["mrope_section"]), here_n_freq=len(mrope.inv_freq),
       here_axis_string="".join(AXES[a] for a in mrope.axis.tolist()),
       text_equal=str(all(same)), vision_start=tokens["vision_start"],
       image_pad=tokens["image_pad"], vision_end=tokens["vision_end"],
       grid=f"{gh} × {gw}", h=h, w=w, n=n, T=T, start=start, after=after,
       count_after=start + n, max_pos=pos.max().item(), delta=deltas[0],
       first_new=T + deltas[0], official_h=bh, official_w=bw, official_max=max(bh, bw),
       official_n=big_n,
       blocks_w_j=fastest["blocks"][2],
       blocks_w_turn=f"{2 * math.pi / inv[fastest['blocks'][2]].item():,.0f}",
       blocks_w_rad=f"{(bw - 1) * inv[fastest['blocks'][2]].item():.2g}",
       interleaved_w_rad=f"{(bw - 1) * inv[fastest['interleaved'][2]].item():.2g}")


def draw(t):
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 5.6), height_ratios=[3, 1.2])
    x = range(len(big_ids))
    names = (t("时间 t", "time t"), t("高 h（行）", "height h (row)"),
             t("宽 w（列）", "width w (column)"))
    for row, name in zip(big_pos.tolist(), names):
        a.step(x, row, where="mid", lw=1, label=name)
    a.plot(x, x, color="gray", ls=":", lw=1, label=t("词元序号", "token index"))
    a.axvspan(big_start - 0.5, big_start + big_n - 0.5, color="C7", alpha=0.12)
    a.text(big_start + big_n / 2, big_pos.max().item() * 0.7,
           t(f"图像：{bh} × {bw} = {big_n} 个词元", f"image: {bh} × {bw} = {big_n} tokens"),
           ha="center", va="top", fontsize=9)
    a.set_ylim(0, big_pos.max().item() + 12)
    a.set_xlabel(t("提示词里的词元序号", "token index in the prompt"))
    a.set_ylabel(t("位置", "position"))
    a.set_title(t(f"带一张图像的对话提示词的三条位置轴"
                  f"（Qwen3.5-0.8B 的预处理，共 {len(big_ids)} 个词元）",
                  f"The three position axes over a chat prompt with an image "
                  f"(Qwen3.5-0.8B's preprocessing, {len(big_ids)} tokens)"), fontsize=10)
    a.legend(fontsize=8, loc="upper center", ncol=4, frameon=False)
    colors = ListedColormap(["#1f77b4", "#ff7f0e", "#2ca02c"])
    b.imshow([interleaved, blocks], aspect="auto", cmap=colors, vmin=0, vmax=2)
    for r, axes in enumerate((interleaved, blocks)):
        for j, ax_ in enumerate(axes):
            b.text(j, r, AXES[ax_], ha="center", va="center", fontsize=7, color="white")
    b.set_yticks([0, 1], [t("交错（Qwen3.5）", "interleaved (Qwen3.5)"),
                          t("分块（Qwen2-VL）", "blocks (Qwen2-VL)")])
    b.set_xticks(range(0, len(interleaved), 4))
    b.set_xlabel(t(f"频率编号 j（0 最快，{len(interleaved) - 1} 最慢）：T 时间，H 高，W 宽",
                   f"frequency j (0 fastest, {len(interleaved) - 1} slowest): "
                   "T time, H height, W width"))
    a.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


save_figure("ch25_mrope_positions", draw)
