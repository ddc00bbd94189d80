"""What the model keeps between calls: growing keys and values, and fixed-size DeltaNet states."""
import torch


class KVCache:
    """Keys (after k_norm and RoPE) and values of every token seen by one attention layer."""

    def __init__(self, batch, n_kv_head, head_dim):
        self.k = torch.zeros(batch, n_kv_head, 0, head_dim)         # [B, nkv, tokens, hd]
        self.v = torch.zeros(batch, n_kv_head, 0, head_dim)

    def update(self, k, v):
        """Append this call's keys and values; return all of them."""
        self.k = torch.cat([self.k.to(k), k], dim=2)
        self.v = torch.cat([self.v.to(v), v], dim=2)
        return self.k, self.v


class DeltaNetCache:
    """One DeltaNet layer's last K - 1 conv inputs and fp32 state: the same size at any length."""

    def __init__(self, batch, conv_dim, conv_kernel, n_v_head, k_dim, v_dim):
        self.conv = torch.zeros(batch, conv_dim, conv_kernel - 1)   # pre-conv columns
        self.state = torch.zeros(batch, n_v_head, k_dim, v_dim)     # S per head, always fp32


class Cache:
    """One entry per layer, in layer order; `seq_len` counts the tokens seen so far."""

    def __init__(self, cfg, batch=1):
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise ValueError(f"batch={batch!r}: must be a whole number >= 1 "
                             "(sequences in the cache)")
        self.seq_len = 0
        conv_dim = (2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim  # q | k | v channels
                    + cfg.linear_num_value_heads * cfg.linear_value_head_dim)
        self.layers = [
            KVCache(batch, cfg.num_key_value_heads, cfg.head_dim) if t == "full_attention" else
            DeltaNetCache(batch, conv_dim, cfg.linear_conv_kernel_dim, cfg.linear_num_value_heads,
                          cfg.linear_key_head_dim, cfg.linear_value_head_dim)
            for t in cfg.layer_types
        ]

    def nbytes(self):
        """Bytes held, by kind: {"kv": grows with every token, "deltanet": constant}."""
        kv = sum(c.k.nbytes + c.v.nbytes for c in self.layers if isinstance(c, KVCache))
        dn = sum(c.conv.nbytes + c.state.nbytes
                 for c in self.layers if isinstance(c, DeltaNetCache))
        return {"kv": kv, "deltanet": dn}
