"""Chapter 14: loading without building twice. The file mapped, not read; tensors as views into it;
projections of one input joined without a copy."""
import torch

from book.tiny import is_tiny
from qwen import fast
from qwen.model import from_pretrained
from qwen.weights import find_model

path = find_model()
if is_tiny(path):
    print("(the tiny test model: the layout is the official one, the sizes are tiny)\n")
file = sorted(path.glob("*.safetensors"))[0]
W = fast.mmap_safetensors(file)
storage = next(iter(W.values())).untyped_storage()
one_map = all(t.untyped_storage().data_ptr() == storage.data_ptr() for t in W.values())
print(f"{file.name}: {file.stat().st_size:,} bytes, {len(W)} tensors, "
      f"all views of one map: {one_map}")

# --8<-- [start:layout]
p = "model.language_model.layers.0."
for name in sorted(n for n in W if n.startswith(p) and "proj" in n):
    t = W[name]
    start = t.data_ptr() - storage.data_ptr()
    print(f"  {name[len(p):]:30} bytes {start:>10,} .. {start + t.nbytes:>10,}  {tuple(t.shape)}")
# --8<-- [end:layout]

model = from_pretrained(path, torch.bfloat16)                    # the fast path
storage = model.embed_tokens.weight.untyped_storage()           # its own map of the file
layer = model.layers[0]
for label, f in (("DeltaNet in_proj", layer.mixer.in_proj), ("MLP gate_up", layer.mlp.gate_up)):
    view = f.proj.w.untyped_storage().data_ptr() == storage.data_ptr()
    print(f"{label:17} rows {f.keys} {f.sizes}: a view of the file (no copy): {view}")
attn = next(layer.mixer for layer in model.layers if not layer.is_deltanet)
print(f"{'attention qkv':17} rows {attn.qkv.keys} {attn.qkv.sizes}: a view of the file (no copy): "
      f"{attn.qkv.proj.w.untyped_storage().data_ptr() == storage.data_ptr()}"
      "  (o_proj lies between k_proj and q_proj)")
copied = sum(b.nbytes for m in model.modules() for b in m.buffers(recurse=False)
             if b.untyped_storage().data_ptr() != storage.data_ptr())
print(f"bytes copied at load: {copied:,} of {file.stat().st_size:,} "
      "(the joined attention projections and the fp32 norms)")
