"""Reading fewer bytes: each output row of a weight stored as int8 times one scale (Int8Linear);
with W8A8Linear the activations are rounded to int8 too and multiplied in int8;
Int4Linear keeps 4 bits per weight, a scale and an offset per group of 32."""
# --8<-- [start:quantize]
import functools
import warnings

import torch
import torch.nn.functional as F

from qwen.timing import alternately

ROWS = 16          # a matmul with more rows than this is compute-bound (a prompt)


def quantize_int8(w):
    """w [out, in] ~= q * s[:, None] with q int8 in [-127, 127]: one scale per output channel."""
    w = w.float()
    s = w.abs().amax(dim=1).clamp(min=1e-12) / 127           # the largest |w| of a row maps to 127
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s                                              # [out, in] int8, [out] fp32


def dequantize_int8(q, s):
    """The fp32 weight that q and s stand for."""
    return q.float() * s[:, None]
# --8<-- [end:quantize]


# --8<-- [start:linear]
class Int8Linear(torch.nn.Module):
    """x @ w.T with w stored as int8 and one scale per output channel: half the bytes of bf16."""

    inference_only = True                                 # integer weights take no gradient

    def __init__(self, w):
        super().__init__()
        # in slices of rows: the fp32 copies made on the way stay small
        q, s = zip(*(quantize_int8(part) for part in w.split(32768)))
        self.register_buffer("q", torch.cat(q))
        self.register_buffer("s", torch.cat(s).bfloat16())  # the kernel wants its scales in bf16

    def forward(self, x):
        if x.shape[:-1].numel() > ROWS or self.q.device.type == "cuda":
            return self.widened(x)
        # torch's int8 x bf16 kernel: reads 1 byte per weight, widens it to fp32 in its inner loop
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).bfloat16(), self.q, self.s)
        return y.view(*x.shape[:-1], -1).to(x.dtype)

    def widened(self, x):
        # a prompt is compute-bound: widen q to the activations' dtype (exact: |q| <= 127) and
        # multiply; a row's scale comes out of its sums: one multiply per output, not per weight
        return F.linear(x, self.q.to(x.dtype)) * self.s.to(x.dtype)
# --8<-- [end:linear]


# --8<-- [start:w8a8]
class W8A8Linear(Int8Linear):
    """The int8 weights of Int8Linear, multiplied in int8: for a few rows (decode) x is rounded
    to 7 bits too, one scale for the call, and fbgemm adds the int8 x int8 products in int32,
    many in one instruction, where the weight-only kernel widens every weight first.
    llama.cpp's q8_0 does the same with one scale per 32 values of x. A prompt is rounded row by
    row and multiplied through oneDNN where int8_prompts() chose it, else widened as Int8Linear."""

    def __init__(self, w):
        super().__init__(w)
        if "fbgemm" not in torch.backends.quantized.supported_engines:
            raise RuntimeError('quantize="w8a8" needs torch\'s fbgemm kernels, which this torch '
                               'build lacks (x86 CPU builds have them): use quantize="int8"')
        zero = torch.zeros(len(self.s), dtype=torch.long)
        # torch's quantized tensors are deprecated, the kernel is not, and one is its only way in:
        # it is made here and dropped at once
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qw = torch._make_per_channel_quantized_tensor(self.q, self.s.double(), zero, 0)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)   # in fbgemm's tile order
        if int8_prompts()[0] == "int8":
            # q in oneDNN's blocked order for prompts; it replaces q: no more bytes than before
            self.register_buffer("blocked", torch.ops.onednn.qlinear_prepack(self.q, None))
            self.zeros = torch.zeros(len(self.s), dtype=torch.int32)   # the weights' zero points
            del self.q

    def forward(self, x):
        if x.shape[:-1].numel() > ROWS:
            if not hasattr(self, "blocked"):
                return super().forward(x)
            y = int8_rows(x.reshape(-1, x.shape[-1]), self.blocked, self.s, self.zeros)
            return y.view(*x.shape[:-1], -1).to(x.dtype)
        # reduce_range: x is rounded to 7 bits (128 levels), so that two products summed never
        # saturate the 16-bit accumulator of AVX2's multiply-add (255 * 127 * 2 would)
        x2 = x.reshape(-1, x.shape[-1]).float()
        y = torch.ops.quantized.linear_dynamic(x2, self.packed, True)   # reduce_range=True
        return y.view(*x.shape[:-1], -1).to(x.dtype)


def int8_rows(x, blocked, s, zeros):
    """x [N, in] @ w.T for a prompt: each row of x rounded to 255 levels, -127..127 steps of its
    own scale, stored + 128 as bytes; oneDNN adds the byte products in int32 and applies the
    weights' scales s; each row's own scale comes last, one multiply per output."""
    x = x.float()
    sx = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    u = (torch.round(x / sx) + 128).to(torch.uint8)
    y = torch.ops.onednn.qlinear_pointwise(u, 1.0, 128, blocked, s.float(), zeros, None, 1.0, 0,
                                           torch.float32, "none", [], "")
    return y * sx


