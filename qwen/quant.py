"""int8 weight-only quantization: each output row of a weight is stored as int8 times one scale."""
# --8<-- [start:quantize]
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
