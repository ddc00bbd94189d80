"""Chapter 23: pixels to patches. A photograph becomes rows of 3 x 2 x 16 x 16 numbers."""
import math
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from matplotlib import cbook
from PIL import Image
from safetensors import safe_open

from book.out import record, save_figure
from qwen.image import ImageConfig, open_image, preprocess, smart_resize, to_patches
from qwen.model import Qwen
from qwen.mtp import MTP
from qwen.vision import VisionConfig, VisionModel
from qwen.weights import Config, find_model, weight_files

path = find_model()
OFFICIAL = Path("book/data/qwen3.5-0.8b")     # the official config files, no weights


def part(name):
    """Which half of the checkpoint a tensor belongs to."""
    if name.startswith("model.visual."):
        return "vision tower"
    return "MTP head" if name.startswith("mtp.") else "text model"


# what the checkpoint holds: counted from the files' headers, nothing loaded
counted = Counter()
for file in weight_files(path):
    with safe_open(file, framework="pt") as f:
        for name in f.keys():
            counted[part(name)] += math.prod(f.get_slice(name).get_shape())
total = sum(counted.values())
print(f"this checkpoint: {total:,} parameters")
for p, n in counted.most_common():
    print(f"  {p:13} {n:>13,}  {n / total:6.1%}")

# the same for Qwen3.5-0.8B, built from its config.json on the meta device (shapes, no weights)
with torch.device("meta"):
    official = {"text model": Qwen(Config.load(OFFICIAL)),
                "vision tower": VisionModel(VisionConfig.load(OFFICIAL)),
                "MTP head": MTP(Config.load(OFFICIAL))}
sizes = {p: sum(w.numel() for w in m.parameters()) for p, m in official.items()}
official_total = sum(sizes.values())
print(f"Qwen3.5-0.8B from its config.json: {official_total:,} parameters")
for p, n in sizes.items():
    print(f"  {p:13} {n:>13,}  {n / official_total:6.1%}")
visual = official["vision tower"]
print("  its vision tower: "
      + ", ".join(f"{n} {sum(w.numel() for w in m.parameters()):,}"
                  for n, m in visual.named_children() if n != "rotary"))

cfg = ImageConfig.load(path)
print(f"preprocessor_config.json: pixels {cfg.min_pixels:,} to {cfg.max_pixels:,}, "
      f"patch {cfg.patch_size}, {cfg.temporal_patch_size} frames, merge {cfg.merge_size}, "
      f"mean {cfg.image_mean}, std {cfg.image_std}; sides multiples of {cfg.factor}")