def cpu_flags():
    """The feature flags /proc/cpuinfo lists (an empty set where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith(("flags", "Features"))
                    for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


@functools.cache
def int8_prompts(rows=128, n_in=1024, n_out=3584):
    """("int8" or "widen", why): how W8A8Linear multiplies a prompt here. int8 needs oneDNN's int8
    matmul and a CPU that adds byte products into 32 bits (VNNI or AMX; without them pairs of
    products saturate 16 bits), and must measure faster than widening on a prompt-sized matmul."""
    onednn = torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")
    if not onednn:
        return "widen", "this torch has no oneDNN int8 matmul"
    if not {"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags():
        return "widen", "no VNNI or AMX: byte products would saturate 16-bit sums"
    # oneDNN may still run a kernel without them (its ISA capped): try the worst case for 16-bit
    # sums, every byte product 255 * 127, whose exact answer is known
    top = Int8Linear(torch.ones(16, 64))                          # q = 127, s = 1/127
    y = int8_rows(torch.ones(ROWS + 1, 64), torch.ops.onednn.qlinear_prepack(top.q, None), top.s,
                  torch.zeros(16, dtype=torch.int32))
    if not torch.allclose(y, torch.full_like(y, 64.0), rtol=1e-3):
        return "widen", "oneDNN's int8 kernel saturates here (it runs without VNNI or AMX)"
    w, x = torch.randn(n_out, n_in) * 0.02, torch.randn(rows, n_in).bfloat16()  # a bf16 model's
    lin = Int8Linear(w)
    blocked = torch.ops.onednn.qlinear_prepack(lin.q, None)
    zeros = torch.zeros(n_out, dtype=torch.int32)
    ms = alternately({"int8": lambda: int8_rows(x, blocked, lin.s, zeros), "widen": lambda: lin(x)})
    choice = min(ms, key=ms.get)
    return choice, f"a {rows}-row matmul: int8 {ms['int8']:.2f} ms, widened {ms['widen']:.2f} ms"
# --8<-- [end:w8a8]


# --8<-- [start:int4]
GROUP = 32         # int4: one scale and offset per 32 weights of a row, as llama.cpp's q4_0


def quantize_int4(w, group=GROUP):
    """w [out, in] ~= (q - 8) * s + z per group of `group` weights of a row, q in 0..15."""
    g = w.float().reshape(w.shape[0], -1, group)             # [out, in / group, group]
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    s = (hi - lo).clamp(min=1e-6) / 15                       # 16 levels from lo to hi
    q = ((g - lo) / s).round().clamp(0, 15)
    z = lo + 8 * s                                           # the value of the middle level, 8
    return q.reshape(w.shape).to(torch.int32), s[..., 0], z[..., 0]   # [out, in], [out, in/32] x2


def dequantize_int4(q, s, z, group=GROUP):
    qg = q.float().reshape(q.shape[0], -1, group)
    return ((qg - 8) * s[..., None] + z[..., None]).reshape(q.shape)


class Int4Linear(torch.nn.Module):
    """x @ w.T with w stored in 4 bits (a quarter of bf16's bytes, plus 2 bf16 numbers per 32)."""

    inference_only = True                                 # integer weights take no gradient

    def __init__(self, w, group=GROUP):
        super().__init__()
        if w.shape[1] % group:
            raise ValueError(f"int4 needs each row's length {w.shape[1]} to divide by {group}")
        self.group, self.out_features = group, w.shape[0]
        w = F.pad(w, (0, 0, 0, -w.shape[0] % 16))            # the kernel packs rows by 16
        self.device_type = w.device.type                     # each device's kernel, its layout
        if self.device_type not in ("cpu", "cuda"):
            raise ValueError(f"int4 has torch kernels for the CPU and CUDA, not "
                             f"{self.device_type}: use quantize='int8' there")
        packed, s, z = [], [], []
        for part in w.split(32768):            # in slices of rows: the temporaries stay small
            q, sp, zp = quantize_int4(part, group)
            packed.append(pack_int4(q))
            s.append(sp)
            z.append(zp)
        s, z = torch.cat(s), torch.cat(z)
        self.register_buffer("packed", torch.cat(packed))
        # scales and offsets [in / group, out, 2]
        self.register_buffer("sz", torch.stack([s.t(), z.t()], -1).bfloat16().contiguous())

    def forward(self, x):
        if x.device.type != self.device_type:
            raise RuntimeError(f"these int4 weights are packed for the {self.device_type}'s "
                               f"kernel, the input is on {x.device.type}: quantize the model on "
                               "the device it runs on")
        x2 = x.reshape(-1, x.shape[-1]).bfloat16()
        if self.device_type == "cuda":
            y = torch.ops.aten._weight_int4pack_mm(x2, self.packed, self.group, self.sz)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, self.group, self.sz)
        return y[:, :self.out_features].reshape(*x.shape[:-1], -1).to(x.dtype)


def pack_int4(q):
    """q [out, in] (0..15, int32) in the layout of its device's int4 kernel, two nibbles per byte,
    packed by torch. CUDA's takes bytes made first (even column in the high nibble), in tiles of
    16 x k columns of 16, k as large as the row's length allows."""
    if q.device.type == "cpu":
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    k = next(k for k in (8, 4, 2) if q.shape[1] % (16 * k) == 0)
    return torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                     k)
# --8<-- [end:int4]


QUANTIZED = {"int8": Int8Linear, "w8a8": W8A8Linear, "int4": Int4Linear}
