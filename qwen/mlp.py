"""The feed-forward block: SwiGLU, a SiLU gate multiplying an up projection, then back down."""
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        # [B, T, dim] -> [B, T, hidden] -> back
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
