"""Chapter 15: decoding with fewer steps. The fast path against the clear model it was made from:
the same logits, the same greedy tokens, the same cache, in far fewer operator calls."""
import torch
import torch.nn.functional as F

from book.out import record
from book.tiny import is_tiny
from qwen import fast
from qwen.generate import generate
from qwen.model import from_pretrained
from qwen.weights import find_model

torch.set_grad_enabled(False)
torch.manual_seed(0)
path = find_model()
if is_tiny(path):
    print("(the tiny test model: random weights, so only equality means something here)\n")
clear = from_pretrained(path, torch.float32)
model = fast.from_pretrained(path, torch.float32)                  # every step of chapters 14-15
print("steps:", ", ".join(model.steps))
ids = torch.randint(0, 200_000, (1, 150))
a, b = clear(ids), model(ids)
rel = ((a - b).abs().max() / a.abs().max()).item()
print(f"fp32 logits, 150 tokens: max |fast - clear| / max |clear| < 1e-4: {rel < 1e-4}")
prompt = ids[0, :20].tolist()
same = list(generate(model, prompt, 32)) == list(generate(clear, prompt, 32))
print(f"32 greedy tokens, fast == clear: {same}")

# --8<-- [start:sdpa]
q, k, v = torch.randn(1, 8, 5, 32), torch.randn(1, 2, 5, 32), torch.randn(1, 2, 5, 32)
mask = torch.full((5, 5), float("-inf")).triu(1)                     # causal
att = torch.softmax(q @ k.repeat_interleave(4, 1).transpose(-1, -2) * 32**-0.5 + mask, dim=-1)
by_hand = att @ v.repeat_interleave(4, 1)                             # KV heads copied 4 times
fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
print("scaled_dot_product_attention(enable_gqa=True) == softmax by hand with copied KV heads:",
      torch.allclose(fused, by_hand, atol=1e-5))
# --8<-- [end:sdpa]

cache_clear, cache_fast = clear.new_cache(), model.new_cache()     # a KV cache with room set aside
clear(ids[:, :100], cache=cache_clear)
model(ids[:, :100], cache=cache_fast)
room = []
for t in range(100, 150):
    clear(ids[:, t:t + 1], cache=cache_clear)
    model(ids[:, t:t + 1], cache=cache_fast)
    room.append(cache_fast.layers[3].kbuf.shape[2])                # the first attention layer
print(f"after 150 tokens: cache bytes equal: {cache_clear.nbytes() == cache_fast.nbytes()}; "
      f"room in the fast KV cache: {sorted(set(room))} tokens (it doubles when full)")
record(greedy_equal=same, rel_lt=rel < 1e-4)
