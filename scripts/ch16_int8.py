"""Chapter 16: reading fewer bytes. int8 weights with one scale per output row: the bytes saved, and
what it costs in accuracy next to bf16's own cost; then int8 activations too (w8a8), measured on
decode steps, where they are used."""
import torch

from book.out import record
from book.tiny import is_tiny
from qwen.cache import Cache
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

# --8<-- [start:decode]
# w8a8 rounds the activations only when decoding (a few rows): measure it there, step by step, each
# step fed the same token as fp32's
variants["w8a8"] = from_pretrained(path, torch.bfloat16, quantize="w8a8")
prompt, steps = 100, 50


def decode_logits(model):
    cache = Cache(model.cfg)
    model(ids[:, :prompt], cache=cache)
    return torch.cat([model(ids[:, t:t + 1], cache=cache).float()
                      for t in range(prompt, prompt + steps)], dim=1)


ref = decode_logits(fp32)
print(f"\n{steps} decode steps after {prompt} tokens")
print(f"{'':16}{'top-1 = fp32':>14}{'logit error':>14}")
decode = {}
for name in ("clear bf16", "fast bf16", "int8 everywhere", "w8a8"):
    got = decode_logits(variants[name])
    top1 = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    err = ((got - ref).norm() / ref.norm()).item()                    # relative, over all logits
    decode[name] = top1, err
    print(f"{name:16}{top1:>14.1%}{err:>14.2%}")
# --8<-- [end:decode]
record(**{f"decode_agree_{k.split()[0]}": f"{a:.1%}" for k, (a, _) in decode.items()},
       **{f"decode_err_{k.split()[0]}": f"{e:.2%}" for k, (_, e) in decode.items()},
       **{f"agree_{k.replace(' ', '_')}": f"{v:.1%}" for k, v in agree.items()},
       bytes_bf16=f"{read_bytes(variants['fast bf16']):,}",
       bytes_int8=f"{read_bytes(variants['int8 everywhere']):,}")
