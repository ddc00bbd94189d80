"""Rotary position embedding: turn pairs of query/key dims by an angle that grows with position."""
# --8<-- [start:rotary]
import torch
import torch.nn as nn


class RotaryEmbedding(nn.Module):
    """cos and sin of position * inv_freq for the first head_dim * partial_rotary_factor dims."""

    def __init__(self, head_dim, partial_rotary_factor, theta):
        super().__init__()
        dim = int(head_dim * partial_rotary_factor)             # 0.8B: 256 * 0.25 = 64 rotated dims
        # dim/2 frequencies
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        # computed, not stored in the checkpoint
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions):
        angle = positions.float()[:, None] * self.inv_freq      # [T] -> [T, dim/2]
        # rotate-half: dims i and i + dim/2 share an angle
        angle = torch.cat([angle, angle], dim=-1)
        return angle.cos(), angle.sin()                         # [T, dim] each
# --8<-- [end:rotary]


# --8<-- [start:apply]
def rotate_half(x):
    """[x1, x2] -> [-x2, x1]: a quarter turn of each (x1[i], x2[i]) pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    """Rotate the first cos.shape[-1] dims of x [..., T, head_dim]; the rest pass unchanged."""
    dim = cos.shape[-1]
    x_rot, x_pass = x[..., :dim], x[..., dim:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x_rot * cos + rotate_half(x_rot) * sin, x_pass], dim=-1)
# --8<-- [end:apply]
