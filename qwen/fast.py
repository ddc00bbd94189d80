"""The fast path: the model of qwen/model.py, built straight from the checkpoint's tensors and
computed in fewer, larger steps. tests/test_fast.py proves that it computes the same thing."""
# --8<-- [start:imports]
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from qwen.cache import KVCache
from qwen.deltanet import chunk_gated_delta_rule, l2norm
from qwen.quant import ROWS, Int8Linear, W8A8Linear
from qwen.rope import RotaryEmbedding
from qwen.weights import PREFIXES, SKIP, Config, settle_head, weight_files

# --8<-- [end:imports]


# --8<-- [start:linear]
class Linear(nn.Module):
    """x @ w.T for fp32 activations x; w is kept as loaded (a mapped bf16 weight is not copied)."""

    def __init__(self, w):
        super().__init__()
        self.register_buffer("w", w)

    def forward(self, x):
        if x.shape[:-1].numel() > ROWS:
            # many rows (prefill): compute-bound, and fp32 matmuls are far faster than bf16 on CPUs
            # without bf16 instructions, so widen the weight first; the widening is cheap next to it
            return F.linear(x, self.w.float())
        # few rows (decode): bandwidth-bound, read the weight's 2 bytes as they are
        return F.linear(x.to(self.w.dtype), self.w).float()


def linear(w, dtype, quantize=None):
    """The projection for weight w [out, in]: in dtype, or int8 with quantize="int8" (int8 weights)
    or "w8a8" (int8 weights, and int8 activations when decoding)."""
    if quantize == "int8":
        return Int8Linear(w)
    return W8A8Linear(w) if quantize == "w8a8" else Linear(w.to(dtype))


def fuse(W, names):
    """(one weight [sum of outs, in], the names in its row order) for projections of one input.
    A view, no copy, when the file stores them back to back (it sorts by name); else a copy."""
    ts = sorted(((W[n], n) for n in names), key=lambda tn: tn[0].data_ptr())
    order = [n for _, n in ts]
    first, rows = ts[0][0], sum(t.shape[0] for t, _ in ts)
    adjacent = all(a.data_ptr() + a.nbytes == b.data_ptr() and a.dtype == b.dtype
                   and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                   for (a, _), (b, _) in zip(ts, ts[1:]))
    if adjacent:
        w = first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(),
                                    (rows, first.shape[1]))
    else:
        w = torch.cat([t for t, _ in ts])
    return w, order


class Fused(nn.Module):
    """Several projections of one input as one matmul; {short name: output}."""

    def __init__(self, W, names, dtype, quantize):
        super().__init__()
        w, order = fuse(W, list(names.values()))
        short = {full: s for s, full in names.items()}
        self.keys, self.sizes = [short[n] for n in order], [W[n].shape[0] for n in order]
        self.proj = linear(w, dtype, quantize)

    def forward(self, x):
        return dict(zip(self.keys, self.proj(x).split(self.sizes, dim=-1)))
# --8<-- [end:linear]


# --8<-- [start:kvbuffer]
class KVBuffer(KVCache):
    """A KV cache that writes into room set aside ahead, doubled when full: no copy per token."""

    def __init__(self, cache):
        self.n, self.kbuf, self.vbuf = cache.k.shape[2], cache.k, cache.v

    def update(self, k, v):
        n = self.n + k.shape[2]
        if n > self.kbuf.shape[2]:                          # out of room: twice as much
            room = max(2 * self.kbuf.shape[2], n, 256)
            self.kbuf, self.vbuf = (grow(b, self.n, room, k) for b in (self.kbuf, self.vbuf))
        self.kbuf[:, :, self.n:n], self.vbuf[:, :, self.n:n] = k, v
        self.n = n
        return self.k, self.v

    k = property(lambda self: self.kbuf[:, :, :self.n])    # [B, nkv, tokens, hd]
    v = property(lambda self: self.vbuf[:, :, :self.n])


def grow(buf, n, room, like):
    """A buffer like `like` with `room` tokens, holding the first n of `buf`."""
    new = like.new_empty(*like.shape[:2], room, like.shape[3])
    new[:, :, :n] = buf[:, :, :n]
    return new
# --8<-- [end:kvbuffer]


