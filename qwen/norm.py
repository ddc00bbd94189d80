"""RMSNorm, twice: the zero-centred one scales by 1 + w, the gated one (DeltaNet's output) by w
and a SiLU gate."""
# --8<-- [start:rmsnorm]
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """x / rms(x) * (1 + w), computed in fp32 and cast back to the input dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))                # an offset: w = 0 means scale 1

    def forward(self, x):
        x32 = x.float()
        # every vector now has rms 1
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1 + self.weight.float())).type_as(x)
# --8<-- [end:rmsnorm]


# --8<-- [start:gated]
class RMSNormGated(nn.Module):
    """w * x / rms(x) * silu(z): normalise first, then let the gate z decide how much passes."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))                # a plain scale, no 1 +

    def forward(self, x, z):
        x32 = x.float()
        x = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)
        return (self.weight * x * F.silu(z.float())).type_as(x)
# --8<-- [end:gated]
