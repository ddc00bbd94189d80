"""M-RoPE: three positions per token (time, height, width); text has all three equal."""
# --8<-- [start:mrope]
import torch

from qwen.rope import RotaryEmbedding


class MRotaryEmbedding(RotaryEmbedding):
    """Chapter 4's rotary embedding, with each frequency turned by one of three positions.
    sections [11, 11, 10]: frequency j reads height if j % 3 == 1 (11 of them), width if
    j % 3 == 2 (10), time otherwise: the three axes interleaved, each over the whole range."""

    def __init__(self, head_dim, partial_rotary_factor, theta, sections):
        super().__init__(head_dim, partial_rotary_factor, theta)
        n = len(self.inv_freq)                                  # 0.8B: 32 frequencies
        if sum(sections) != n:
            raise ValueError(f"mrope_section {list(sections)} sums to {sum(sections)}, not to "
                             f"the {n} rotated frequencies")
        j = torch.arange(n)
        axis = torch.zeros(n, dtype=torch.long)                 # 0: time
        axis[(j % 3 == 1) & (j < 3 * sections[1])] = 1          # height
        axis[(j % 3 == 2) & (j < 3 * sections[2])] = 2          # width
        self.register_buffer("axis", axis, persistent=False)

    def forward(self, positions):             # [3, B, T] -> cos, sin [B, T, dim]
        # each frequency's angle: its own axis' position times the frequency
        angle = positions.float().permute(1, 2, 0)[..., self.axis] * self.inv_freq
        angle = torch.cat([angle, angle], dim=-1)
        return angle.cos(), angle.sin()
# --8<-- [end:mrope]


# --8<-- [start:rope_index]
def rope_index(ids, grids, image_token_id, merge_size=2):
    """positions [3, B, T] for token ids [B, T] whose image tokens (runs of image_token_id) take
    the images of `grids` [images, 3] in order, and each row's delta: how far its next position
    is ahead of its length (text after an image continues from the image's largest position).
    """
    positions = torch.zeros(3, *ids.shape, dtype=torch.long)
    deltas, images = [], iter(grids.tolist())
    for b, row in enumerate(ids.tolist()):
        i, next_pos = 0, 0
        while i < len(row):
            if row[i] != image_token_id:                        # text: t = h = w = position
                positions[:, b, i] = next_pos
                i, next_pos = i + 1, next_pos + 1
                continue
            t, h, w = next(images, (None, None, None))
            if t is None:
                raise ValueError("the prompt has more image tokens than there are images")
            h, w = h // merge_size, w // merge_size             # in tokens of the text
            n = t * h * w
            if row[i:i + n] != [image_token_id] * n:
                raise ValueError(f"an image of {h} x {w} tokens needs {n} image tokens in a row "
                                 "in the prompt: build it with qwen.vlm.image_ids")
            tt, hh, ww = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w),
                                        indexing="ij")
            positions[:, b, i:i + n] = next_pos + torch.stack([tt, hh, ww]).reshape(3, n)
            i, next_pos = i + n, next_pos + max(h, w)           # past the image's largest
        deltas.append(next_pos - len(row))
    if next(images, None) is not None:
        raise ValueError("there are more images than runs of image tokens in the prompt")
    return positions, deltas
# --8<-- [end:rope_index]
