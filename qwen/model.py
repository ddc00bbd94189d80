"""The whole model: embedding, 24 decoder layers (3 DeltaNet, 1 attention, repeated), final norm,
tied output layer."""
# --8<-- [start:imports]
import torch
import torch.nn as nn

from qwen.attention import Attention
from qwen.cache import Cache
from qwen.checks import check_id_tensor
from qwen.deltanet import GatedDeltaNet
from qwen.embedding import Embedding, LMHead
from qwen.mlp import MLP
from qwen.norm import RMSNorm
from qwen.rope import RotaryEmbedding
from qwen.weights import Config, load, load_weights

# --8<-- [end:imports]


# --8<-- [start:layer]
class DecoderLayer(nn.Module):
    """x + mixer(norm(x)), then x + mlp(norm(x)); the mixer is Gated DeltaNet or gated attention."""

    def __init__(self, cfg, layer_type):
        super().__init__()
        self.layer_type = layer_type
        if layer_type == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg)
        else:
            self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache=None):
        h = self.input_layernorm(x)
        if self.layer_type == "linear_attention":
            x = x + self.linear_attn(h, cache)                      # DeltaNet needs no positions
        else:
            x = x + self.self_attn(h, cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))
# --8<-- [end:layer]


# --8<-- [start:model]
class Qwen(nn.Module):
    """Token ids in, next-token logits out."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, t) for t in cfg.layer_types)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)
        # tied (0.8B): the same Parameter, stored once; untied (larger models): a table of its own
        self.lm_head = LMHead(self.embed_tokens.weight if cfg.tie_word_embeddings
                              else nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size)))

    # --8<-- [start:model_forward]
    def forward(self, ids, cache=None, last_only=False):
        """Logits [B, T, vocab] for ids [B, T]; with a cache, continue after the tokens it has seen.
        last_only: score the last position only ([B, 1, vocab]), all that generation needs."""
        check_id_tensor(ids, self.cfg.vocab_size)       # a negative id would read the table's end
        past = 0 if cache is None else cache.seq_len
        cos, sin = self.rotary_emb(torch.arange(past, past + ids.shape[1], device=ids.device))
        x = self.embed_tokens(ids)                       # [B, T, dim]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.seq_len += ids.shape[1]
        if last_only:
            x = x[:, -1:]                                # head is 1024 x 248,320: skip T - 1 rows
        return self.lm_head(self.norm(x))                # [B, T, vocab]
    # --8<-- [end:model_forward]

    def new_cache(self, batch=1, max_tokens=None):
        """An empty cache for `batch` sequences (chapter 11); max_tokens: how many it will hold."""
        return Cache(self.cfg, batch)
# --8<-- [end:model]


# --8<-- [start:from_pretrained]
def from_pretrained(path, dtype=torch.float32, device="cpu"):
    """The model of the checkpoint folder `path`, with its weights, ready for inference.
    (Chapters 14-16 make the same model fast: qwen.fast.from_pretrained.)"""
    model = Qwen(Config.load(path))
    load(model, load_weights(path, dtype))
    return model.requires_grad_(False).to(device)
# --8<-- [end:from_pretrained]
