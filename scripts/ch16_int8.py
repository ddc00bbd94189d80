"""Chapter 16: reading fewer bytes. int8 weights with one scale per output row: the bytes saved, and
what it costs in accuracy next to bf16's own cost."""
import torch

from book.out import record
from book.tiny import is_tiny
from qwen.fast import FastQwen, Linear
from qwen.model import from_pretrained
from qwen.quant import Int8Linear, dequantize_int8, quantize_int8
from qwen.weights import find_model

torch.set_grad_enabled(False)
torch.manual_seed(0)
path = find_model()
if is_tiny(path):
    print("(the tiny test model: random weights; what matters is the sizes and the rounding)\n")

# --8<-- [start:rows]
w = torch.tensor([[0.02, -0.01, 0.005], [1.5, -3.0, 0.7]])       # two rows, two scales
q, s = quantize_int8(w)
print("q =", q.tolist(), " scales =", [f"{x:.5f}" for x in s.tolist()])
print("dequantized:", [[round(x, 4) for x in row] for row in dequantize_int8(q, s).tolist()])
# --8<-- [end:rows]

fp32 = from_pretrained(path, torch.float32)
variants = {"clear bf16": from_pretrained(path, torch.bfloat16, fast=False),
            "fast bf16": from_pretrained(path, torch.bfloat16)}
head_only = from_pretrained(path, torch.bfloat16)
head_only.lm_head = Int8Linear(head_only.lm_head.w)            # the head first: a third of 0.8B
variants["int8 head only"] = head_only
variants["int8 everywhere"] = from_pretrained(path, torch.bfloat16, quantize="int8")


def read_bytes(model):
    """Bytes of weights one decode step reads: every matrix, the head included; the embedding
    table only as the head (a lookup reads one row)."""
    if not isinstance(model, FastQwen):
        return sum(p.nbytes for p in model.parameters() if p.dim() == 2)   # tied: counted once
    return sum(m.w.nbytes if isinstance(m, Linear) else m.q.nbytes + m.s.nbytes
               for m in model.modules() if isinstance(m, (Linear, Int8Linear)))


ids = torch.randint(0, 200_000, (1, 200))
ref = fp32(ids)
print(f"\n{'':16}{'bytes read':>14}{'top-1 = fp32':>14}")
agree = {}
for name, m in variants.items():
    agree[name] = (m(ids).float().argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"{name:16}{read_bytes(m):>14,}{agree[name]:>14.1%}")
record(**{f"agree_{k.replace(' ', '_')}": f"{v:.1%}" for k, v in agree.items()},
       bytes_bf16=f"{read_bytes(variants['fast bf16']):,}",
       bytes_int8=f"{read_bytes(variants['int8 everywhere']):,}")
