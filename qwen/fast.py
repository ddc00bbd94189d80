"""Stage 3: the model of qwen/model.py made fast in named steps. Each step changes the reader's own
modules in place: a load that maps the file, a subclass that overrides one method, a module swap.
No module is restated (one step writes chapter 7's chunk rule another way); tests/test_fast.py
proves that each step computes what the clear model does."""
# --8<-- [start:imports]
import ctypes
import functools
import json
import mmap
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from qwen.attention import Attention
from qwen.cache import KVCache
from qwen.deltanet import GatedDeltaNet, chunk_gated_delta_rule, chunked
from qwen.embedding import Embedding, LMHead
from qwen.mlp import MLP
from qwen.model import Qwen
from qwen.norm import RMSNorm, RMSNormGated
from qwen.quant import QUANTIZED, Int8Linear, int8_prompts
from qwen.timing import alternately
from qwen.weights import (
    PREFIXES,
    SKIP,
    Config,
    check_finite,
    load,
    load_weights,
    settle_head,
    weight_files,
)

ROWS = 16          # more rows than this: a prompt, compute-bound; fewer: a decode step
# --8<-- [end:imports]


# --8<-- [start:swap]
def swap(module, cls):
    """Make `module` an instance of `cls`, a subclass of its class that overrides a method or two,
    keeping every tensor it holds and every step applied before (their classes stay its bases)."""
    have = type(module)
    if not isinstance(module, cls):
        module.__class__ = cls if issubclass(cls, have) else _both(cls, have)
    return module


@functools.cache
def _both(cls, have):
    return type(f"{cls.__name__}+{have.__name__}", (cls, have), {})
# --8<-- [end:swap]


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
        dtype = DTYPES[h["dtype"]]                       # weight_files() let only these through
        start = 8 + n + h["data_offsets"][0]             # in bytes; safetensors aligns it
        out[name] = torch.empty(0, dtype=dtype).set_(storage, start // dtype.itemsize, h["shape"])
    return out


def load_tensors(path, finite=True):
    """Every text-model tensor of a checkpoint folder, memory-mapped, in the file's dtype, with the
    clear loader's checks (weight_files: the index, the dtypes; check_finite: no NaN or inf)."""
    W = {}
    for file in weight_files(path):
        for name, t in mmap_safetensors(file).items():
            if not name.startswith(SKIP):
                if finite:
                    check_finite(t, name, file)
                W[next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)] = t
    return settle_head(W, path)                           # tied: drop a saved head; untied: need it
# --8<-- [end:mmap]