# the photograph, step by step
image = open_image(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
H, W = smart_resize(image.height, image.width, cfg.factor, cfg.min_pixels, cfg.max_pixels)
print(f"photograph: {image.width} x {image.height} ({image.mode}) -> resized to {W} x {H}")
resized = image.resize((W, H), Image.Resampling.BICUBIC)            # PIL: width first
x = torch.from_numpy(np.asarray(resized, dtype=np.float32)).permute(2, 0, 1) / 255  # [3, H, W]
print(f"rescaled: from {x.min():.0f} to {x.max():.0f}")
mean, std = torch.tensor(cfg.image_mean).view(3, 1, 1), torch.tensor(cfg.image_std).view(3, 1, 1)
x = (x - mean) / std
print(f"normalized: {tuple(x.shape)}, from {x.min():.0f} to {x.max():.0f}")
rows, grid = to_patches(x, cfg)
p, t = cfg.patch_size, cfg.temporal_patch_size
print(f"patch rows {tuple(rows.shape)}: {grid[1]} x {grid[2]} patches of "
      f"3 x {t} x {p} x {p} = {rows.shape[1]} numbers; grid_thw {grid}")
frames = rows.view(-1, 3, t, p * p)
print("the 2 frames of every patch are equal:", torch.equal(frames[:, :, 0], frames[:, :, 1]))
images = preprocess([image], cfg)
print("the same as preprocess():", torch.equal(images.pixels, rows),
      f"-> {images.tokens(cfg.merge_size)[0]} tokens of text (t * h * w / 4)")

# the merger's order: patches numbered row by row, then stored 2 x 2 block by block
one = ImageConfig(patch_size=1, temporal_patch_size=1, merge_size=2)
ids = torch.arange(24.0).view(1, 4, 6).expand(3, 4, 6)               # h = 4, w = 6 patches
order = to_patches(ids, one)[0][:, 0].int().tolist()
print(f"a 4 x 6 grid, patches numbered row by row; rows stored: {order[:12]} ...")
print(f"  the merger joins rows 4k .. 4k + 3: {order[0:4]} is the 2 x 2 block at the top left, "
      f"row order would give it {list(range(4))}, a 1 x 4 strip")


def budget(c):
    """(name, width, height) -> resized width, height, patches h x w, tokens of text."""
    out = []
    for name, w, h in SIZES:
        rh, rw = smart_resize(h, w, c.factor, c.min_pixels, c.max_pixels)
        gh, gw = rh // c.patch_size, rw // c.patch_size
        out.append((name, w, h, rw, rh, gh, gw, gh * gw // c.merge_size**2))
    return out


SIZES = [("icon", 40, 30), ("photograph", image.width, image.height), ("full HD", 1920, 1080),
         ("12 MP photo", 4000, 3000), ("24 MP photo", 6000, 4000), ("tall", 300, 2000),
         ("wide", 3000, 200)]
official_cfg = ImageConfig.load(OFFICIAL)
tables = {"official": budget(official_cfg)}
if cfg != official_cfg:
    tables["this checkpoint"] = budget(cfg)
for which, table in tables.items():
    print(f"tokens per image, {which} preprocessor_config.json:")
    for name, w, h, rw, rh, gh, gw, n in table:
        print(f"  {name:12} {w:>5} x {h:<5} -> {rw:>5} x {rh:<5} {gh:>4} x {gw:<4} patches "
              f"-> {n:>6,} tokens")
*_, gh, gw, n = tables["official"][1]                               # the photograph
row = 3 * official_cfg.temporal_patch_size * official_cfg.patch_size**2
values = {"official_photo_grid": f"{gh} × {gw}", "official_photo_patches": f"{gh * gw:,}",
          "official_row_length": f"{row:,}"}
values |= {f"tokens_{w}x{h}": f"{n:,}" for _, w, h, *_, n in tables["official"]}
values |= {f"resized_{w}x{h}": f"{rw} × {rh}" for _, w, h, rw, rh, *_ in tables["official"]}
values |= {f"here_tokens_{w}x{h}": f"{n:,}" for _, w, h, *_, n in budget(cfg)}
values |= {f"here_resized_{w}x{h}": f"{rw} × {rh}" for _, w, h, rw, rh, *_ in budget(cfg)}
record(params=f"{total:,}", visual_params=f"{counted['vision tower']:,}",
       visual_share=f"{counted['vision tower'] / total:.1%}",
       official_total=f"{official_total:,}", official_text=f"{sizes['text model']:,}",
       official_visual=f"{sizes['vision tower']:,}", official_mtp=f"{sizes['MTP head']:,}",
       official_visual_share=f"{sizes['vision tower'] / official_total:.1%}",
       official_visual_mb=f"{2 * sizes['vision tower'] / 1e6:.0f}",
       photo_size=f"{image.width} × {image.height}", photo_resized=f"{W} × {H}",
       photo_grid=f"{grid[1]} × {grid[2]}", photo_patches=f"{rows.shape[0]:,}",
       photo_tokens=images.tokens(cfg.merge_size)[0], row_length=f"{rows.shape[1]:,}",
       factor=cfg.factor, min_pixels=f"{cfg.min_pixels:,}", max_pixels=f"{cfg.max_pixels:,}",
       patch_size=cfg.patch_size, **values)

# the figure: the photograph under the official preprocessor_config.json (no weights involved)
oH, oW = smart_resize(image.height, image.width, official_cfg.factor, official_cfg.min_pixels,
                      official_cfg.max_pixels)
shown = (image.resize((oW, oH), Image.Resampling.BICUBIC).convert("L")
         .resize((oW * 3 // 16, oH * 3 // 16), Image.Resampling.BOX))   # preview: 3 px a patch


def grid_panel(ax, h, w, number, title):
    """An h x w grid of patches, each labelled with the row it is stored in, blocks outlined."""
    import matplotlib.patches as mpatches

    for r in range(h):
        for c in range(w):
            block = (r // 2) * (w // 2) + c // 2
            ax.add_patch(mpatches.Rectangle((c, r), 1, 1, facecolor=f"C{block % 10}", alpha=0.25,
                                            edgecolor="white", lw=1))
            ax.text(c + 0.5, r + 0.5, str(number[r][c]), ha="center", va="center", fontsize=9)
    for br in range(0, h, 2):
        for bc in range(0, w, 2):
            ax.add_patch(mpatches.Rectangle((bc, br), 2, 2, fill=False, edgecolor="black", lw=1.6))
    stored = sorted((number[r][c], c + 0.5, r + 0.5) for r in range(h) for c in range(w))
    first = [(x, y) for _, x, y in stored[:4]]          # the 4 rows the merger joins first
    x0, y0 = min(x for x, _ in first) - 0.45, min(y for _, y in first) - 0.45
    ax.add_patch(mpatches.Rectangle((x0, y0), max(x for x, _ in first) + 0.45 - x0,
                                    max(y for _, y in first) + 0.45 - y0, fill=False,
                                    edgecolor="#d32f2f", lw=2, ls="--"))
    ax.plot([s[1] for s in stored[:8]], [s[2] for s in stored[:8]], color="black", lw=0.8,
            alpha=0.6)
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)


def draw(t):
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 6.2))
    a = fig.add_axes([0.0, 0.0, 0.5, 0.92])
    b = fig.add_axes([0.55, 0.46, 0.42, 0.34])
    c = fig.add_axes([0.55, 0.02, 0.42, 0.34])
    pp, m = official_cfg.patch_size, official_cfg.merge_size
    a.imshow(shown, cmap="gray", extent=(0, oW, oH, 0), interpolation="none")
    for i in range(0, oW + 1, pp):
        a.axvline(i, color="white", lw=0.3, alpha=0.6)
    for j in range(0, oH + 1, pp):
        a.axhline(j, color="white", lw=0.3, alpha=0.6)
    for i in range(0, oW + 1, pp * m):                         # the 2 x 2 blocks
        a.axvline(i, color="#ff9800", lw=0.7)
    for j in range(0, oH + 1, pp * m):
        a.axhline(j, color="#ff9800", lw=0.7)
    bw, bh = oW // (pp * m), oH // (pp * m)
    for k in [*range(bw), *range(bw, bw * bh, bw), bw * bh - 1]:  # top row, left edge, last
        a.text((k % bw + 0.5) * pp * m, (k // bw + 0.5) * pp * m, str(k), ha="center",
               va="center", fontsize=5.5, color="white",
               bbox=dict(facecolor="black", alpha=0.45, pad=0.6, lw=0))
    a.set_xlim(0, oW)
    a.set_ylim(oH, 0)
    a.set_xticks([])
    a.set_yticks([])
    a.set_title(t(f"缩放到 {oW} × {oH}：{oH // pp} × {oW // pp} 个 {pp}×{pp} 图块\n"
                  f"{bw * bh} 个 2×2 合并块 = {bw * bh} 个 token，按存放顺序编号",
                  f"Resized to {oW} × {oH}: {oH // pp} × {oW // pp} patches of {pp}×{pp}\n"
                  f"{bw * bh} blocks of 2×2 = {bw * bh} tokens, numbered in the order stored"),
              fontsize=9)
    merged = [[0] * 6 for _ in range(4)]
    for i, k in enumerate(order):
        merged[k // 6][k % 6] = i
    grid_panel(b, 4, 6, merged, t("合并器的顺序：按 2×2 合并块一块一块存（本章用的）",
                                  "The merger's order: 2×2 block by block (used here)"))
    grid_panel(c, 4, 6, [[r * 6 + q for q in range(6)] for r in range(4)],
               t("逐行的顺序：前 4 行是 1×4 的一条，不是一个合并块",
                 "Row by row: rows 0–3 are a 1×4 strip, not a block"))
    fig.text(0.76, 0.92, t("一张 4 × 6 图块的图：格子里的数 = 存在第几行\n"
                           "红框 = 合并器拼成第一个 token 的 4 行",
                           "A 4 × 6 patch grid: the number = the row it is stored in\n"
                           "red = the 4 rows the merger joins into token 0"),
             ha="center", fontsize=9)
    return fig


save_figure("ch23_photo_patches", draw)