def rms_norm(x, w, eps):
    """x / rms(x) * w in one call (w already holds the 1 + of the zero-centred norm)."""
    return F.rms_norm(x, (x.shape[-1],), w, eps)


# --8<-- [start:attention]
class Attention(nn.Module):
    """Gated attention with q, k and v in one matmul and torch's fused softmax attention."""

    def __init__(self, cfg, W, p, dtype, quantize):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.qkv = Fused(W, {n: f"{p}{n}_proj.weight" for n in "qkv"}, dtype, quantize)
        self.o_proj = linear(W[p + "o_proj.weight"], dtype, quantize)
        self.q_norm = 1 + W[p + "q_norm.weight"].float()
        self.k_norm = 1 + W[p + "k_norm.weight"].float()

    def forward(self, x, cos, sin, cache=None):
        B, T, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        y = self.qkv(x)
        q, gate = y["q"].view(B, T, nh, 2 * hd).chunk(2, dim=-1)     # per head: [query | gate]
        k, v = y["k"], y["v"]
        q = rope(rms_norm(q, self.q_norm, self.eps).transpose(1, 2), cos, sin)  # [B, nh, T, hd]
        k = rope(rms_norm(k.view(B, T, nkv, hd), self.k_norm, self.eps).transpose(1, 2), cos, sin)
        v = v.view(B, T, nkv, hd).transpose(1, 2)                               # [B, nkv, T, hd]
        if cache is not None:
            k, v = cache.update(k, v)                                           # [B, nkv, S, hd]
        if T == 1:
            y = decode_attention(q, k, v)
        else:
            S = k.shape[2]
            mask = None if S == T else \
                torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            # grouped KV heads are read in place, not copied nh / nkv times
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=S == T,
                                               enable_gqa=True)
        y = y.transpose(1, 2).reshape(B, T, nh * hd)
        return self.o_proj(y * torch.sigmoid(gate.reshape(B, T, nh * hd)))


