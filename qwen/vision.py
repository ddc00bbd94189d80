"""The vision tower: patch rows in, one vector in the text model's width per 2 x 2 patches out."""
# --8<-- [start:imports]
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open

from qwen.rope import rotate_half
from qwen.weights import CheckpointError, check_finite, load, read_json, weight_files

# --8<-- [end:imports]


# --8<-- [start:config]
@dataclass
class VisionConfig:
    """config.json's vision_config; a missing field takes transformers' Qwen3_5VisionConfig
    default."""
    depth: int = 27
    hidden_size: int = 1152
    num_heads: int = 16
    intermediate_size: int = 4304
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 3584              # the text model's width
    num_position_embeddings: int = 2304      # a learned 48 x 48 table
    rope_theta: float = 10000.0

    @classmethod
    def load(cls, path):
        file = Path(path) / "config.json"
        raw = read_json(file).get("vision_config")
        if not isinstance(raw, dict):
            raise CheckpointError(f"{file} has no vision_config: {Path(path).name} is a "
                                  "text-only checkpoint and cannot see images; use the full "
                                  "Qwen/Qwen3.5-0.8B checkpoint")
        for name, ours in (("hidden_act", "gelu_pytorch_tanh"), ("deepstack_visual_indexes", [])):
            if raw.get(name, ours) != ours:
                raise CheckpointError(f"{file}: vision_config.{name} {raw[name]!r} is not "
                                      f"supported (only {ours!r}, as in Qwen3.5)")
        rope = raw.get("rope_parameters") or {}
        cfg = cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw},
                  **({"rope_theta": rope["rope_theta"]} if "rope_theta" in rope else {}))
        side = round(cfg.num_position_embeddings**0.5)
        if side * side != cfg.num_position_embeddings or cfg.hidden_size % cfg.num_heads:
            raise CheckpointError(f"{file}: vision_config has num_position_embeddings "
                                  f"{cfg.num_position_embeddings} (must be a square) and "
                                  f"hidden_size {cfg.hidden_size} / num_heads {cfg.num_heads} "
                                  "(must divide): download it again")
        return cfg
# --8<-- [end:config]


# --8<-- [start:patch_embed]
class PatchEmbed(nn.Module):
    """A Conv3d whose kernel equals its stride: each patch row times one matrix, plus a bias."""

    def __init__(self, cfg):
        super().__init__()
        size = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, size, stride=size)

    def forward(self, x):                    # [N, 3 * 2 * 16 * 16] -> [N, hidden]
        # the kernel flattened [C][t][p][p] is the patch row's order: a matmul
        return x @ self.proj.weight.flatten(1).T + self.proj.bias
# --8<-- [end:patch_embed]


# --8<-- [start:positions]
def merge_order(x, m=2):
    """[h, w, ...] laid out row by row -> [h * w, ...] in m x m blocks, the order of the patches."""
    h, w = x.shape[:2]
    x = x.reshape(h // m, m, w // m, m, *x.shape[2:]).transpose(1, 2)   # [bh, bw, m, m, ...]
    return x.reshape(h * w, *x.shape[4:])


def resample(table, h, w):
    """The learned [side * side, dim] position table stretched bilinearly to an h x w grid."""
    side = round(table.shape[0] ** 0.5)
    grid = table.T.reshape(1, -1, side, side)                   # [1, dim, side, side]
    # align_corners: the table's corners land on the image's corner patches
    grid = F.interpolate(grid.float(), size=(h, w), mode="bilinear", align_corners=True)
    return grid[0].permute(1, 2, 0).to(table.dtype)             # [h, w, dim]
# --8<-- [end:positions]


# --8<-- [start:rotary]
class VisionRotary(nn.Module):
    """2-D RoPE: half of each head's pairs turn with the patch's row, half with its column."""

    def __init__(self, head_dim, theta):
        super().__init__()
        dim = head_dim // 2                                      # per axis
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, rows, cols):           # [N] each -> cos, sin [N, head_dim]
        angle = torch.cat([rows.float()[:, None] * self.inv_freq,
                           cols.float()[:, None] * self.inv_freq], dim=-1)
        angle = torch.cat([angle, angle], dim=-1)               # rotate-half pairs, as in ch. 4
        return angle.cos(), angle.sin()


def patch_rows_cols(grid, m=2):
    """Each patch's (row, col) in its image, in the merger's order, for every image of `grid`."""
    rows, cols = [], []
    for t, h, w in grid.tolist():
        r, c = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        rows.append(merge_order(r, m).repeat(t))
        cols.append(merge_order(c, m).repeat(t))
    return torch.cat(rows), torch.cat(cols)
