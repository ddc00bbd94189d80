"""Chapter 24: the vision tower. Patch rows in, one vector of the text's width per 2 x 2 patches."""
from pathlib import Path

import torch
from matplotlib import cbook

from book.out import record, record_error, save_figure
from qwen.image import ImageConfig, open_image, preprocess
from qwen.vision import (
    VISUAL,
    VisionConfig,
    VisionModel,
    load_vision_weights,
    merge_order,
    patch_rows_cols,
    resample,
    vision_from_pretrained,
)
from qwen.weights import find_model, load

torch.manual_seed(0)
path = find_model()
OFFICIAL = Path("book/data/qwen3.5-0.8b")     # the official config files, no weights


def count(module):
    return sum(w.numel() for w in module.parameters())


# Qwen3.5-0.8B's tower from its config.json, on the meta device (shapes, no weights)
with torch.device("meta"):
    big = VisionModel(VisionConfig.load(OFFICIAL))
bc = big.cfg
side = round(bc.num_position_embeddings**0.5)
print(f"Qwen3.5-0.8B vision_config: {bc.depth} blocks, width {bc.hidden_size}, {bc.num_heads} "
      f"heads of {bc.hidden_size // bc.num_heads}, MLP {bc.intermediate_size}, position table "
      f"{side} x {side}, out {bc.out_hidden_size}")
parts = {"patch_embed": count(big.patch_embed), "pos_embed": count(big.pos_embed),
         "blocks": count(big.blocks), "merger": count(big.merger)}
for name, n in parts.items():
    print(f"  {name:12} {n:>12,}  {n / count(big):6.1%}")
print(f"  {'total':12} {count(big):>12,}")

visual = vision_from_pretrained(path)        # model.visual.*, with the loader's checks
cfg = visual.cfg
icfg = ImageConfig.load(path)
print(f"this checkpoint's tower: {cfg.depth} blocks, width {cfg.hidden_size}, {cfg.num_heads} "
      f"heads, patch {cfg.patch_size}, table {cfg.num_position_embeddings} rows, "
      f"out {cfg.out_hidden_size}; {count(visual):,} parameters")

