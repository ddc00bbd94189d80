"""Chapter 16: reading fewer bytes. int8 weights with one scale per output row: the bytes saved, and
what it costs in accuracy next to bf16's own cost; int4 in groups of 32; then int8 activations too
(w8a8), measured on decode steps, each rounded with one scale."""
import torch
import torch.nn as nn

from book.out import record, record_measured
from book.tiny import is_tiny
from qwen import fast
from qwen.embedding import LMHead
from qwen.model import from_pretrained
from qwen.quant import Int4Linear, Int8Linear, dequantize_int8, quantize_int8
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

# the steps of chapters 14-15 without the packing (int8 replaces those weights anyway), and
# activations named, not measured, so that every machine prints the same rows
plain = [s for s in fast.STEPS if s != "packed weights"]
bf16 = torch.bfloat16


def made(activations="fp32", quantize=None):
    return fast.from_pretrained(path, bf16, steps=plain, activations=activations, quantize=quantize)


fp32 = from_pretrained(path, torch.float32)
variants = {"clear bf16": from_pretrained(path, bf16),
            "fast bf16": made("bf16"), "fast bf16, fp32 act": made("fp32")}
head_only = made()
head_only.lm_head = Int8Linear(head_only.lm_head.weight)        # the head first: a third of 0.8B
variants["int8 head only"] = head_only
variants["int8 everywhere"] = made(quantize="int8")
variants["int4 everywhere"] = made(quantize="int4")


def read_bytes(model):
    """Bytes of weights one decode step reads: every matrix, the head included; the embedding
    table only as the head (a lookup reads one row)."""
    total = 0
    for m in model.modules():
        if isinstance(m, (nn.Linear, LMHead)):
            total += m.weight.nbytes
        elif isinstance(m, (Int8Linear, Int4Linear)):
            total += sum(b.nbytes for b in m.buffers())
    return total


def key(name):
    return name.replace(",", "").replace(" ", "_")


ids = torch.randint(0, 200_000, (1, 200), generator=torch.Generator().manual_seed(0))
ref = fp32(ids)
print(f"\n{'':20}{'bytes read':>14}{'top-1 = fp32':>14}")
agree = {}
for name, m in variants.items():
    agree[name] = (m(ids).float().argmax(-1) == ref.argmax(-1)).float().mean().item()
    # an argmax over near-equal random logits, through bf16 or int8 kernels: the CPU moves it
    shown = record_measured(f"agree_{key(name)}", f"{agree[name]:.1%}", tol=6)
    print(f"{name:20}{read_bytes(m):>14,}{shown:>14}")

# --8<-- [start:decode]
# w8a8, on decode steps: a step is one row, all of it rounded with one scale. (Its prompt takes the
# path this CPU chose, int8 rows or widened, so its prompt agreement would differ by machine.)
# Step by step, each step fed the same token as fp32's
if "fbgemm" in torch.backends.quantized.supported_engines:
    variants["w8a8"] = made(quantize="w8a8")
prompt, steps = 100, 50


def decode_logits(model):
    cache = model.new_cache(max_tokens=prompt + steps)
    model(ids[:, :prompt], cache=cache)
    return torch.cat([model(ids[:, t:t + 1], cache=cache).float()
                      for t in range(prompt, prompt + steps)], dim=1)


ref = decode_logits(fp32)
print(f"\n{steps} decode steps after {prompt} tokens")
print(f"{'':20}{'top-1 = fp32':>14}{'logit error':>14}")
decode = {}
for name in ("clear bf16", "fast bf16", "fast bf16, fp32 act", "int8 everywhere",
             "int4 everywhere", "w8a8"):
    if name not in variants:
        continue
    got = decode_logits(variants[name])
    top1 = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    err = ((got - ref).norm() / ref.norm()).item()                    # relative, over all logits
    decode[name] = top1, err
    top1 = record_measured(f"decode_agree_{key(name)}", f"{top1:.1%}", tol=10)
    err = record_measured(f"decode_err_{key(name)}", f"{err:.2%}", rel=0.25)
    print(f"{name:20}{top1:>14}{err:>14}")
# --8<-- [end:decode]


record(**{f"bytes_{key(k)}": f"{read_bytes(m):,}" for k, m in variants.items()})