# --8<-- [end:rotary]


# --8<-- [start:attention]
class VisionAttention(nn.Module):
    """Every patch reads every patch of its own image (no mask), never another image's."""

    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x, cos, sin, lengths):
        N, dim = x.shape
        q, k, v = self.qkv(x).view(N, 3, self.n_head, -1).unbind(1)      # [N, nh, hd] each
        q, k = (rope_2d(t, cos, sin) for t in (q, k))
        out = []
        for q1, k1, v1 in zip(*(t.split(lengths) for t in (q, k, v))):  # one image at a time
            q1, k1, v1 = (t.transpose(0, 1) for t in (q1, k1, v1))        # [nh, n, hd]
            # softmax(q k^T / sqrt(hd)) v, as in chapter 5, with no causal mask
            out.append(F.scaled_dot_product_attention(q1, k1, v1).transpose(0, 1))
        return self.proj(torch.cat(out).reshape(N, dim))


def rope_2d(x, cos, sin):
    """x [N, nh, hd] turned by each patch's angles, in fp32 (as the reference does)."""
    cos, sin = cos[:, None], sin[:, None]                                # over the heads
    return (x.float() * cos + rotate_half(x.float()) * sin).to(x.dtype)
# --8<-- [end:attention]


# --8<-- [start:block]
class VisionMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x):
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(nn.Module):
    """A pre-norm ViT block: LayerNorm (with a bias, unlike the text model's RMSNorm)."""

    def __init__(self, cfg):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.attn = VisionAttention(cfg)
        self.mlp = VisionMLP(cfg)

    def forward(self, x, cos, sin, lengths):
        x = x + self.attn(self.norm1(x), cos, sin, lengths)
        return x + self.mlp(self.norm2(x))
# --8<-- [end:block]


# --8<-- [start:merger]
class PatchMerger(nn.Module):
    """Four neighbouring patches (2 x 2) side by side -> one vector of the text model's width."""

    def __init__(self, cfg):
        super().__init__()
        wide = cfg.hidden_size * cfg.spatial_merge_size**2                # 768 * 4 = 3072
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.linear_fc1 = nn.Linear(wide, wide)
        self.linear_fc2 = nn.Linear(wide, cfg.out_hidden_size)

    def forward(self, x):                    # [N, hidden] -> [N / 4, out_hidden]
        # the patches come block by block, so 4 rows in a row are one 2 x 2 block
        x = self.norm(x).view(-1, self.linear_fc1.in_features)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))
# --8<-- [end:merger]


# --8<-- [start:model]
class VisionModel(nn.Module):
    """Images (qwen.image.Images) in, [tokens of all images, out_hidden] out."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.rotary = VisionRotary(cfg.hidden_size // cfg.num_heads, cfg.rope_theta)
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.depth))
        self.merger = PatchMerger(cfg)

    def forward(self, pixels, grid):
        m = self.cfg.spatial_merge_size
        x = self.patch_embed(pixels.to(self.pos_embed.weight))            # [N, hidden]
        x = x + torch.cat([merge_order(resample(self.pos_embed.weight, h, w), m).repeat(t, 1)
                           for t, h, w in grid.tolist()])
        cos, sin = self.rotary(*(p.to(x.device) for p in patch_rows_cols(grid, m)))
        lengths = [h * w for t, h, w in grid.tolist() for _ in range(t)]  # one frame each
        for block in self.blocks:
            x = block(x, cos, sin, lengths)
        return self.merger(x)
# --8<-- [end:model]


# --8<-- [start:load]
VISUAL = "model.visual."


def load_vision_weights(path, dtype=None):
    """Every `model.visual.*` tensor of a checkpoint, by its full name, with the checks the text
    weights get (files, index, dtypes, NaN)."""
    W = {}
    for file in weight_files(path):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if name.startswith(VISUAL):
                    t = f.get_tensor(name)
                    check_finite(t, name, file)
                    W[name] = t if dtype is None else t.to(dtype)
    if not W:
        raise CheckpointError(f"{path} holds no {VISUAL}* tensors: its weights are the text "
                              "model's only; use the full Qwen/Qwen3.5-0.8B checkpoint to see "
                              "images")
    return W


def vision_from_pretrained(path, dtype=torch.float32, device="cpu"):
    """The vision tower of the checkpoint folder `path`, with its weights."""
    model = VisionModel(VisionConfig.load(path))
    load(model, load_vision_weights(path, dtype), VISUAL)   # missing, extra, shapes: errors
    return model.requires_grad_(False).to(device)
# --8<-- [end:load]
