"""Solutions to the three exercises of the positional-encoding lesson
(docs/*/lessons/positional.ipynb)."""

# the lessons show this code with its comments aligned in columns, which the
# formatter would undo (as for qwen/); ruff check still holds it to the rules
# fmt: off
import math

import torch


def shift_matrix(k, dim, base=10_000.0):
    """Exercise 1: the [dim, dim] matrix M with M @ PE[p] == PE[p + k] for the sinusoidal table."""
    omega = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)     # [dim/2]
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    M = torch.zeros(dim, dim, dtype=torch.float64)
    M[0::2, 0::2] = torch.diag(c)          # sin((p+k)w) = sin(pw) cos(kw) + cos(pw) sin(kw)
    M[0::2, 1::2] = torch.diag(s)
    M[1::2, 0::2] = torch.diag(-s)         # cos((p+k)w) = cos(pw) cos(kw) - sin(pw) sin(kw)
    M[1::2, 1::2] = torch.diag(c)
    return M


def rotate_pairs(x, angle):
    """Exercise 2: turn each pair (x[i], x[i + d/2]) of x [..., d] by angle[..., i] (rotate-half
    pairing)."""
    x1, x2 = x.chunk(2, dim=-1)                                    # [..., d/2] each
    cos, sin = angle.cos(), angle.sin()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def wavelengths(head_dim, partial_rotary_factor, theta):
    """Exercise 3: tokens per full turn of each rotated pair, fastest first."""
    r = int(head_dim * partial_rotary_factor)                      # only r of head_dim dims turn
    omega = theta ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)   # [r/2] radians per token
    return 2 * math.pi / omega
