"""Stage 3's steps one by one (chapters 13-16): the chain of models, each with one more step, and
where a decode step's time goes (operator calls, matrix products, the rest)."""

import collections
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from book.bench.machine import timeit
from book.bench.systems import Ours, decode_run, interleaved, prefill_run
from qwen import fast
from qwen.model import from_pretrained as clear_from_pretrained

ROOT = Path(__file__).resolve().parents[2]


def prefill_shares(model, ids):
    """Where one prefill of the fast path goes: seconds in the DeltaNet mixers (and in their chunked
    rule), the attention mixers, the MLPs and the rest, timed with hooks around each module."""
    from qwen import deltanet

    spent = {"DeltaNet mixers": 0.0, "chunked rule": 0.0, "attention mixers": 0.0, "MLPs": 0.0}
    hooks, rule = [], deltanet.chunk_gated_delta_rule

    def timed(name, f):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                spent[name] += time.perf_counter() - t0

        return run

    for layer in model.layers:
        mixer = layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn
        for module, name in (
            (mixer, "DeltaNet mixers" if hasattr(layer, "linear_attn") else "attention mixers"),
            (layer.mlp, "MLPs"),
        ):
            module.forward = timed(name, module.forward)
            hooks.append(module)
    deltanet.chunk_gated_delta_rule = timed("chunked rule", rule)
    try:
        with torch.no_grad():
            model(ids[:, :16], cache=model.new_cache(), last_only=True)  # warm-up
            spent.update(dict.fromkeys(spent, 0.0))
            t0 = time.perf_counter()
            model(ids, cache=model.new_cache(), last_only=True)
            total = time.perf_counter() - t0
    finally:
        deltanet.chunk_gated_delta_rule = rule
        for module in hooks:
            del module.forward
    parts = {k: v / total for k, v in spent.items()}
    parts["other"] = 1 - parts["DeltaNet mixers"] - parts["attention mixers"] - parts["MLPs"]
    return {"tokens": ids.shape[1], "seconds": total, "shares": parts}


# ---------------------------------------------------------------------------- the steps
CHAPTER = {
    "clear": 9,
    "mapped load": 14,
    "joined projections": 14,
    "activations": 13,
    "packed weights": 15,
    "fused norms": 15,
    "decode conv": 15,
    "sdpa prompts": 15,
    "weight-first prompts": 15,
    "grouped decode": 15,
    "roomy cache": 15,
    "in-place state": 15,
    "no subnormals": 15,
    "one solve per chunk": 15,
    "int8": 16,
    "w8a8": 16,
    "int4": 16,
}


def chain_specs(device="cpu"):
    """The steps of qwen.fast in the book's order, each model with every step before it: the bf16
    chain from the clear model, then the quantized one (its kernels replace the packed weights).
    On a GPU: int8 and int4 (w8a8 is fbgemm's, a CPU library)."""
    names = list(fast.STEPS)
    bf16 = [("clear", None)] + [(n, {"steps": names[: i + 1]}) for i, n in enumerate(names)]
    plain = [n for n in names if n != "packed weights"]
    kinds = ["int8", "w8a8", "int4"]
    if "fbgemm" not in torch.backends.quantized.supported_engines or device != "cpu":
        kinds.remove("w8a8")
    return {"bf16": bf16, "quantized": [(q, {"steps": plain, "quantize": q}) for q in kinds]}


