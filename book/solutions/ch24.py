"""Solutions to chapter 24's exercises (book/exercises/ch24.py checks them); the page shows each in
a collapsed block, included from the named sections below."""

# fmt: off
import torch
import torch.nn.functional as F


# --8<-- [start:ch24_resample]
def stretch(table, h, w):
    """[side * side, dim] -> [h, w, dim]，双线性 / bilinear, corners on corners."""
    side = round(table.shape[0] ** 0.5)
    grid = table.T.reshape(1, -1, side, side)                 # [1, dim, side, side]
    grid = F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=True)
    return grid[0].permute(1, 2, 0)                           # [h, w, dim]
# --8<-- [end:ch24_resample]


# --8<-- [start:ch24_image_mask]
def mask_of(cu_seqlens):
    """[0, n1, n1 + n2, ...] -> bool [N, N]，每张图一个方块 / one block per image."""
    n = cu_seqlens[-1]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        mask[start:end, start:end] = True                      # no causal mask inside
    return mask
# --8<-- [end:ch24_image_mask]


# --8<-- [start:ch24_patch_embed]
def embed(rows, weight, bias):
    """Conv3d(kernel = stride) = 一次矩阵乘 / one matmul: [N, C*t*p*p] -> [N, hidden]."""
    return rows @ weight.flatten(1).T + bias                  # kernel [C][t][y][x], as a row
# --8<-- [end:ch24_patch_embed]
