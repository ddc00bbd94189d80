"""Chapter 13: what one token costs. Bytes and FLOPs per token from the 0.8B config, and the
operator calls of one decode step, counted by the profiler (measured times: scripts/bench.py)."""
from pathlib import Path

import torch
from torch.profiler import profile

from book import tiny
from book.out import record
from qwen import fast
from qwen.model import from_pretrained
from qwen.weights import Config, find_model, parameter_budget

torch.set_grad_enabled(False)
cfg = Config.load(Path("book/data/qwen3.5-0.8b"))        # the 0.8B's config.json, in the repo
params = sum(parameter_budget(cfg).values())
head = cfg.vocab_size * cfg.hidden_size
print(f"Qwen3.5-0.8B: {params:,} parameters; the output layer (the tied table) has {head:,}, "
      f"{head / params:.0%} of them")
for name, size in (("fp32", 4), ("bf16", 2), ("int8", 1)):
    print(f"  one decode step reads every weight once: {params * size / 1e9:.2f} GB in {name}")
print(f"  prefill: 2 FLOP per weight and token = {2 * params / 1e9:.2f} GFLOP per token, "
      f"{2 * (params - head) / 1e9:.2f} without the head (scored at the last position only)")
record(params=f"{params:,}", head_share=f"{head / params:.0%}",
       gb_fp32=f"{params * 4 / 1e9:.2f}", gb_bf16=f"{params * 2 / 1e9:.2f}",
       gb_int8=f"{params / 1e9:.2f}", gflop_token=f"{2 * params / 1e9:.2f}")

# One decode step of the model at hand, clear and fast: how many operator calls it makes.
path = find_model()
counts = {}
for label, load in (("clear", from_pretrained), ("fast", fast.from_pretrained)):
    model = load(path, torch.float32)
    cache = model.new_cache()
    x = model(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]]), cache=cache, last_only=True)[:, -1:]
    with profile() as prof:
        model(x.argmax(-1), cache=cache, last_only=True)
    counts[label] = {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}
print(f"\none decode step, {len(model.cfg.layer_types)} layers "
      f"({'tiny test model' if tiny.is_tiny(path) else path.name}): operator calls")
print(f"  {'operator':28}{'clear':>7}{'fast':>7}")
top = sorted(counts["clear"], key=lambda k: -counts["clear"][k])[:10]
for op in top + sorted(k for k in ("aten::mm", "aten::bmm") if k not in top):
    print(f"  {op:28}{counts['clear'][op]:>7}{counts['fast'].get(op, 0):>7}")
total = {k: sum(v.values()) for k, v in counts.items()}
print(f"  {'all aten:: calls':28}{total['clear']:>7}{total['fast']:>7}")
record(ops_clear=total["clear"], ops_fast=total["fast"],
       mm_clear=counts["clear"].get("aten::mm", 0), mm_fast=counts["fast"].get("aten::mm", 0))