def step_chain(folder, ids, new_tokens, repeats, device="cpu"):
    """Each step's model timed in turn with the one before it (A B B A): prefill of ids and
    new_tokens decode steps after it, tokens/s and the median of the paired ratios to the step
    before; what the step did (or chose, and why) from model.steps."""
    rows, prev = [], None
    for chain, specs in chain_specs(device).items():
        for label, kw in specs:
            model = (
                clear_from_pretrained(folder, torch.bfloat16, device)
                if kw is None
                else fast.from_pretrained(folder, torch.bfloat16, device, **kw)
            )
            cur = Ours(model)
            systems = {"cur": cur, **({"prev": prev} if prev else {})}
            p = interleaved(systems, prefill_run(ids), repeats)
            d = interleaved(systems, decode_run(ids, new_tokens), repeats)
            row = {
                "step": label,
                "chain": chain,
                "chapter": CHAPTER[label],
                "did": "the model of Stage 1"
                if kw is None
                else model.steps.get(label, model.steps.get("quantize", "")),
                "prefill_tok_s": ids.shape[1] / statistics.median(p["cur"]),
                "decode_tok_s": new_tokens / statistics.median(d["cur"]),
            }
            if prev:
                row["prefill_x_prev"] = statistics.median(
                    a / b for a, b in zip(p["prev"], p["cur"])
                )
                row["decode_x_prev"] = statistics.median(a / b for a, b in zip(d["prev"], d["cur"]))
            if kw is None and device == "cpu":  # where the clear model's decode step goes
                row["profile"] = decode_profile(model, ids)
            if (chain == "quantized" or label == specs[-1][0]) and device == "cpu":
                # the fastest bf16 model and each quantized one: its matmuls, the rest
                row["split"] = decode_split(model, ids)
            rows.append(row)
            print(
                f"  step {label:20} prefill {row['prefill_tok_s']:8.2f}  decode "
                f"{row['decode_tok_s']:6.2f}  {row['did']}",
                flush=True,
            )
            prev = cur
    return rows


class OpTimer(TorchDispatchMode):
    """Each aten operator's time, as the dispatcher calls it: what runs inside an operator (a
    convolution that loops over its channels with thousands of slices, say) is its own time, not
    thousands of events; torch.profiler records those one by one, minutes and gigabytes for one
    step of the clear model where torch's bf16 conv has no vectorized kernel."""

    def __init__(self):
        super().__init__()
        self.ms, self.calls = collections.Counter(), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        name = "aten::" + func.__name__.split(".")[0]
        self.ms[name] += (time.perf_counter() - t) * 1e3
        self.calls[name] += 1
        return out


def decode_profile(model, ids, steps=4):
    """Where one decode step of `model` goes, by operator: each aten operator's time over
    `steps` steps after a prompt of ids, per step; the ten costliest and the rest."""
    system = Ours(model)
    x = system.prefill(ids)
    system.decode(x, 2)
    with OpTimer() as timer:
        system.decode(x, steps)
    ops = sorted(
        ((k, ms / steps, timer.calls[k] // steps) for k, ms in timer.ms.items()),
        key=lambda o: -o[1],
    )
    total = sum(ms for _, ms, _ in ops)
    top = [{"op": k, "ms": ms, "calls": n} for k, ms, n in ops[:10]]
    return {
        "ms_per_step": total,
        "ops": top,
        "rest_ms": total - sum(o["ms"] for o in top),
        "calls": sum(n for *_, n in ops),
    }


def product_ops():
    """The operators that multiply by a weight matrix, in every format the steps use: plain (mm,
    addmm), oneDNN's packed bf16, int8 and int4 weight-only, and fbgemm's w8a8."""
    names = [
        ("aten", "mm"),
        ("aten", "addmm"),
        ("aten", "_weight_int8pack_mm"),
        ("aten", "_weight_int4pack_mm_for_cpu"),
        ("aten", "_weight_int4pack_mm"),
        ("mkldnn", "_linear_pointwise"),
        ("quantized", "linear_dynamic"),
        ("onednn", "qlinear_pointwise"),
    ]
    ops = set()
    for ns, name in names:
        packet = getattr(getattr(torch.ops, ns), name, None)
        if packet is not None:
            ops.update(getattr(packet, o) for o in packet.overloads())
    return ops


class Matmuls(TorchDispatchMode):
    """Records the products with a weight matrix (product_ops) that run inside it, with their
    arguments, and counts every operator call."""

    def __init__(self):
        super().__init__()
        self.products, self.calls, self.ops = [], 0, product_ops()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        if func in self.ops:
            self.products.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def decode_split(model, ids, repeats=5):
    """One decode step of `model` after a prompt of ids: its milliseconds, those of its matrix
    products alone (the same products, replayed on the step's own inputs and weights), and how
    many operator calls the step makes; what the products leave is the calls around them."""
    system = Ours(model)
    x = system.prefill(ids)
    system.decode(x, 2)
    rec = Matmuls()
    with rec:
        system.decode(x, 1)

    def replay():
        for func, args, kwargs in rec.products:
            func(*args, **kwargs)

    step = timeit(lambda: system.decode(x, 1), repeats)
    products = timeit(replay, repeats)
    return {
        "step_ms": step * 1e3,
        "matmul_ms": products * 1e3,
        "matmuls": len(rec.products),
        "calls": rec.calls,
    }