def decode_attention(q, k, v):
    """Attention of one new token, q [B, nh, 1, hd], over the cache k, v [B, nkv, S, hd].
    The nh / nkv query heads that share a KV head are one matrix, so each cached key and value
    is read once per step, as two matrix products that stream through the cache."""
    B, nh, _, hd = q.shape
    nkv = k.shape[1]
    qg = q.reshape(B, nkv, nh // nkv, hd) * hd**-0.5            # [B, nkv, group, hd]
    scores = (k @ qg.transpose(-1, -2)).transpose(-1, -2)       # [B, nkv, group, S]
    return (scores.softmax(-1) @ v).reshape(B, nh, 1, hd)


def rope(x, cos, sin):
    """RoPE on the first cos.shape[-1] dims of x [..., T, hd], the others unchanged."""
    d = cos.shape[-1]
    x1, x2, rest = x[..., :d // 2], x[..., d // 2:d], x[..., d:]
    c, s = cos[..., :d // 2], sin[..., :d // 2]                 # both halves share one angle
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)
# --8<-- [end:attention]


# --8<-- [start:deltanet]
class DeltaNet(nn.Module):
    """Gated DeltaNet with its four input projections in one matmul and a one-token decode step
    that updates the state in place."""

    def __init__(self, cfg, W, p, dtype, quantize):
        super().__init__()
        self.nk, self.nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.K, self.eps = cfg.linear_conv_kernel_dim, cfg.rms_norm_eps
        self.in_proj = Fused(W, {n: f"{p}in_proj_{n}.weight" for n in ("qkv", "z", "b", "a")},
                             dtype, quantize)
        self.out_proj = linear(W[p + "out_proj.weight"], dtype, quantize)
        self.conv = W[p + "conv1d.weight"].float()                  # [C, 1, K]
        self.neg_A = -W[p + "A_log"].float().exp()
        self.dt_bias = W[p + "dt_bias"].float()
        self.norm = W[p + "norm.weight"].float()

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        y = self.in_proj(x)
        qkv, z, b, a = y["qkv"].transpose(1, 2), y["z"], y["b"], y["a"]   # qkv [B, C, T]
        past = (qkv.new_zeros(B, qkv.shape[1], self.K - 1) if cache is None
                else cache.conv.to(qkv))
        window = torch.cat([past, qkv], dim=-1)                     # [B, C, K - 1 + T]
        if cache is not None:
            cache.conv = window[..., T:]                            # the last K - 1 inputs
        if T == 1:                                                  # decode: one dot product
            qkv = (window * self.conv[:, 0]).sum(-1, keepdim=True)
        else:
            qkv = F.conv1d(window, self.conv, groups=window.shape[1])
        qkv = F.silu(qkv).transpose(1, 2)                           # [B, T, C]
        q, k, v = qkv.split([self.nk * self.dk] * 2 + [self.nv * self.dv], dim=-1)
        q = l2norm(q.reshape(B, T, self.nk, self.dk)) * self.dk**-0.5
        k = l2norm(k.reshape(B, T, self.nk, self.dk))
        if self.nv != self.nk:
            q, k = (t.repeat_interleave(self.nv // self.nk, dim=2) for t in (q, k))
        v = v.reshape(B, T, self.nv, self.dv)
        beta = b.sigmoid()                                          # [B, T, nv]
        g = self.neg_A * F.softplus(a + self.dt_bias)
        if cache is not None and T == 1:
            o = step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], cache)[:, None]
        else:
            q, k, v, g, beta = (t.transpose(1, 2) for t in (q, k, v, g, beta))
            o, state = chunk_gated_delta_rule(q, k, v, g, beta,
                                              None if cache is None else cache.state)
            if cache is not None:
                cache.state = state
            o = o.transpose(1, 2)                                   # [B, T, nv, dv]
        o = rms_norm(o, self.norm, self.eps) * F.silu(z.view(B, T, self.nv, self.dv))
        return self.out_proj(o.reshape(B, T, -1))


def step(q, k, v, g, beta, cache):
    """One token of the gated delta rule, the state S [B, H, dk, dv] updated in place.
    q, k [B, H, dk], v [B, H, dv], g, beta [B, H]."""
    S = cache.state
    S.mul_(g.exp()[..., None, None])                                # forget
    pred = (k[..., None, :] @ S)[..., 0, :]                         # what S holds for k [B, H, dv]
    u = beta[..., None] * (v - pred)                                # write only the error
    S.add_(k[..., :, None] * u[..., None, :])                       # rank-1 update
    return (q[..., None, :] @ S)[..., 0, :]                         # read with the query
# --8<-- [end:deltanet]


# --8<-- [start:model]
class MLP(nn.Module):
    """SwiGLU with gate and up in one matmul."""

    def __init__(self, W, p, dtype, quantize):
        super().__init__()
        self.gate_up = Fused(W, {n: f"{p}{n}_proj.weight" for n in ("gate", "up")}, dtype, quantize)
        self.down = linear(W[p + "down_proj.weight"], dtype, quantize)

    def forward(self, x):
        y = self.gate_up(x)
        return self.down(F.silu(y["gate"]) * y["up"])


class Layer(nn.Module):
    """x + mixer(norm(x)), then x + mlp(norm(x)), as qwen.model.DecoderLayer."""

    def __init__(self, cfg, W, i, dtype, quantize):
        super().__init__()
        p, self.eps = f"layers.{i}.", cfg.rms_norm_eps
        self.is_deltanet = cfg.layer_types[i] == "linear_attention"
        self.mixer = (DeltaNet(cfg, W, p + "linear_attn.", dtype, quantize) if self.is_deltanet
                      else Attention(cfg, W, p + "self_attn.", dtype, quantize))
        self.mlp = MLP(W, p + "mlp.", dtype, quantize)
        self.norm1 = 1 + W[p + "input_layernorm.weight"].float()
        self.norm2 = 1 + W[p + "post_attention_layernorm.weight"].float()

    def forward(self, x, cos, sin, cache=None):
        h = rms_norm(x, self.norm1, self.eps)
        x = x + (self.mixer(h, cache) if self.is_deltanet else self.mixer(h, cos, sin, cache))
        return x + self.mlp(rms_norm(x, self.norm2, self.eps))


class FastQwen(nn.Module):
    """The same model as qwen.model.Qwen, fp32 activations throughout, weights as loaded
    (or int8, see qwen/quant.py). Token ids in, fp32 logits out."""

    def __init__(self, cfg, W, dtype=torch.float32, quantize=None):
        super().__init__()
        self.cfg, self.eps = cfg, cfg.rms_norm_eps
        table = W["embed_tokens.weight"].to(dtype)                  # converted once, if at all
        # rows are looked up, the table is never read whole
        self.embed_tokens = nn.Embedding.from_pretrained(table)
        self.layers = nn.ModuleList(Layer(cfg, W, i, dtype, quantize)
                                    for i in range(len(cfg.layer_types)))
        self.norm = 1 + W["norm.weight"].float()
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, cfg.partial_rotary_factor, cfg.rope_theta)
        # the head is the embedding table when tied: a third of the bytes, quantized first
        head = W["lm_head.weight"] if "lm_head.weight" in W else table
        self.lm_head = linear(head, dtype, quantize)

    def forward(self, ids, cache=None, last_only=False):
        past = 0 if cache is None else cache.seq_len
        if cache is not None:       # the first time: a KV cache with room set aside
            cache.layers = [KVBuffer(c) if type(c) is KVCache else c for c in cache.layers]
        cos, sin = self.rotary_emb(torch.arange(past, past + ids.shape[1], device=ids.device))
        x = self.embed_tokens(ids).float()                          # [B, T, dim], fp32 from here
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.seq_len += ids.shape[1]
        if last_only:
            x = x[:, -1:]
        return self.lm_head(rms_norm(x, self.norm, self.eps))      # [B, T, vocab] fp32
# --8<-- [end:model]


# --8<-- [start:mmap]
DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}


