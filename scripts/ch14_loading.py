"""Chapter 14: loading without building twice. The file mapped, not read; tensors as views into it;
projections of one input joined without a copy."""
import torch

from book.tiny import is_tiny
from qwen import fast
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

# chapter 14's two steps: load on the meta device from the map, then join the projections
model = fast.from_pretrained(path, torch.bfloat16, steps=["mapped load", "joined projections"])
storage = model.embed_tokens.weight.untyped_storage()           # its own map of the file
deltanet = model.layers[0].linear_attn
attn = next(layer.self_attn for layer in model.layers if hasattr(layer, "self_attn"))
for label, f in (("DeltaNet in_proj", deltanet.in_proj),
                 ("MLP gate_up", model.layers[0].mlp.gate_up_proj),
                 ("attention qkv", attn.qkv_proj)):
    view = f.proj.weight.untyped_storage().data_ptr() == storage.data_ptr()
    rows = [n.removesuffix("_proj").removeprefix("in_proj_") for n in f.names]
    print(f"{label:17} rows {rows} {f.sizes}: a view of the file (no copy): {view}")
print("(attention: o_proj lies between k_proj and q_proj in the file, so its three are copied)")
copied = sum(t.nbytes for t in [*model.parameters(), *model.buffers()]
             if t.untyped_storage().data_ptr() != storage.data_ptr())
print(f"bytes copied at load: {copied:,} of {file.stat().st_size:,} "
      "(the joined attention projections, and RoPE's frequencies)")
print("the model is still the reader's:", type(model).__mro__[-3].__name__,
      "| layer 0 mixer:", " -> ".join(c.__name__ for c in type(deltanet).__mro__[:-2]))
