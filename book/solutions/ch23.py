"""Solutions to chapter 23's exercises (book/exercises/ch23.py checks them); the page shows each in
a collapsed block, included from the named sections below."""

# fmt: off
import math

import torch


# --8<-- [start:ch23_smart_resize]
def resize(height, width, factor, min_pixels, max_pixels):
    """最近的 factor 倍数，面积放进 [min, max] / nearest multiples, area within the budget."""
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:                                 # shrink both sides by one beta
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:                               # grow both sides by one beta
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w
# --8<-- [end:ch23_smart_resize]


# --8<-- [start:ch23_patches]
def cut(pixels, p, t=2, m=2):
    """[3, H, W] -> [h * w, 3 * t * p * p], 2 x 2 块一块一块 / 2 x 2 block by block."""
    C, H, W = pixels.shape
    h, w = H // p, W // p                                  # patches down, across
    x = pixels.reshape(C, h // m, m, p, w // m, m, p)      # [C, bh, m, p, bw, m, p]
    x = x.permute(1, 4, 2, 5, 0, 3, 6)                     # [bh, bw, m, m, C, p, p]
    x = x.unsqueeze(5).expand(*x.shape[:5], t, p, p)       # t equal frames
    return x.reshape(h * w, C * t * p * p)                 # a row: [C][t][p][p]
# --8<-- [end:ch23_patches]


# --8<-- [start:ch23_normalize]
def normalize(pixels, mean, std):
    """(pixels / 255 - mean) / std，每个通道 / per channel."""
    x = pixels.float() / 255                               # [3, H, W] in [0, 1]
    return (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
# --8<-- [end:ch23_normalize]
