"""int8 quantization: each output row of a weight is stored as int8 times one scale; with
W8A8Linear the activations of a decode step are rounded to int8 too, and multiplied in int8."""
# --8<-- [start:quantize]
import warnings

import torch

ROWS = 16          # a matmul with more rows than this is compute-bound (prefill)


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

    def __init__(self, w):
        super().__init__()
        # in slices of rows: the fp32 copies made on the way stay small
        q, s = zip(*(quantize_int8(part) for part in w.split(32768)))
        self.register_buffer("q", torch.cat(q))
        self.register_buffer("s", torch.cat(s).bfloat16())  # the kernel wants its scales in bf16

    def forward(self, x):
        if x.shape[:-1].numel() > ROWS:                      # prefill: compute-bound, widen first
            return torch.nn.functional.linear(x, dequantize_int8(self.q, self.s.float()))
        # torch's int8 x bf16 kernel: reads 1 byte per weight, scales each output column once
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).bfloat16(), self.q, self.s)
        return y.view(*x.shape[:-1], -1).float()
# --8<-- [end:linear]


# --8<-- [start:w8a8]
class W8A8Linear(Int8Linear):
    """The int8 weights of Int8Linear, multiplied in int8: for a few rows (decode) x is rounded
    to 8 bits too, one scale for the call, and fbgemm adds the int8 x int8 products in int32,
    many in one instruction, where the weight-only kernel widens every weight to bf16 first.
    llama.cpp's q8_0 does the same with one scale per 32 values of x. Prefill is Int8Linear's."""

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

    def forward(self, x):
        if x.shape[:-1].numel() > ROWS:
            return super().forward(x)
        # reduce_range: x is rounded to 7 bits, so that two products summed never pass the 16-bit
        # accumulator of AVX2's multiply-add (255 * 127 * 2 would)
        x2 = x.reshape(-1, x.shape[-1])                 # fp32, as the fast path keeps it
        y = torch.ops.quantized.linear_dynamic(x2, self.packed, True)   # reduce_range=True
        return y.view(*x.shape[:-1], -1)
# --8<-- [end:w8a8]