# --8<-- [start:load_mapped]
class EmptyOnMeta(TorchFunctionMode):
    """Inside it, torch.empty (what every Parameter starts as) makes meta tensors: a shape and a
    dtype, no memory; nn.Linear's random init then does nothing. Everything else runs as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.empty and kwargs.get("device") is None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def load_mapped(path, dtype=torch.bfloat16, finite=True):
    """Step 1 (chapter 14): the clear model, its Parameters built on the meta device (no memory,
    no random fill), then made from the mapped file itself: a weight in `dtype` is not copied."""
    with EmptyOnMeta():
        model = Qwen(Config.load(path))
    W = load_tensors(path, finite)
    model.maps = {t.untyped_storage().data_ptr(): t.untyped_storage() for t in W.values()}
    for k, t in W.items():
        if t.dtype != dtype:                              # another dtype: a copy, and the file's
            W[k] = t.to(dtype)                            # pages under t are not needed again
            give_back(model, t)
    load(model, W)                                        # the clear loader's checks, all of them
    return model.requires_grad_(False)
# --8<-- [end:load_mapped]


# --8<-- [start:give_back]
MADV_DONTNEED = 4      # madvise (Linux): this process is done with these pages; the file keeps them


def give_back(model, t):
    """Once a copy has replaced tensor t (another dtype, packed, quantized), tell the OS that the
    pages of the mapped file under t are no longer needed: they stop counting in the process's
    memory. The map is private and nothing writes to it, so a page that is read again (a row of
    the tied embedding table) comes back from the file, as on the first read."""
    maps = getattr(model, "maps", {})
    if sys.platform != "linux" or t.untyped_storage().data_ptr() not in maps:
        return                                   # not in the file's map: freed with its last user
    page = mmap.PAGESIZE
    start = t.data_ptr() // page * page
    end = -(-(t.data_ptr() + t.nbytes) // page) * page
    _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)             # the C library, opened once


def copy_order(model):
    """(parent, name, weight) of every projection and the head, for a step that replaces each by
    a copy (packed, quantized), in the order that keeps the peak of memory low: the load's check
    read every page, so first all are given back (each comes back as it is copied), then the head,
    the largest, while no copy is held yet, then the layers."""
    for s in getattr(model, "maps", {}).values():
        give_back(model, torch.empty(0, dtype=torch.uint8).set_(s))
    todo = [(m, name, child.weight.detach()) for m in model.modules()
            for name, child in m.named_children() if isinstance(child, (nn.Linear, LMHead))]
    return sorted(todo, key=lambda t: t[1] != "lm_head")               # stable: then in order
# --8<-- [end:give_back]


# --8<-- [start:join]
def fuse(weights):
    """One weight [sum of outs, in] for several weights of one input, and the order of its rows.
    A view, no copy, when they lie back to back in one storage (a file sorts them by name)."""
    ts = sorted(weights.items(), key=lambda kv: kv[1].data_ptr())
    order, first = [k for k, _ in ts], ts[0][1]
    adjacent = all(a.data_ptr() + a.nbytes == b.data_ptr() and a.dtype == b.dtype
                   and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
                   for (_, a), (_, b) in zip(ts, ts[1:]))
    if adjacent:
        rows = sum(t.shape[0] for _, t in ts)
        w = first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(),
                                    (rows, first.shape[1]))
    else:
        w = torch.cat([t for _, t in ts])
    return w, order


class Joined(nn.Module):
    """Several projections of one input as one matmul, proj: forward gives {name: output}."""

    def __init__(self, linears):
        super().__init__()
        w, self.names = fuse({k: m.weight.detach() for k, m in linears.items()})
        self.sizes = [linears[k].out_features for k in self.names]
        with torch.device("meta"):
            self.proj = nn.Linear(w.shape[1], w.shape[0], bias=False)
        self.proj.weight = nn.Parameter(w, requires_grad=False)

    def forward(self, x):
        return dict(zip(self.names, self.proj(x).split(self.sizes, dim=-1)))


def join(module, names, joined):
    """Replace the projections `names` of `module` by one Joined called `joined`."""
    setattr(module, joined, Joined({n: getattr(module, n) for n in names}))
    for n in names:
        delattr(module, n)


class JoinedAttention(Attention):
    def project(self, x):
        B, T, _ = x.shape
        nh, nkv, hd = self.n_head, self.n_kv_head, self.head_dim
        y = self.qkv_proj(x)                                        # q, k, v: one matmul
        q, gate = y["q_proj"].view(B, T, nh, 2 * hd).chunk(2, dim=-1)
        return (q, gate.reshape(B, T, nh * hd), y["k_proj"].view(B, T, nkv, hd),
                y["v_proj"].view(B, T, nkv, hd))


class JoinedDeltaNet(GatedDeltaNet):
    def project(self, x):
        y = self.in_proj(x)                                         # qkv, z, b, a: one matmul
        return y["in_proj_qkv"], y["in_proj_z"], y["in_proj_b"], y["in_proj_a"]


class JoinedMLP(MLP):
    def forward(self, x):
        y = self.gate_up_proj(x)                                    # gate and up: one matmul
        return self.down_proj(F.silu(y["gate_proj"]) * y["up_proj"])


def join_projections(model):
    """Step 2 (chapter 14): the projections that read the same input, as one matmul each."""
    for m in list(model.modules()):
        if isinstance(m, Attention):
            join(m, ["q_proj", "k_proj", "v_proj"], "qkv_proj")
            swap(m, JoinedAttention)
        elif isinstance(m, GatedDeltaNet):
            join(m, ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"], "in_proj")
            swap(m, JoinedDeltaNet)
        elif isinstance(m, MLP):
            join(m, ["gate_proj", "up_proj"], "gate_up_proj")
            swap(m, JoinedMLP)
# --8<-- [end:join]


# --8<-- [start:activations]
def mixed_linear(x, w):
    """x @ w.T for fp32 rows x and a bf16 weight w: a prompt (many rows, compute-bound) widens the
    weight and multiplies in fp32; a decode step (few rows, bandwidth-bound) reads w's 2 bytes."""
    if x.shape[:-1].numel() > ROWS:
        return F.linear(x, w.float())
    return F.linear(x.to(w.dtype), w).float()


