"""Solutions to chapter 25's exercises (book/exercises/ch25.py checks them); the page shows each in
a collapsed block, included from the named sections below."""

# fmt: off
import torch


# --8<-- [start:ch25_axes]
def axes(sections):
    """每个频率读哪条轴 / the axis of each frequency: 0 time, 1 height, 2 width."""
    t, h, w = sections
    out = []
    for j in range(t + h + w):
        if j % 3 == 1 and j < 3 * h:
            out.append(1)                                  # height
        elif j % 3 == 2 and j < 3 * w:
            out.append(2)                                  # width
        else:
            out.append(0)                                  # time: the rest
    return out
# --8<-- [end:ch25_axes]


# --8<-- [start:ch25_positions]
def positions(ids, h, w, image_token_id):
    """[3, T]：文本三轴相等，图像 (开始, 开始 + 行, 开始 + 列) / text equal, image offsets."""
    out = torch.zeros(3, len(ids), dtype=torch.long)
    i = next_pos = 0
    while i < len(ids):
        if ids[i] != image_token_id:                       # text: t = h = w
            out[:, i] = next_pos
            i, next_pos = i + 1, next_pos + 1
            continue
        for k in range(h * w):                             # row by row: row k // w, column k % w
            out[:, i + k] = torch.tensor([next_pos, next_pos + k // w, next_pos + k % w])
        i, next_pos = i + h * w, next_pos + max(h, w)      # on past the image's largest
    return out
# --8<-- [end:ch25_positions]


# --8<-- [start:ch25_decode]
def decode_position(positions, past):
    """第 past 个词元的位置 / the position of the token at index past: past + delta."""
    delta = positions.max().item() + 1 - positions.shape[1]   # <= 0 after an image
    return past + delta
# --8<-- [end:ch25_decode]
