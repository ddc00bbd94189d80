"""What changed from GPT-2 and Llama: the Qwen3.5-0.8B numbers of the comparison, read from the
official config.json (no weights needed)."""
from pathlib import Path

from book.out import record
from qwen.weights import Config

cfg = Config.load(Path("book/data/qwen3.5-0.8b"))
kinds = cfg.layer_types
n_attn, n_dn = kinds.count("full_attention"), kinds.count("linear_attention")
rotary = int(cfg.head_dim * cfg.partial_rotary_factor)                # dims of a head that turn
print(f"layers: {len(kinds)} = {n_dn} Gated DeltaNet + {n_attn} gated attention "
      f"({n_dn // n_attn}:1), attention at {[i for i, k in enumerate(kinds) if k != kinds[0]]}")
print(f"width {cfg.hidden_size}, MLP {cfg.intermediate_size}, vocabulary {cfg.vocab_size:,}, "
      f"tied embeddings: {cfg.tie_word_embeddings}")
print(f"attention: {cfg.num_attention_heads} query heads, {cfg.num_key_value_heads} key-value "
      f"heads, head_dim {cfg.head_dim}; RoPE on {rotary} of {cfg.head_dim} dims, "
      f"theta {cfg.rope_theta:,.0f}")
print(f"DeltaNet: {cfg.linear_num_key_heads} key heads x {cfg.linear_key_head_dim}, "
      f"{cfg.linear_num_value_heads} value heads x {cfg.linear_value_head_dim}, "
      f"conv kernel {cfg.linear_conv_kernel_dim}")
record(n_layers=len(kinds), n_attention=n_attn, n_deltanet=n_dn, ratio=f"{n_dn // n_attn}:1",
       hidden=cfg.hidden_size, intermediate=cfg.intermediate_size, vocab=f"{cfg.vocab_size:,}",
       n_heads=cfg.num_attention_heads, n_kv_heads=cfg.num_key_value_heads,
       head_dim=cfg.head_dim, rotary_dims=rotary, rope_theta=f"{cfg.rope_theta:,.0f}",
       dn_heads=cfg.linear_num_value_heads, dn_head_dim=cfg.linear_value_head_dim,
       conv_kernel=cfg.linear_conv_kernel_dim)
