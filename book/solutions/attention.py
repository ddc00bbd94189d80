"""Solutions to the three exercises of the attention lesson (docs/*/lessons/attention.ipynb)."""

# the lessons show this code with its comments aligned in columns, which the
# formatter would undo (as for qwen/); ruff check still holds it to the rules
# fmt: off
import torch


def causal_attention(q, k, v):
    """Exercise 1: softmax(q k^T / sqrt(d)) v, each token reading itself and the tokens before
    it."""
    T, d = q.shape[-2:]
    scores = q @ k.transpose(-2, -1) / d**0.5                         # [..., T, T]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)               # above the diagonal
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)   # mask, then softmax
    return weights @ v                                                # [..., T, d]


def grouped_attention(q, k, v):
    """Exercise 2: causal attention of q [..., n_q, T, d] over k, v [..., n_kv, T, d], each KV
    head shared by n_q / n_kv neighbouring query heads."""
    group = q.shape[-3] // k.shape[-3]
    k = k.repeat_interleave(group, dim=-3)                            # KV head j // group
    v = v.repeat_interleave(group, dim=-3)                            # [..., n_q, T, d]
    return causal_attention(q, k, v)


def cached_attention(q, k, v):
    """Exercise 3: the T newest queries q [..., T, d] over all S keys and values k, v [..., S, d]
    (the cache, then the new ones)."""
    T, d = q.shape[-2:]
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / d**0.5                         # [..., T, S]
    # query i sits at position S - T + i and reads keys 0 .. S - T + i
    future = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