photo = open_image(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
images = preprocess([photo], icfg)
(t, h, w), = images.grid.tolist()
x = images.pixels
print(f"the photograph: patch rows {tuple(x.shape)}, grid_thw {[t, h, w]}")

# 1. the patch embedding: a Conv3d whose kernel is its stride, i.e. one matmul
p, tp = cfg.patch_size, cfg.temporal_patch_size
with torch.no_grad():
    conv = visual.patch_embed.proj(x.view(-1, 3, tp, p, p)).flatten(1)     # [N, hidden]
    mm = x @ visual.patch_embed.proj.weight.flatten(1).T + visual.patch_embed.proj.bias
print(f"patch embedding: Conv3d weight {tuple(visual.patch_embed.proj.weight.shape)} flattened "
      f"to {tuple(visual.patch_embed.proj.weight.flatten(1).shape)}; conv {tuple(conv.shape)}, "
      f"matmul {tuple(mm.shape)}, largest difference "
      f"{record_error('conv_vs_matmul', (conv - mm).abs().max(), below=1e-5)}")

# 2. the learned position table, stretched to each image's grid
table = visual.pos_embed.weight
s = round(table.shape[0] ** 0.5)
grid = resample(table, h, w)                                                # [h, w, hidden]
corners = all(torch.allclose(grid[i, j], table[k], atol=1e-6)
              for i, j, k in ((0, 0, 0), (0, -1, s - 1), (-1, 0, s * (s - 1)), (-1, -1, -1)))
same = torch.equal(resample(table, s, s).reshape(-1, table.shape[1]), table)
print(f"position table {tuple(table.shape)} = {s} x {s}; resampled to the photograph's {h} x {w}: "
      f"{tuple(grid.shape)}; the four corners are the table's: {corners}; "
      f"resampled to {s} x {s} it is the table itself: {same}")
print(f"  official: {side} x {side} = {bc.num_position_embeddings} rows, resampled to each grid")

# 3. 2-D rotary: half the frequencies turn with the row, half with the column
rows, cols = patch_rows_cols(images.grid, cfg.spatial_merge_size)
cos, sin = visual.rotary(rows, cols)
n_freq = len(visual.rotary.inv_freq)
print(f"rotary: head_dim {cfg.hidden_size // cfg.num_heads}, {n_freq} frequencies for rows + "
      f"{n_freq} for columns; cos {tuple(cos.shape)}")
print(f"  the first 8 patches (merger's order), (row, col): "
      f"{list(zip(rows[:8].tolist(), cols[:8].tolist()))}")

# 4. each image's patches attend to their own image only
other = preprocess([photo.rotate(90, expand=True).resize((48, 64))], icfg)
changed = preprocess([photo.resize((48, 64))], icfg)
n_a = len(x)
with torch.no_grad():
    both = visual(torch.cat([x, other.pixels]), torch.cat([images.grid, other.grid]))
    again = visual(torch.cat([x, changed.pixels]), torch.cat([images.grid, changed.grid]))
    alone = visual(x, images.grid)
    attn = visual.blocks[0].attn
    y = visual.blocks[0].norm1(visual.patch_embed(torch.cat([x, other.pixels])))
    grid2 = torch.cat([images.grid, other.grid])
    c2, s2 = visual.rotary(*patch_rows_cols(grid2, cfg.spatial_merge_size))
    per_image = attn(y, c2, s2, [n_a, len(other.pixels)])
    one_mask = attn(y, c2, s2, [len(y)])
k = n_a // 4                                                                # the photo's tokens
print(f"two images in one batch, grids {grid2.tolist()}: out {tuple(both.shape)}")
print(f"  the second image changed: the photograph's {k} tokens change by "
      f"{(both[:k] - again[:k]).abs().max():.1e}, the second image's by "
      f"{(both[k:] - again[k:]).abs().max():.2f}")
print(f"  the photograph alone: its tokens differ by "
      f"{record_error('alone_vs_batch', (both[:k] - alone).abs().max(), below=1e-5)}")
print(f"  one attention over both images instead would change the photograph's patches by "
      f"{(per_image[:n_a] - one_mask[:n_a]).abs().max():.2f}")

# 5. the blocks, then the 2 x 2 merger into the text model's width
with torch.no_grad():
    z = visual.patch_embed(x) + merge_order(grid, cfg.spatial_merge_size)
    for block in visual.blocks:
        z = block(z, cos, sin, [h * w])
    out = visual.merger(z)
print(f"blocks: {tuple(z.shape)} -> merger: 4 rows of {cfg.hidden_size} side by side = "
      f"{visual.merger.linear_fc1.in_features} -> {tuple(out.shape)}; the same as the model: "
      f"{torch.equal(out, alone)}")
op = preprocess([photo], ImageConfig.load(OFFICIAL))
(_, oh, ow), = op.grid.tolist()
print(f"  official: the photograph is {oh} x {ow} = {oh * ow:,} patches -> {oh * ow // 4} tokens "
      f"of {bc.out_hidden_size}")

# 6. the loader refuses a damaged checkpoint with one line
W = load_vision_weights(path)
print(f"load_vision_weights: {len(W)} tensors under {VISUAL}; damaged copies are refused:")
damaged = {"missing": {k: v for k, v in W.items() if not k.endswith("merger.linear_fc2.bias")},
           "extra": {**W, VISUAL + "blocks.9.norm1.weight": torch.ones(cfg.hidden_size)},
           "shape": {**W, VISUAL + "merger.linear_fc2.weight": torch.ones(2, 2)}}
said = {}
for name, bad in damaged.items():
    try:
        load(VisionModel(cfg), bad, VISUAL)
    except Exception as e:
        said[name] = str(e).splitlines()[-1].strip()             # the line that names the tensor
        print(f"  {name}: {said[name]}")

record(official_params=f"{count(big):,}", official_blocks=f"{parts['blocks']:,}",
       official_blocks_share=f"{parts['blocks'] / count(big):.1%}",
       official_patch_embed=f"{parts['patch_embed']:,}",
       official_pos_embed=f"{parts['pos_embed']:,}",
       official_merger=f"{parts['merger']:,}", official_side=side,
       official_head_dim=bc.hidden_size // bc.num_heads, official_grid=f"{oh} × {ow}",
       official_patches=f"{oh * ow:,}", official_tokens=oh * ow // 4,
       params=f"{count(visual):,}", side=s, grid=f"{h} × {w}", patches=f"{h * w:,}",
       tokens=out.shape[0], n_freq=n_freq, out_width=cfg.out_hidden_size,
       corners=str(corners), other_grid=f"{other.grid[0, 1]} × {other.grid[0, 2]}",
       changed_photo=f"{(both[:k] - again[:k]).abs().max():.1e}",
       changed_other=f"{(both[k:] - again[k:]).abs().max():.2f}",
       one_mask=f"{(per_image[:n_a] - one_mask[:n_a]).abs().max():.2f}",
       missing_says=said["missing"], extra_says=said["extra"], shape_says=said["shape"])


# the figure: one channel of the table, and the same channel stretched to two grids
def draw(t_):
    import matplotlib.pyplot as plt

    wide = resample(table, 6, 14)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1, 1, 1.6]})
    shown = [(table[:, 0].view(s, s), t_(f"学到的位置表：{s} × {s}（第 0 维）",
                                         f"The learned table: {s} × {s} (dim 0)")),
             (grid[..., 0], t_(f"拉伸到照片的 {h} × {w}",
                               f"Stretched to the photograph's {h} × {w}")),
             (wide[..., 0], t_("拉伸到 6 × 14", "Stretched to 6 × 14"))]
    lo, hi = table[:, 0].min().item(), table[:, 0].max().item()
    for ax, (img, title) in zip(axes, shown):
        ax.imshow(img.detach().numpy(), cmap="RdBu", vmin=lo, vmax=hi, interpolation="none")
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        H, W_ = img.shape
        for cy, cx in ((0, 0), (0, W_ - 1), (H - 1, 0), (H - 1, W_ - 1)):   # the corners agree
            ax.plot(cx, cy, "o", mfc="none", mec="black", ms=7)
    fig.suptitle(t_("双线性插值，align_corners：四个角的图块正好取表的四个角（圆圈）",
                    "Bilinear, align_corners: the corner patches take the table's corners "
                    "(circles)"), fontsize=10)
    fig.tight_layout()
    return fig


save_figure("ch24_positions", draw)