class WideLinear(nn.Linear):
    def forward(self, x):
        return mixed_linear(x, self.weight)


class WideLMHead(LMHead):
    def forward(self, x):
        return mixed_linear(x, self.weight)


class WideEmbedding(Embedding):
    def forward(self, ids):
        return super().forward(ids).float()          # fp32 from here on


@functools.cache
def matmul_speeds(rows=128, n_in=1024, n_out=3584):
    """Milliseconds of one prompt-sized matmul (Qwen3.5-0.8B's MLP shape, 128 rows) with bf16
    activations, and with fp32 activations and the bf16 weight widened first; measured once."""
    w, x = torch.randn(n_out, n_in).bfloat16(), torch.randn(rows, n_in)
    return alternately({"bf16": lambda: F.linear(x.bfloat16(), w),
                        "fp32": lambda: mixed_linear(x, w)})


def choose_activations(model, activations="auto"):
    """Step 3 (chapter 13): bf16 or fp32 activations. Some CPUs multiply bf16 fast (AVX-512 with
    bf16, through oneDNN), others only fp32 (AVX2): "auto" measures a prompt-sized matmul both
    ways on this machine and keeps the faster; GPUs multiply bf16 natively. fp32 activations:
    the embedding widens its rows, every projection is a WideLinear, small tensors become fp32."""
    weight = model.embed_tokens.weight
    if weight.dtype == torch.float32:
        choice, why = "fp32", "the weights are fp32"
    elif activations != "auto":
        choice, why = activations, "asked for"
    elif weight.device.type != "cpu":
        choice, why = "bf16", f"{weight.device.type} multiplies bf16 natively"
    else:
        ms = matmul_speeds()
        choice = min(ms, key=ms.get)
        why = f"a 128-row matmul: bf16 {ms['bf16']:.2f} ms, fp32 {ms['fp32']:.2f} ms"
    if choice not in ("bf16", "fp32"):
        raise ValueError(f'activations={activations!r}: use "auto", "bf16" or "fp32"')
    if choice == "fp32" and weight.dtype != torch.float32:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                swap(m, WideLinear)
            elif isinstance(m, (nn.Conv1d, RMSNorm, RMSNormGated)):
                m.float()                             # a few thousand numbers: fp32 like the rest
        swap(model.embed_tokens, WideEmbedding)
        swap(model.lm_head, WideLMHead)
    model.activations = choice
    return f"{choice} ({why})"
# --8<-- [end:activations]


# --8<-- [start:packed]
class PackedLinear(nn.Module):
    """x @ w.T through oneDNN, w reordered once into the blocked layout its kernels read fastest.
    The plain weight is dropped: bf16 rows in, any number of them; the output in x's dtype."""

    inference_only = True                                 # no backward: chapter 18 refuses it

    def __init__(self, w):
        super().__init__()
        self.out_features = w.shape[0]
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(w.bfloat16(), 1))

    def forward(self, x):
        y = torch.ops.mkldnn._linear_pointwise(x.bfloat16(), self.packed, None, "none", [], "")
        return y.to(x.dtype)


