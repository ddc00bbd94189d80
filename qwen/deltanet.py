"""Gated DeltaNet: linear attention whose fixed-size state is decayed and corrected by the delta
rule at every token."""
# --8<-- [start:imports]
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.norm import RMSNormGated

# --8<-- [end:imports]


# --8<-- [start:l2norm]
def l2norm(x, eps=1e-6):
    """x / |x| along the last dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)
# --8<-- [end:l2norm]


# --8<-- [start:recurrent]
def recurrent_gated_delta_rule(q, k, v, g, beta, state=None):
    """The gated delta rule one token at a time.
    q, k [B, H, T, dk], v [B, H, T, dv], g, beta [B, H, T]."""
    B, H, T, dk = k.shape
    S = (torch.zeros(B, H, dk, v.shape[-1], dtype=v.dtype, device=v.device)
         if state is None else state)
    out = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()                      # forget: decay S by alpha_t
        pred = torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)       # what S holds for k_t [B, H, dv]
        u = beta[:, :, t, None] * (v[:, :, t] - pred)             # delta rule: write only the error
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], u)      # rank-1 update [B, H, dk, dv]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], S))  # read with the query
    return torch.stack(out, dim=2), S                             # [B, H, T, dv], [B, H, dk, dv]
# --8<-- [end:recurrent]


# --8<-- [start:chunk]
class Chunks(NamedTuple):
    """A prompt cut into n chunks of C steps, with what every chunk needs that the state does not
    change, all chunks at once: tensors [B, H, n, C, ...] (end: [B, H, n])."""
    M: torch.Tensor       # I + (beta K K^T) * Gamma, strictly below the diagonal [C, C]
    vb: torch.Tensor      # beta V, the right-hand side of U
    kg: torch.Tensor      # beta e^gamma K, the right-hand side of W
    attn: torch.Tensor    # (Q K^T) * Gamma, causal and decayed
    q_in: torch.Tensor    # e^gamma Q: queries read S decayed to step i
    k_out: torch.Tensor   # e^(gamma_C - gamma) K: keys decayed to the chunk's end
    end: torch.Tensor     # e^gamma_C: the whole chunk's decay of S
    T: int                # the steps before padding


def chunked(q, k, v, g, beta, C=64, exp=torch.exp):
    """The inputs of the chunked rule, cut into chunks, and every term that does not need S."""
    B, H, T, dk = k.shape
    pad = -T % C                                            # zero steps (beta = g = 0): no change
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (T + pad) // C
    q, k, v = (x.view(B, H, n, C, -1) for x in (q, k, v))   # [B, H, n, C, d]
    g, beta = g.view(B, H, n, C), beta.view(B, H, n, C)

    gamma = g.cumsum(-1)                                    # log decay from chunk start to step i
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    decay = exp((gamma[..., :, None] - gamma[..., None, :])  # [B, H, n, C, C]
                .masked_fill(~causal, float("-inf")))
    kb = k * beta[..., None]
    A = ((kb @ k.transpose(-1, -2)) * decay).tril(-1)       # step j's write changes step i's error
    M = A + torch.eye(C, dtype=A.dtype, device=A.device)    # unit lower triangular
    return Chunks(M, v * beta[..., None], kb * exp(gamma)[..., None],
                  (q @ k.transpose(-1, -2)) * decay, q * exp(gamma)[..., None],
                  k * exp(gamma[..., -1:] - gamma)[..., None], exp(gamma[..., -1]), T)


def chunk_gated_delta_rule(q, k, v, g, beta, state=None, chunk_size=64, exp=torch.exp):
    """The same rule, chunk by chunk: matrix products inside a chunk, one state update per chunk.
    `exp` makes every decay factor (chapter 15 passes one that cuts the smallest to zero)."""
    c = chunked(q, k, v, g, beta, chunk_size, exp)
    B, H, n, C, dv = c.vb.shape
    U = torch.linalg.solve_triangular(c.M, c.vb, upper=False)  # [B, H, n, C, dv]
    W = torch.linalg.solve_triangular(c.M, c.kg, upper=False)  # [B, H, n, C, dk]

    S = (torch.zeros(B, H, W.shape[-1], dv, dtype=v.dtype, device=v.device)
         if state is None else state)
    out = torch.empty(B, H, n, C, dv, dtype=v.dtype, device=v.device)
    for i in range(n):
        new_v = U[:, :, i] - W[:, :, i] @ S  # [B, H, C, dv] what the old state does not predict
        out[:, :, i] = c.q_in[:, :, i] @ S + c.attn[:, :, i] @ new_v
        S = S * c.end[:, :, i, None, None] + c.k_out[:, :, i].transpose(-1, -2) @ new_v
    return out.view(B, H, n * C, dv)[:, :, :c.T], S
# --8<-- [end:chunk]


# --8<-- [start:layer]
class GatedDeltaNet(nn.Module):
    """Project, short causal conv, the gated delta rule per head, gated norm, project back."""

    def __init__(self, cfg):
        super().__init__()
        self.n_k_head, self.n_v_head = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.k_dim, self.v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        key_dim, value_dim = self.n_k_head * self.k_dim, self.n_v_head * self.v_dim
        self.conv_dim = 2 * key_dim + value_dim                     # q | k | v channels
        self.conv_kernel = cfg.linear_conv_kernel_dim
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, value_dim, bias=False)      # output gate
        self.in_proj_b = nn.Linear(cfg.hidden_size, self.n_v_head, bias=False)  # write strength
        self.in_proj_a = nn.Linear(cfg.hidden_size, self.n_v_head, bias=False)  # decay input
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.conv_kernel,
                                groups=self.conv_dim, bias=False)
        self.A_log = nn.Parameter(torch.empty(self.n_v_head))    # per head decay rate, log(A)
        self.dt_bias = nn.Parameter(torch.empty(self.n_v_head))  # per head shift of the decay input
        self.norm = RMSNormGated(self.v_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(value_dim, cfg.hidden_size, bias=False)

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        qkv, z, b, a = self.project(x)
        qkv = qkv.transpose(1, 2)                                   # [B, conv_dim, T]
        past = (qkv.new_zeros(B, self.conv_dim, self.conv_kernel - 1) if cache is None
                else cache.conv.to(qkv))
        qkv = torch.cat([past, qkv], dim=-1)                        # [B, conv_dim, K - 1 + T]
        if cache is not None:
            # the last K - 1 inputs, copied: a slice would keep the whole window alive
            cache.conv = qkv[..., qkv.shape[-1] - (self.conv_kernel - 1):].clone()
        qkv = F.silu(self.conv1d(qkv)).transpose(1, 2)              # causal conv: [B, T, conv_dim]
        q, k, v = qkv.split([self.n_k_head * self.k_dim] * 2 + [self.n_v_head * self.v_dim], dim=-1)
        q = q.reshape(B, T, self.n_k_head, self.k_dim).float()
        k = k.reshape(B, T, self.n_k_head, self.k_dim).float()
        v = v.reshape(B, T, self.n_v_head, self.v_dim).float()
        q, k = l2norm(q) * self.k_dim**-0.5, l2norm(k)
        # a key head serves n_v / n_k value heads
        q = q.repeat_interleave(self.n_v_head // self.n_k_head, dim=2)
        k = k.repeat_interleave(self.n_v_head // self.n_k_head, dim=2)
        beta = b.sigmoid().float()                                  # [B, T, n_v]  in (0, 1)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)   # log decay <= 0

        # heads first: [B, H, T, ...]
        q, k, v, g, beta = (t.transpose(1, 2) for t in (q, k, v, g, beta))
        state = None if cache is None else cache.state.to(v)
        o, state = self.delta_rule(q, k, v, g, beta, state)
        if cache is not None:
            cache.state = state
        o = o.transpose(1, 2).to(x.dtype)                           # [B, T, n_v, dv]
        o = self.norm(o, z.view(B, T, self.n_v_head, self.v_dim)).reshape(B, T, -1)
        return self.out_proj(o)                                     # [B, T, hidden]

    def project(self, x):
        """What the layer reads from x: q|k|v channels, the output gate z, write strength b and
        decay input a, [B, T, ...] each."""
        return self.in_proj_qkv(x), self.in_proj_z(x), self.in_proj_b(x), self.in_proj_a(x)

    def delta_rule(self, q, k, v, g, beta, state):
        """The recurrent form for one token after a cache, the chunked form for a prompt."""
        one_step = state is not None and q.shape[2] == 1
        rule = recurrent_gated_delta_rule if one_step else chunk_gated_delta_rule
        return rule(q, k, v, g, beta, state)
# --8<-- [end:layer]