def mmap_safetensors(file):
    """{name: tensor} of one safetensors file, every tensor a view into one map of the whole file:
    nothing is read until it is used, and tensors stored back to back can be joined for free."""
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")          # the file: 8 bytes n, n bytes of JSON,
        header = json.loads(f.read(n))                    # then the raw data
    header.pop("__metadata__", None)
    storage = torch.UntypedStorage.from_file(str(file), shared=False,
                                             nbytes=os.path.getsize(file))
    out = {}
    for name, h in header.items():
        dtype = DTYPES[h["dtype"]]
        start = 8 + n + h["data_offsets"][0]             # in bytes; safetensors aligns it
        out[name] = torch.empty(0, dtype=dtype).set_(storage, start // dtype.itemsize, h["shape"])
    return out
# --8<-- [end:mmap]


# --8<-- [start:from_pretrained]
class Checkpoint(dict):
    """The tensors by short name; it remembers which were read and names a missing one clearly."""

    def __init__(self, W):
        super().__init__(W)
        self.read = set()

    def __getitem__(self, name):
        if name not in self:
            raise ValueError(f"the checkpoint has no tensor {name}: is it a Qwen3.5 checkpoint?")
        self.read.add(name)
        return super().__getitem__(name)


def load_tensors(path):
    """Every text-model tensor of a checkpoint folder, memory-mapped, in the file's dtype."""
    W = {}
    for file in weight_files(path):                       # each checked whole, as load_weights does
        for name, t in mmap_safetensors(file).items():
            if not name.startswith(SKIP):
                W[next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)] = t
    return settle_head(W, path)                           # tied: drop a saved head; untied: need it


QUANTIZE = (None, "int8", "w8a8")


def from_pretrained(path, dtype=torch.float32, device="cpu", quantize=None):
    """The fast model of the checkpoint folder `path`, built straight from the mapped files:
    no module is made and randomly filled first, no tensor is copied that need not be."""
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r}: use None (the weights as they are), \"int8\" "
                         "(int8 weights) or \"w8a8\" (int8 weights and decode activations)")
    if device != "cpu":
        raise ValueError(f"the fast path runs on the CPU; for {device} use fast=False")
    W = Checkpoint(load_tensors(path))
    model = FastQwen(Config.load(path), W, dtype, quantize).requires_grad_(False)
    unused = sorted(set(W) - W.read)
    if unused:
        raise ValueError(f"not used by the model: {', '.join(unused[:5])}: "
                         "is it a Qwen3.5 checkpoint?")
    return model
# --8<-- [end:from_pretrained]