@functools.cache
def gemv_speeds(n_in=1024, n_out=3584, copies=24):
    """Milliseconds of one decode-sized matmul (one row, the MLP's shape) with the plain bf16
    weight and with the packed one, each over more weights than the CPU's caches hold."""
    w = torch.randn(n_out, n_in).bfloat16()
    ws = [w.clone() for _ in range(copies)]                         # copies: a fill is slow
    x = torch.randn(1, n_in).bfloat16()
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in ws]
    pointwise = torch.ops.mkldnn._linear_pointwise
    ms = alternately({"plain": lambda: [F.linear(x, w) for w in ws],
                      "packed": lambda: [pointwise(x, w, None, "none", [], "") for w in packed]})
    return {name: t / copies for name, t in ms.items()}            # per matmul


def pack_weights(model):
    """Step 4 (chapter 15): on a CPU whose oneDNN reads bf16 (torch reports it), measure a decode
    matmul with the plain and the packed weight and keep the faster: packed, every projection and
    the head (a copy of the tied table: lookups still read the plain one) go through oneDNN."""
    weight = model.embed_tokens.weight
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16:
        return (f"plain (packing is for bf16 weights on the CPU, these are {weight.dtype} "
                f"on {weight.device.type})")
    if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return "plain (this CPU's oneDNN has no bf16 kernels)"
    ms = gemv_speeds()
    why = f"a decode matmul: plain {ms['plain']:.2f} ms, packed {ms['packed']:.2f} ms"
    if ms["packed"] > 0.9 * ms["plain"]:
        return f"plain ({why})"
    for m, name, w in copy_order(model):
        setattr(m, name, PackedLinear(w))
        give_back(model, w)                              # the copy replaces the file's bytes
    return f"packed ({why})"
# --8<-- [end:packed]


# --8<-- [start:norms]
class FusedRMSNorm(RMSNorm):
    def forward(self, x):                            # one call instead of six
        w = 1 + self.weight.float()
        return F.rms_norm(x.float(), (x.shape[-1],), w, self.eps).type_as(x)


class FusedRMSNormGated(RMSNormGated):
    def forward(self, x, z):
        x = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).type_as(x)
        return (self.weight * x * F.silu(z.float())).type_as(x)


def fuse_norms(model):
    """Step 5 (chapter 15): each RMSNorm as one call of torch's F.rms_norm."""
    for m in model.modules():
        if isinstance(m, RMSNorm):
            swap(m, FusedRMSNorm)
        elif isinstance(m, RMSNormGated):
            swap(m, FusedRMSNormGated)
# --8<-- [end:norms]


# --8<-- [start:decode_conv]
class DecodeConv1d(nn.Conv1d):
    """The depthwise causal conv; for one new token (a window of exactly K inputs) it is a dot
    product per channel, which skips the generic conv kernel (bf16's is slow on some CPUs)."""

    def forward(self, x):
        if x.shape[-1] == self.kernel_size[0]:
            return (x.float() * self.weight[:, 0].float()).sum(-1, keepdim=True).to(x.dtype)
        return super().forward(x)


def decode_conv(model):
    """Step 6 (chapter 15): the DeltaNet conv of a decode step as a dot product."""
    for m in model.modules():
        if isinstance(m, nn.Conv1d):
            swap(m, DecodeConv1d)
# --8<-- [end:decode_conv]


# --8<-- [start:attention]
class SDPAAttention(Attention):
    def attend(self, q, k, v):
        T, S = q.shape[2], k.shape[2]
        if T == 1:
            return super().attend(q, k, v)
        mask = None if S == T else torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        # one fused kernel; grouped KV heads are read in place, not copied nh / nkv times
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=S == T,
                                              enable_gqa=True)


class GroupedDecodeAttention(Attention):
    def attend(self, q, k, v):
        return decode_attention(q, k, v) if q.shape[2] == 1 else super().attend(q, k, v)


