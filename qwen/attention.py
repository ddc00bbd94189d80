"""Gated attention: causal softmax attention with grouped KV heads, q/k norms, partial RoPE
and an output gate."""
# --8<-- [start:init]
import torch
import torch.nn as nn

from qwen.norm import RMSNorm
from qwen.rope import apply_rope


class Attention(nn.Module):
    """Every token reads the tokens before it, weighted by softmax(q . k / sqrt(head_dim))."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        # query and gate
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_head * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)      # per head, before RoPE
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
    # --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(self, x, cos, sin, cache=None):
        B, T, _ = x.shape
        q, gate, k, v = self.project(x)
        q = self.q_norm(q).transpose(1, 2)                                  # [B, nh, T, hd]
        k = self.k_norm(k).transpose(1, 2)                                  # [B, nkv, T, hd]
        v = v.transpose(1, 2)                                               # [B, nkv, T, hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v)                                       # [B, nkv, S, hd]
        y = self.attend(q, k, v).transpose(1, 2).reshape(B, T, -1)          # [B, T, nh * hd]
        # the gate can shut a channel to zero
        return self.o_proj(y * torch.sigmoid(gate))

    def project(self, x):
        """The query [B, T, nh, hd], its gate [B, T, nh * hd], keys and values [B, T, nkv, hd]."""
        B, T, _ = x.shape
        nh, nkv, hd = self.n_head, self.n_kv_head, self.head_dim
        # per head: [query | gate], hd each
        q, gate = self.q_proj(x).view(B, T, nh, 2 * hd).chunk(2, dim=-1)
        k = self.k_proj(x).view(B, T, nkv, hd)
        v = self.v_proj(x).view(B, T, nkv, hd)
        return q, gate.reshape(B, T, nh * hd), k, v

    def attend(self, q, k, v):
        """softmax(q k^T / sqrt(hd)) v, causal: q [B, nh, T, hd], k and v [B, nkv, S, hd]."""
        nh, T, hd = q.shape[1:]
        S = k.shape[2]                                                      # S = past + T
        # GQA: q head j reads kv head j // (nh/nkv)
        k = k.repeat_interleave(nh // k.shape[1], dim=1)
        v = v.repeat_interleave(nh // v.shape[1], dim=1)                    # [B, nh, S, hd]
        att = (q @ k.transpose(-2, -1)) * hd**-0.5                          # [B, nh, T, S]
        # query i sits at position S - T + i
        causal = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        att = att.masked_fill(~causal, float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        return att @ v                                                      # [B, nh, T, hd]
    # --8<-- [end:forward]