def decode_attention(q, k, v):
    """Attention of one new token, q [B, nh, 1, hd], over the cache k, v [B, nkv, S, hd].
    The nh / nkv query heads that share a KV head are one matrix, so each cached key and value
    is read once per step, as two matrix products that stream through the cache."""
    B, nh, _, hd = q.shape
    nkv = k.shape[1]
    qg = q.reshape(B, nkv, nh // nkv, hd) * hd**-0.5            # [B, nkv, group, hd]
    scores = (k @ qg.transpose(-1, -2)).transpose(-1, -2)       # [B, nkv, group, S]
    return (scores.float().softmax(-1).to(v.dtype) @ v).reshape(B, nh, 1, hd)


def sdpa_prompts(model):
    """Step 7 (chapter 15): a prompt's attention as torch's fused kernel."""
    for m in model.modules():
        if isinstance(m, Attention):
            swap(m, SDPAAttention)


def grouped_decode(model):
    """Step 8 (chapter 15): a decode step's attention as two products over the grouped cache."""
    for m in model.modules():
        if isinstance(m, Attention):
            swap(m, GroupedDecodeAttention)
# --8<-- [end:attention]


# --8<-- [start:cache]
class RoomyKVCache(KVCache):
    """A KV cache that writes into room set aside up front (doubled if it runs out): no copy of
    the whole cache per token, as torch.cat makes. k and v are views of what is filled."""

    def __init__(self, batch, n_kv_head, head_dim, room):
        super().__init__(batch, n_kv_head, head_dim)         # k, v: [B, nkv, 0, hd]
        self.room = room

    def update(self, k, v):
        n, m = self.k.shape[2], self.k.shape[2] + k.shape[2]
        if n == 0 or m > self.kbuf.shape[2]:                  # the first call, or full
            room = max(m, self.room if n == 0 else 2 * self.kbuf.shape[2])
            self.kbuf, self.vbuf = grow(self.k, room, k), grow(self.v, room, v)
        self.kbuf[:, :, n:m], self.vbuf[:, :, n:m] = k, v
        self.k, self.v = self.kbuf[:, :, :m], self.vbuf[:, :, :m]
        return self.k, self.v


def grow(filled, room, like):
    """A buffer like `like` with room for `room` tokens, holding the tokens of `filled`."""
    new = like.new_empty(*like.shape[:2], room, like.shape[3])
    new[:, :, :filled.shape[2]] = filled
    return new


class RoomyCacheQwen(Qwen):
    def new_cache(self, batch=1, max_tokens=None):
        cache = super().new_cache(batch)
        room = max_tokens or 256
        cache.layers = [RoomyKVCache(batch, self.cfg.num_key_value_heads, self.cfg.head_dim, room)
                        if isinstance(c, KVCache) else c for c in cache.layers]
        return cache


def roomy_cache(model):
    """Step 9 (chapter 15): new_cache() sets room aside for every token it will hold."""
    swap(model, RoomyCacheQwen)
# --8<-- [end:cache]


# --8<-- [start:state]
class InPlaceDeltaNet(GatedDeltaNet):
    def delta_rule(self, q, k, v, g, beta, state):
        if state is None or q.shape[2] != 1:
            return super().delta_rule(q, k, v, g, beta, state)
        o = step(q[:, :, 0], k[:, :, 0], v[:, :, 0], g[:, :, 0], beta[:, :, 0], state)
        return o[:, :, None], state


def step(q, k, v, g, beta, S):
    """One token of the gated delta rule, the state S [B, H, dk, dv] updated in place.
    q, k [B, H, dk], v [B, H, dv], g, beta [B, H]."""
    S.mul_(g.exp()[..., None, None])                                # forget
    pred = (k[..., None, :] @ S)[..., 0, :]                         # what S holds for k [B, H, dv]
    u = beta[..., None] * (v - pred)                                # write only the error
    S.add_(k[..., :, None] * u[..., None, :])                       # rank-1 update
    return (q[..., None, :] @ S)[..., 0, :]                         # read with the query


def inplace_state(model):
    """Step 10 (chapter 15): a decode step updates the DeltaNet state in place."""
    for m in model.modules():
        if isinstance(m, GatedDeltaNet):
            swap(m, InPlaceDeltaNet)
# --8<-- [end:state]


# --8<-- [start:subnormals]
CUT = -60.0    # e^-60 = 8.8e-27: next to a term near 1, fp32 (2^-24 = 6e-8 apart) cannot hold it


def cut_exp(x):
    """e^x, but exactly 0 where x < CUT: no result in fp32's subnormal range (below 1.2e-38),
    which x86 CPUs add and multiply in microcode, tens of times slower than normal numbers."""
    return x.masked_fill(x < CUT, float("-inf")).exp()


class CutDecayDeltaNet(GatedDeltaNet):
    def delta_rule(self, q, k, v, g, beta, state):
        if state is not None and q.shape[2] == 1:
            return super().delta_rule(q, k, v, g, beta, state)
        return chunk_gated_delta_rule(q, k, v, g, beta, state, exp=cut_exp)


def no_subnormals(model):
    """Step 11 (chapter 15): a prompt's decay factors below e^-60 are zero, not subnormal."""
    for m in model.modules():
        if isinstance(m, GatedDeltaNet):
            swap(m, CutDecayDeltaNet)
# --8<-- [end:subnormals]


# --8<-- [start:one_solve]
class OneSolveDeltaNet(CutDecayDeltaNet):
    def delta_rule(self, q, k, v, g, beta, state):
        if (state is not None and q.shape[2] == 1) or q.device.type != "cpu":
            return super().delta_rule(q, k, v, g, beta, state)     # a GPU keeps the batched solves
        return chunk_rule_one_solve(q, k, v, g, beta, state)


def chunk_rule_one_solve(q, k, v, g, beta, state=None, chunk_size=64, exp=cut_exp):
    """Chapter 7's chunked rule, with V' solved for inside the loop, once per chunk:
    M V' = beta V - (beta e^gamma K) S. No W = M^-1 (beta e^gamma K), whose entries multiply
    many decays together and can be subnormal even when every factor is cut."""
    c = chunked(q, k, v, g, beta, chunk_size, exp)           # chapter 7's chunks, as they are
    B, H, n, C, dv = c.vb.shape
    S = (torch.zeros(B, H, c.kg.shape[-1], dv, dtype=v.dtype, device=v.device)
         if state is None else state)
    out = torch.empty(B, H, n, C, dv, dtype=v.dtype, device=v.device)
    for i in range(n):
        new_v = torch.linalg.solve_triangular(c.M[:, :, i], c.vb[:, :, i] - c.kg[:, :, i] @ S,
                                              upper=False)          # M V' = beta V - (beta e^g K) S
        out[:, :, i] = c.q_in[:, :, i] @ S + c.attn[:, :, i] @ new_v
        S = S * c.end[:, :, i, None, None] + c.k_out[:, :, i].transpose(-1, -2) @ new_v
    return out.view(B, H, n * C, dv)[:, :, :c.T], S


def one_solve(model):
    """Step 12 (chapter 15): on a CPU, a prompt's chunks each solve one triangular system in
    the loop, instead of two for all chunks before it."""
    for m in model.modules():
        if isinstance(m, GatedDeltaNet):
            swap(m, OneSolveDeltaNet)
# --8<-- [end:one_solve]


# --8<-- [start:weight_first]
def weight_first(x, w):
    """x @ w.T computed as (w @ x.T).T: the same sums, with the weight as the left operand of the
    product; the result is made contiguous again for what follows."""
    y = torch.mm(w, x.reshape(-1, x.shape[-1]).t()).t().contiguous()
    return y.view(*x.shape[:-1], -1)


class WeightFirstLinear(nn.Linear):
    def forward(self, x):
        if x.shape[:-1].numel() > ROWS and self.bias is None:
            return weight_first(x, self.weight.to(x.dtype))    # a prompt: widened if x is fp32
        return super().forward(x)                               # a decode step: as before


@functools.cache
def product_orders(dtype, rows=128, n_in=1024, n_out=7168):
    """Milliseconds of one prompt-sized product (128 rows, the joined MLP projections' shape)
    in the activations' dtype, both ways round; measured once per dtype."""
    w, x = torch.randn(n_out, n_in).to(dtype), torch.randn(rows, n_in).to(dtype)
    return alternately({"x first": lambda: F.linear(x, w),
                        "weight first": lambda: weight_first(x, w)})


def weight_first_prompts(model):
    """Step 13 (chapter 15): on a CPU where it measures faster, a prompt's products with the
    weights as (w @ x.T).T."""
    if model.embed_tokens.weight.device.type != "cpu":
        return "x first (measured on a CPU only)"
    dtype = torch.float32 if isinstance(model.embed_tokens, WideEmbedding) else \
        model.embed_tokens.weight.dtype
    ms = product_orders(dtype)
    why = (f"a 128-row product: x first {ms['x first']:.2f} ms, "
           f"weight first {ms['weight first']:.2f} ms")
    if ms["weight first"] > 0.9 * ms["x first"]:
        return f"x first ({why})"
    for m in model.modules():
        if isinstance(m, nn.Linear):
            swap(m, WeightFirstLinear)
    return f"weight first ({why})"


class WeightFirstInt8Linear(Int8Linear):
    def widened(self, x):
        return weight_first(x, self.q.to(x.dtype)) * self.s.to(x.dtype)
# --8<-- [end:weight_first]


# --8<-- [start:quantize]
def quantize_weights(model, kind):
    """Step 14 (chapter 16): every projection and the head as int8 ("int8"), int8 multiplied in
    int8 when decoding ("w8a8") or int4 in groups of 32 ("int4"); the embedding stays a lookup.
    Where prompts multiply weight first, widened int8 weights do too."""
    if kind not in QUANTIZED:
        raise ValueError(f"quantize={kind!r}: use None (the weights as they are), "
                         + ", ".join(f'"{k}"' for k in QUANTIZED))
    for m, name, w in copy_order(model):
        first = isinstance(getattr(m, name), WeightFirstLinear)
        setattr(m, name, QUANTIZED[kind](w))
        if first and isinstance(getattr(m, name), Int8Linear):
            swap(getattr(m, name), WeightFirstInt8Linear)
        give_back(model, w)
# --8<-- [end:quantize]


# --8<-- [start:from_pretrained]
STEPS = {"mapped load": None, "joined projections": join_projections,
         "activations": choose_activations, "packed weights": pack_weights,
         "fused norms": fuse_norms,
         "decode conv": decode_conv, "sdpa prompts": sdpa_prompts,
         "grouped decode": grouped_decode, "roomy cache": roomy_cache,
         "in-place state": inplace_state, "no subnormals": no_subnormals,
         "one solve per chunk": one_solve, "weight-first prompts": weight_first_prompts}


def from_pretrained(path, dtype=torch.float32, device="cpu", quantize=None, steps=None,
                    activations="auto", finite=True):
    """The model of the checkpoint folder `path`, made fast: the clear model of qwen/model.py
    with the steps of chapters 14-16 applied in order (all of them, or those named in `steps`;
    without "mapped load" the clear loader reads the file). model.steps says what each step did.
    finite=False skips the check for NaN and inf weights (a pass over every weight at load)."""
    names = list(STEPS) if steps is None else list(steps)
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        raise ValueError(f"steps {unknown}: the steps are {', '.join(map(repr, STEPS))}")
    if quantize is not None and quantize not in QUANTIZED:
        raise ValueError(f"quantize={quantize!r}: use None (the weights as they are), "
                         + ", ".join(f'"{k}"' for k in QUANTIZED))
    if "mapped load" in names:
        model = load_mapped(path, dtype, finite).to(device)
    else:
        model = load(Qwen(Config.load(path)), load_weights(path, dtype, finite)).to(device)
        model.requires_grad_(False)
    if quantize is not None and "packed weights" in names:
        names.remove("packed weights")                  # int8 and int4 have kernels of their own
    model.steps = {}
    for name in STEPS:                                   # in the book's order, whatever was given
        if name in names:
            model.steps[name] = ("done" if STEPS[name] is None else
                                 choose_activations(model, activations) if name == "activations"
                                 else STEPS[name](model) or "done")
    if quantize is not None:
        quantize_weights(model, quantize)
        model.steps["quantize"] = quantize
        if quantize == "w8a8":
            how, why = int8_prompts()
            model.steps["quantize"] += f" (prompts {'in int8' if how == 'int8' else how}: {why})"
    model.__dict__.pop("maps", None)                    # give_back's list, for the load only
    return model
# --8<-- [end:from_pretrained]
