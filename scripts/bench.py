"""Benchmark: our model (clear and fast paths), transformers and llama.cpp on the same weights, next
to
the limits of this machine measured in the same run.

    python scripts/bench.py                      # Qwen3.5-0.8B shapes, random bf16 weights, 2
    threads
    python scripts/bench.py --tiny --repeats 1   # the tiny test model: a smoke run, seconds
    python scripts/bench.py --json out.json      # also write every measurement as JSON
    python scripts/bench.py --write              # docs/outputs/bench_*.txt/.json and figures (the
    book)
    python scripts/bench.py --make-random-08b    # only build the random 0.8B checkpoint

The 0.8B checkpoint is built once, deterministically, in .cache/random-qwen3.5-0.8b in the official
layout (speed does not depend on the values). Systems are timed interleaved, A B B A, after a
warm-up;
each number is the median of the repeats, and each ratio the median of the ratios of paired runs.
llama.cpp is timed when `llama-bench` is on PATH (or --llama-bench) and a GGUF of the same
checkpoint is
given with --gguf (convert it with llama.cpp's own convert_hf_to_gguf.py ... --no-mtp).
"""

import argparse
import collections
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.bench_report import PAIR_REPEATS, print_row, steps_table, table, write_outputs  # noqa: E402
from book.checkpoint import TINY  # noqa: E402
from qwen import fast  # noqa: E402
from qwen.model import from_pretrained as clear_from_pretrained  # noqa: E402
from qwen.quant import Int4Linear, Int8Linear, W8A8Linear  # noqa: E402
from qwen.weights import Config  # noqa: E402

RANDOM_08B = ROOT / ".cache" / "random-qwen3.5-0.8b"
CONFIG_08B = ROOT / "book" / "data" / "qwen3.5-0.8b" / "config.json"  # the official config.json
TEXT_08B = json.loads(CONFIG_08B.read_text())["text_config"]


# ---------------------------------------------------------------------------- the checkpoint
def make_random_08b(folder=RANDOM_08B):
    """Qwen3.5-0.8B's official file layout and shapes with seeded random bf16 weights (no mtp.*)."""
    from safetensors.torch import save_file

    from book import tiny

    if (folder / "BUILD_KEY").is_file():
        return folder
    text = {**tiny.TEXT, **TEXT_08B}
    tmp = Path(
        tempfile.mkdtemp(
            dir=folder.parent if folder.parent.is_dir() else None, prefix=".random-08b-"
        )
    )
    try:
        config = {**tiny.OFFICIAL_CONFIG, "book_random_weights": True, "text_config": text}
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = torch.Generator().manual_seed(0)
        tensors = {
            k: v.to(torch.bfloat16).contiguous() for k, v in tiny.text_tensors(text, gen).items()
        }
        save_file(tensors, tmp / tiny.WEIGHTS_FILE, metadata={"format": "pt"})
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
            "weight_map": {k: tiny.WEIGHTS_FILE for k in sorted(tensors)},
        }
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        shutil.copy(tiny.path() / "tokenizer.json", tmp / "tokenizer.json")
        (tmp / "BUILD_KEY").write_text("1")
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------------- the machine
def timeit(f, n=3):
    """Median seconds of n calls of f after one warm-up call."""
    f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine_limits(tiny=False):
    """Read bandwidth, GEMM and GEMV rates of this machine, measured now, in the layout the model
    uses (F.linear: x @ w.T); each GEMV rotates over more weights than the CPU's caches hold, so
    that it reads DRAM as a decode step does."""
    import torch.nn.functional as F

    big = torch.ones((32 if tiny else 512) << 18)  # MiB of fp32
    lim = {"read_GBps": big.nbytes / timeit(big.sum, 5) / 1e9}
    n = 256 if tiny else 2048
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        x, w = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
        lim[f"gemm_{name}_GFLOPs"] = 2 * n**3 / timeit(lambda: F.linear(x, w), 2) / 1e9
    rows, cols, copies = (512, 256, 4) if tiny else (3584, 1024, 40)  # 40 x 7.3 MB in bf16
    ws = [torch.randn(rows, cols) * 0.03 for _ in range(copies)]
    x = torch.randn(1, cols)
    kernels = {
        "fp32": (4, [lambda x, w=w: F.linear(x, w) for w in ws[: copies // 2]]),
        "bf16": (2, [lambda x, w=w.bfloat16(): F.linear(x.bfloat16(), w) for w in ws]),
    }
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        kernels["bf16_packed"] = (2, [fast.PackedLinear(w.bfloat16()) for w in ws])
    kernels["int8"] = (1, [Int8Linear(w.bfloat16()) for w in ws])
    # half a byte per weight and two bf16 numbers per group of 32: 0.625 bytes
    kernels["int4"] = (0.625, [Int4Linear(w.bfloat16()) for w in ws])
    if "fbgemm" in torch.backends.quantized.supported_engines:
        kernels["int8_fbgemm"] = (1, [W8A8Linear(w.bfloat16()) for w in ws])
    for name, (size, fs) in kernels.items():

        def run():
            for f in fs:
                f(x)

        lim[f"gemv_{name}_GBps"] = len(fs) * rows * cols * size / timeit(run, 5) / 1e9
        if name == "bf16":  # the same on one thread: a kernel bound by memory would read as much
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                lim["gemv_bf16_1thread_GBps"] = len(fs) * rows * cols * size / timeit(run, 5) / 1e9
            finally:
                torch.set_num_threads(threads)
    return lim


def attention_kernels(cfg, contexts=(2048, 8192)):
    """Milliseconds of one token's attention over a cache of n tokens, per layer: torch's fused
    scaled_dot_product_attention with grouped KV against the fast path's two matrix products, and
    the time to read the same cache once (a .sum() of the keys and of the values)."""
    import torch.nn.functional as F

    out = {}
    nh, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    for n in contexts:
        q = torch.randn(1, nh, 1, hd)
        k, v = (torch.randn(1, nkv, 2 * n, hd)[:, :, :n] for _ in range(2))  # a buffer with room
        sdpa = timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 20)
        ours = timeit(lambda: fast.decode_attention(q, k, v), 20)
        read = timeit(lambda: (k.sum(), v.sum()), 20)
        out[n] = {
            "sdpa_ms": sdpa * 1e3,
            "ours_ms": ours * 1e3,
            "read_ms": read * 1e3,
            "cache_MB": 2 * k.numel() * k.element_size() / 1e6,
        }
    return out


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


# ---------------------------------------------------------------------------- the systems
def done(x):
    """x, once the device has computed it: a GPU runs what it is given while Python goes on, so a
    timer stops only after the device has finished (on the CPU this returns at once)."""
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
    elif x.device.type == "mps":
        torch.mps.synchronize()
    return x


class Ours:
    """Our model: prefill and decode through the same calls generate() makes."""

    def __init__(self, model):
        self.model = model

    @torch.no_grad()
    def prefill(self, ids, room=256):
        self.cache = self.model.new_cache(max_tokens=ids.shape[1] + room)
        return done(self.model(ids, cache=self.cache, last_only=True)[:, -1:].argmax(-1))

    @torch.no_grad()
    def decode(self, x, n):
        for _ in range(n):
            x = self.model(x, cache=self.cache, last_only=True)[:, -1:].argmax(-1)
        return done(x)


class AtContext(Ours):
    """Our model decoding after its own prompt: two of these on one model take turns at two
    context lengths, so that a slower minute of the machine slows both and their ratio holds."""

    def __init__(self, model, ids):
        super().__init__(model)
        self.ids = ids


def context_pairs(model, ids, short, longs, new_tokens, repeats):
    """{n: decode after n tokens against after `short` tokens}, the two contexts timed in turn
    (A B B A) on the same model: tokens/s of each and the median of the paired ratios."""
    out = {}
    for n in longs:
        pair = {"short": AtContext(model, ids[:, :short]), "long": AtContext(model, ids[:, :n])}
        times = interleaved(pair, decode_run(None, new_tokens), repeats)
        out[n] = {
            "short": short,
            "ratio": statistics.median(s / t for s, t in zip(times["short"], times["long"])),
            **{f"{k}_tok_s": new_tokens / statistics.median(ts) for k, ts in times.items()},
        }
        del pair  # the caches of 8k tokens, before the next
    return out


class Compiled(Ours):
    """The fast path with its decode step under torch.compile; the prompt runs eagerly. The first
    decode call compiles (and recompiles once the cache length varies): its time is kept apart."""

    def __init__(self, model):
        super().__init__(model)
        self.step = torch.compile(model)
        self.compile_seconds = None

    @torch.no_grad()
    def decode(self, x, n):
        t0 = time.perf_counter()
        for _ in range(n):
            x = self.step(x, cache=self.cache, last_only=True)[:, -1:].argmax(-1)
        done(x)
        if self.compile_seconds is None:
            self.compile_seconds = time.perf_counter() - t0
        return x


class Transformers:
    """transformers' Qwen3_5ForCausalLM with its DynamicCache; logits of the last position only."""

    def __init__(self, folder, dtype, device="cpu"):
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        from qwen.weights import load_weights

        text = json.loads((folder / "config.json").read_text())["text_config"]
        torch.set_default_dtype(dtype)
        try:
            self.model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text)).eval()
        finally:
            torch.set_default_dtype(torch.float32)
        W = {"model." + k: v for k, v in load_weights(folder, dtype).items()}
        self.model.load_state_dict(W, strict=False, assign=True)
        self.model.tie_weights()
        self.model.to(device)

    @torch.no_grad()
    def prefill(self, ids):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        return done(
            self.model(input_ids=ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            .logits[:, -1:]
            .argmax(-1)
        )

    @torch.no_grad()
    def decode(self, x, n):
        for _ in range(n):
            x = (
                self.model(
                    input_ids=x, past_key_values=self.cache, use_cache=True, logits_to_keep=1
                )
                .logits[:, -1:]
                .argmax(-1)
            )
        return done(x)


class LlamaCpp:
    """llama.cpp's own llama-bench on a GGUF of the same checkpoint, one timed run per call
    (it warms up itself), so that it takes its turn in the interleaved order like the others."""

    def __init__(self, binary, gguf, threads):
        self.binary, self.gguf, self.threads = binary, gguf, threads

    def seconds(self, prompt=0, new_tokens=0, depth=0):
        """Seconds llama-bench reports for one run: a prompt of `prompt` tokens, or `new_tokens`
        tokens generated after `depth` tokens of context (the context itself is not timed)."""
        cmd = [
            self.binary,
            "-m",
            self.gguf,
            "-t",
            str(self.threads),
            "-p",
            str(prompt),
            "-n",
            str(new_tokens),
            "-d",
            str(depth),
            "-r",
            "1",
            "-o",
            "json",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
        (row,) = json.loads(out.stdout)
        return (prompt or new_tokens) / row["avg_ts"]


# ---------------------------------------------------------------------------- the measurement
# --8<-- [start:measure]
def interleaved(systems, run, repeats):
    """{name: [seconds per repeat]}: one warm-up each, then A B B A ... order."""
    for s in systems.values():
        run(s, warm=True)
    times = {name: [] for name in systems}
    for r in range(repeats):
        order = list(systems) if r % 2 == 0 else list(reversed(systems))
        for name in order:
            times[name].append(run(systems[name]))
    return times


def prefill_run(ids):
    def run(system, warm=False):
        if isinstance(system, LlamaCpp):
            return 0.0 if warm else system.seconds(prompt=ids.shape[1])
        x = ids[:, :16] if warm else ids
        t0 = time.perf_counter()
        system.prefill(x)
        return time.perf_counter() - t0

    return run


def decode_run(ids, new_tokens):
    """Prefill `ids` (or a system's own, see AtContext) once, untimed, then time new_tokens decode
    steps per call."""

    def run(system, warm=False):
        if isinstance(system, LlamaCpp):
            return 0.0 if warm else system.seconds(new_tokens=new_tokens, depth=ids.shape[1])
        if warm:
            system.x = system.prefill(getattr(system, "ids", ids))
            system.decode(system.x, 2)
            return 0.0
        t0 = time.perf_counter()
        system.x = system.decode(system.x, new_tokens)
        return time.perf_counter() - t0

    return run


def summarize(times, tokens, base):
    """{name: {"tok_s": median, "vs_<base>": median of paired ratios}}."""
    out = {}
    for name, ts in times.items():
        out[name] = {"tok_s": tokens / statistics.median(ts)}
        if base in times:
            out[name][f"x_{base}"] = statistics.median(b / t for b, t in zip(times[base], ts))
    return out


# --8<-- [end:measure]


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


def batch_sweep(n_in=1024, n_out=3584, batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), copies=8):
    """The roofline's measured points: GFLOP/s of x @ w.T for B rows (B sequences per weight read)
    with a bf16 weight of the MLP's shape, plain F.linear and, when packing pays, oneDNN's packed;
    FLOP per byte of weight read = B (2 B n_in n_out FLOP over 2 n_in n_out bytes)."""
    ws = [torch.randn(n_out, n_in).bfloat16() for _ in range(copies)]  # beyond L2, in L3
    packed = (
        [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in ws]
        if torch.ops.mkldnn._is_mkldnn_bf16_supported()
        else None
    )
    out = []
    for b in batches:
        x = torch.randn(b, n_in).bfloat16()
        row = {"batch": b}
        kinds = {"plain": (ws, lambda w: torch.nn.functional.linear(x, w))}
        if packed:
            kinds["packed"] = (
                packed,
                lambda w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""),
            )
        for name, (weights, f) in kinds.items():
            f(weights[0])
            t0 = time.perf_counter()
            for _ in range(3):
                for w in weights:
                    f(w)
            dt = (time.perf_counter() - t0) / (3 * len(weights))
            row[f"{name}_GFLOPs"] = 2 * b * n_in * n_out / dt / 1e9
        out.append(row)
    return out


CPU_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "neon",
    "asimd",
    "sve",
)


def cpu_info():
    """The CPU by name, and the features torch's kernels choose by (from /proc/cpuinfo)."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags |= set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if platform.machine() in ("arm64", "aarch64"):
        flags.add("neon")
    return {
        "name": machine_name().rsplit(",", 1)[0],
        "flags": [f for f in CPU_FLAGS if f in flags],
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the tiny test model (a smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda", "mps"],
        help="with --steps-only: time the chain on this device (a GPU: transformers on it too, "
        "and --compile adds the compiled decode step; no llama.cpp)",
    )
    ap.add_argument("--prompts", default="128,512,2048", help="prefill lengths")
    ap.add_argument("--contexts", default="128,2048", help="decode after this many tokens")
    ap.add_argument("--fast-contexts", default="8192", help="more decode contexts, fast path only")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument(
        "--long",
        default="",
        help="prefill lengths for the cost curve, fast path only (e.g. 1024,4096,16384)",
    )
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument(
        "--clear-max",
        type=int,
        default=512,
        help="time the clear path (slow) only up to this many tokens",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="also time the fast path under torch.compile (decode; its compile time is reported)",
    )
    ap.add_argument("--llama-bench", default=shutil.which("llama-bench"))
    ap.add_argument(
        "--gguf",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a GGUF of the same checkpoint, e.g. q8_0=model-q8_0.gguf (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--write", action="store_true", help="write docs/outputs/bench_* for the book")
    ap.add_argument(
        "--measure-parts",
        action="store_true",
        help="with --from-json: measure what "
        "that run lacks (attention kernels, prefill shares, compile times, paired "
        "contexts) now, and add it to its results",
    )
    ap.add_argument("--make-random-08b", action="store_true", help="build the checkpoint and exit")
    ap.add_argument(
        "--steps-only",
        action="store_true",
        help="time only the chain of Stage 3's "
        "steps (and transformers next to the clear model): docs/outputs/bench_steps.*",
    )
    ap.add_argument(
        "--steps-prompt", type=int, default=128, help="prompt length of the steps chain"
    )
    ap.add_argument(
        "--from-json",
        type=Path,
        help="print (and --write) the results of an earlier --json run instead of measuring",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    for spec in args.gguf:
        name, eq, file = spec.partition("=")
        if not eq or not name:
            ap.error(f"--gguf {spec}: give it as NAME=FILE, e.g. q8_0=model-q8_0.gguf")
        if not Path(file).is_file():
            ap.error(
                f"--gguf {spec}: {file}: no such file (convert the checkpoint with llama.cpp's "
                "convert_hf_to_gguf.py ... --no-mtp, see chapter 13)"
            )
    if args.gguf and not (args.llama_bench and Path(args.llama_bench).is_file()):
        ap.error("--gguf needs llama.cpp's llama-bench: put it on PATH or give --llama-bench PATH")
    if args.make_random_08b:
        print(make_random_08b())
        return 0
    if args.device != "cpu":
        if not args.steps_only:
            ap.error(f"--device {args.device}: the full benchmark is the CPU's; give --steps-only")
        if args.gguf:
            ap.error(f"--device {args.device}: llama-bench runs on the CPU here; leave out --gguf")
        if args.device == "cuda" and not torch.cuda.is_available():
            ap.error(f"--device cuda: no CUDA GPU is visible to torch {torch.__version__}")
        if args.device == "mps" and not torch.backends.mps.is_available():
            ap.error("--device mps: Apple's Metal backend is not available here")
    if args.write and args.tiny:
        ap.error(
            "--write records the book's benchmark of the 0.8B shapes in docs/outputs; a --tiny run "
            "is a smoke test: keep its results with --json FILE instead"
        )
    if args.from_json:
        res = json.loads(args.from_json.read_text())
        if args.measure_parts:  # what that run lacks, measured now on this machine and added
            torch.set_num_threads(res["threads"])
            folder = tiny_folder() if res["model"] == TINY else make_random_08b()
            cfg = Config.load(folder)
            if not all("read_ms" in a for a in res.get("attention", {None: {}}).values()):
                res["attention"] = attention_kernels(
                    cfg, (64, 256) if "tiny" in res["model"] else (2048, 8192)
                )
                res["attention_layers"] = cfg.layer_types.count("full_attention")
            if "prefill_shares" not in res:
                n = max(int(k) for k in res["prefill"])
                ids = prompt_ids(cfg, n)
                res["prefill_shares"] = prefill_shares(
                    fast.from_pretrained(folder, torch.bfloat16), ids
                )
            if "compile_seconds" in res and res.get("compile_cache") != "empty":
                # that run's compile found torch's on-disk cache filled by an earlier one: time a
                # first compile
                res["compile_seconds_warm_cache"] = res["compile_seconds"]
                res["compile_seconds"] = compile_in_subprocess(
                    folder, res["threads"], res["new_tokens"]
                )
                res["compile_cache"] = "empty"
            elif "compile_seconds" in res and "compile_seconds_warm_cache" not in res:
                # a first compile fills a cache, and the second one is timed with it
                with tempfile.TemporaryDirectory(prefix="bench-inductor-") as cache_dir:
                    compile_in_subprocess(folder, res["threads"], res["new_tokens"], cache_dir)
                    res["compile_seconds_warm_cache"] = compile_in_subprocess(
                        folder, res["threads"], res["new_tokens"], cache_dir
                    )
            if "context_pairs" not in res:
                # that run timed the long contexts apart from the short one: time them in turn now
                ctx = sorted(int(n) for n in res["decode"])
                ids = prompt_ids(cfg, ctx[-1])
                res["context_pairs"] = context_pairs(
                    fast.from_pretrained(folder, torch.bfloat16),
                    ids,
                    ctx[0],
                    ctx[1:],
                    res["new_tokens"],
                    PAIR_REPEATS,
                )
            res["parts_measured_after"] = True
            if args.json:
                args.json.write_text(json.dumps(res, indent=1) + "\n")
        if args.write and "0.8B" not in res["model"]:
            ap.error(
                f"--write: {args.from_json} is a run on the {res['model']}, "
                "not on the 0.8B shapes; "
                "the book's docs/outputs/bench_* keep the 0.8B runs only"
            )
        if "prefill" in res:
            text = table(res)
            print(text)
            if args.write:
                write_outputs(res, text, RANDOM_08B)
        if "steps" in res:
            text = steps_table(res)
            print(text)
            if args.write:
                name = (
                    f"bench_steps_{res['device']['type']}" if res.get("device") else "bench_steps"
                )
                write_outputs(res, text, RANDOM_08B, name)
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load0 = os.getloadavg()
    started = time.perf_counter()
    if args.tiny:
        folder = tiny_folder()
        prompts, contexts, fast_contexts, long = [16, 32], [16], [48], [16, 64]
        args.new_tokens = min(args.new_tokens, 4)
    else:
        folder = make_random_08b()
        prompts = [int(n) for n in args.prompts.split(",") if n]
        contexts = [int(n) for n in args.contexts.split(",") if n]
        fast_contexts = [int(n) for n in args.fast_contexts.split(",") if n]
        long = [int(n) for n in args.long.split(",") if n]
    cfg = Config.load(folder)
    res = {
        "machine": machine_name(),
        "cpu": cpu_info(),
        "device": device_info(args.device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "threads": args.threads,
        "model": TINY if args.tiny else "Qwen3.5-0.8B shapes, random bf16 weights",
        "repeats": args.repeats,
        "new_tokens": args.new_tokens,
    }
    if args.gguf:  # which llama.cpp: its version line, as it reports it
        v = subprocess.run([args.llama_bench, "--version"], capture_output=True, text=True)
        res["llama_cpp"] = " ".join((v.stdout + v.stderr).split())
    n = 16 if args.tiny else args.steps_prompt
    res["steps_prompt"] = n
    dev = args.device
    ids = prompt_ids(cfg, n).to(dev)
    res["steps"] = step_chain(folder, ids, args.new_tokens, args.repeats, dev)
    # the references, timed in turn with the clear model: transformers, and llama.cpp on GGUFs of
    # the same weights when --gguf gives them
    refs = {}
    if not args.no_transformers:
        refs["transformers"] = Transformers(folder, torch.bfloat16, dev)
    for spec in args.gguf:
        name, _, file = spec.partition("=")
        refs[f"llama.cpp {name}"] = LlamaCpp(args.llama_bench, file, args.threads)
    if refs:
        pair = {**refs, "clear": Ours(clear_from_pretrained(folder, torch.bfloat16, dev))}
        p = interleaved(pair, prefill_run(ids), args.repeats)
        d = interleaved(pair, decode_run(ids, args.new_tokens), args.repeats)
        res["steps_reference"] = {
            name: {
                "prefill_tok_s": n / statistics.median(p[name]),
                "decode_tok_s": args.new_tokens / statistics.median(d[name]),
                "prefill_x_clear": statistics.median(a / b for a, b in zip(p["clear"], p[name])),
                "decode_x_clear": statistics.median(a / b for a, b in zip(d["clear"], d[name])),
            }
            for name in refs
        }
        del pair, refs
    if args.json and dev != "cpu":  # what a GPU's time bought so far, should the compile fail
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    if args.steps_only and args.compile:
        # the fastest bf16 model's decode under torch.compile, in turn with it eager; the first
        # compiled call (its compile, with an empty compile cache) is timed apart
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-inductor-")
        eager = fast.from_pretrained(folder, torch.bfloat16, dev)
        pair = {"eager": Ours(eager), "compiled": Compiled(eager)}
        d = interleaved(pair, decode_run(ids, args.new_tokens), args.repeats)
        res["steps_compiled"] = {
            "decode_tok_s": args.new_tokens / statistics.median(d["compiled"]),
            "eager_decode_tok_s": args.new_tokens / statistics.median(d["eager"]),
            "decode_x_eager": statistics.median(a / b for a, b in zip(d["eager"], d["compiled"])),
            "compile_seconds": pair["compiled"].compile_seconds,
        }
        del pair, eager
    if args.steps_only and dev != "cpu":  # the CPU's limits and loads are another benchmark's
        res["seconds"] = time.perf_counter() - started
        if args.json:
            args.json.write_text(json.dumps(res, indent=1) + "\n")
        for row in res["steps"]:
            print(
                f"  {row['step']:20} prefill {row['prefill_tok_s']:9.1f}  "
                f"decode {row['decode_tok_s']:7.1f}  {row['did']}"
            )
        print(json.dumps({k: res[k] for k in ("steps_reference", "steps_compiled") if k in res}))
        return 0
    if args.steps_only:
        res["limits"] = machine_limits(args.tiny)
        res["batch_sweep"] = batch_sweep(*((256, 512) if args.tiny else ()))
        res["load"] = {
            name: load_in_subprocess(folder, name, args.threads)
            for name in ("clear", "mapped", "fast")
        }
        res["load_avg"] = {"before": load0, "after": os.getloadavg()}
        res["seconds"] = time.perf_counter() - started
        text = steps_table(res)
        print(text)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1) + "\n")
        if args.write:
            write_outputs(res, text, folder, "bench_steps")
        return 0

    # loading: each in a fresh process, so that peak memory is its own
    res["load"] = {
        name: load_in_subprocess(folder, name, args.threads)
        for name in ("clear", "mapped", "fast", "int8", "w8a8")
    }
    res["limits"] = machine_limits(args.tiny)
    res["attention"] = attention_kernels(cfg, (64, 256) if args.tiny else (2048, 8192))
    res["attention_layers"] = cfg.layer_types.count("full_attention")
    bf16 = torch.bfloat16
    systems = {
        "ours clear": Ours(clear_from_pretrained(folder, bf16)),
        "ours fast": Ours(fast.from_pretrained(folder, bf16)),
        "ours int8": Ours(fast.from_pretrained(folder, bf16, quantize="int8")),
        "ours int4": Ours(fast.from_pretrained(folder, bf16, quantize="int4")),
    }
    if "fbgemm" in torch.backends.quantized.supported_engines:
        systems["ours w8a8"] = Ours(fast.from_pretrained(folder, bf16, quantize="w8a8"))
    if args.compile:  # an empty compile cache: the compile time a first run pays
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-inductor-")
        systems["ours compiled"] = Compiled(fast.from_pretrained(folder, bf16))
        res["compile_cache"] = "empty"
    if not args.no_transformers:
        systems["transformers"] = Transformers(folder, bf16)
    if args.gguf:
        for spec in args.gguf:
            name, _, file = spec.partition("=")
            systems[f"llama.cpp {name}"] = LlamaCpp(args.llama_bench, file, args.threads)
    base = "transformers" if "transformers" in systems else "ours clear"

    def at(n, decode=False):
        """The systems timed at n tokens: the clear path only up to --clear-max; the compiled one
        only for decode (each new prompt length would compile again)."""
        return {
            k: s
            for k, s in systems.items()
            if not (k == "ours clear" and n > args.clear_max)
            and not (k == "ours compiled" and not decode)
        }

    ids = prompt_ids(cfg, max(prompts + contexts + fast_contexts + long))
    res["prefill"], res["decode"], res["long_prefill"] = {}, {}, {}
    for n in prompts:
        times = interleaved(at(n), prefill_run(ids[:, :n]), args.repeats)
        res["prefill"][n] = summarize(times, n, base)
        print_row(f"prefill {n}", res["prefill"][n])
    for n in contexts:
        times = interleaved(
            at(n, decode=True), decode_run(ids[:, :n], args.new_tokens), args.repeats
        )
        res["decode"][n] = summarize(times, args.new_tokens, base)
        print_row(f"decode after {n}", res["decode"][n])
    # the fast path after longer contexts, each timed in turn with the first: their ratio is paired
    res["context_pairs"] = context_pairs(
        systems["ours fast"].model,
        ids,
        contexts[0],
        contexts[1:] + fast_contexts,
        args.new_tokens,
        PAIR_REPEATS,
    )
    for n in fast_contexts:
        res["decode"][n] = {"ours fast": {"tok_s": res["context_pairs"][n]["long_tok_s"]}}
        print_row(f"decode after {n}", res["decode"][n])
    for n in long:
        times = interleaved({"ours fast": systems["ours fast"]}, prefill_run(ids[:, :n]), 1)
        res["long_prefill"][n] = summarize(times, n, base)["ours fast"]["tok_s"]
    if "ours compiled" in systems:
        res["compile_seconds"] = systems["ours compiled"].compile_seconds
        # a second run finds what this one left in the compile cache
        res["compile_seconds_warm_cache"] = compile_in_subprocess(
            folder, args.threads, args.new_tokens, os.environ["TORCHINDUCTOR_CACHE_DIR"]
        )
    res["prefill_shares"] = prefill_shares(systems["ours fast"].model, ids[:, : max(prompts)])
    res["batch_sweep"] = batch_sweep(*((256, 512) if args.tiny else ()))
    res["bounds"] = bounds(cfg, res["limits"])
    res["load_avg"] = {"before": load0, "after": os.getloadavg()}
    res["seconds"] = time.perf_counter() - started
    text = table(res)
    print(text)
    print(steps_table(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    if args.write:
        write_outputs(res, text, folder)
        write_outputs(res, steps_table(res), folder, "bench_steps")
    return 0


def device_info(device):
    """The accelerator the steps ran on (None on the CPU): its name, and torch's build for it."""
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        return {
            "type": "cuda",
            "name": p.name,
            "memory_GB": p.total_memory / 1e9,
            "capability": f"{p.major}.{p.minor}",
            "cuda": torch.version.cuda,
        }
    if device == "mps":
        return {"type": "mps", "name": platform.machine()}
    return None


def prompt_ids(cfg, n):
    """The benchmark's prompt: n token ids, the same in every run (their first k are any shorter
    one)."""
    return torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))


def tiny_folder():
    from book.tiny import path

    return path()


def machine_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        )
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {torch.backends.cpu.get_cpu_capability()}"


LOAD_CODE = """
import time
t0 = time.perf_counter()
import sys, torch
torch.set_num_threads(int(sys.argv[3]))
from qwen import fast
from qwen.model import from_pretrained
t1 = time.perf_counter()
# what Python, torch and the book hold before any weight: the floor under the peak
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS"))
kind = sys.argv[2]
if kind == "clear":
    m = from_pretrained(sys.argv[1], torch.bfloat16)
elif kind == "mapped":                 # the mapped load alone, and lazy: no pass for NaN
    m = fast.from_pretrained(sys.argv[1], torch.bfloat16, steps=["mapped load"], finite=False)
else:
    m = fast.from_pretrained(sys.argv[1], torch.bfloat16,
                             quantize=None if kind == "fast" else kind)
t2 = time.perf_counter()
with torch.no_grad():          # the first token of a 128-token prompt
    m(torch.randint(0, 200000, (1, 128), generator=torch.Generator().manual_seed(0)),
      cache=m.new_cache(max_tokens=256), last_only=True).argmax(-1)
t3 = time.perf_counter()
# the peak of this process since exec (ru_maxrss would also count the parent's pages at fork)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(rss * 1024, t1 - t0, t2 - t1, t3 - t0, hwm * 1024)
"""


COMPILE_CODE = """
import sys, torch
torch.set_num_threads(int(sys.argv[2]))
import bench
m = bench.fast.from_pretrained(sys.argv[1], torch.bfloat16)
ids = bench.prompt_ids(m.cfg, 128)
system = bench.Compiled(m)
system.decode(system.prefill(ids), int(sys.argv[3]))
print(system.compile_seconds)
"""


def compile_in_subprocess(folder, threads, new_tokens, cache_dir=None):
    """Seconds of the first compiled decode call (as Compiled times it), in a fresh Python with
    torch's compile cache in cache_dir (what an earlier compile left there), or an empty one."""
    with tempfile.TemporaryDirectory(prefix="bench-inductor-") as empty:
        out = subprocess.run(
            [sys.executable, "-c", COMPILE_CODE, str(folder), str(threads), str(new_tokens)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT / "scripts"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache_dir or empty),
            },
        )
    return float(out.stdout.split()[-1])


def load_in_subprocess(folder, kind, threads):
    """Seconds to load the model in a fresh Python, seconds from its start to the first token of a
    128-token prompt (imports, load, prefill), and its peak RSS in bytes."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD_CODE, str(folder), kind, str(threads)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    base, imports, t, first, rss = out.stdout.split()[-5:]
    return {
        "seconds": float(t),
        "first_token_s": float(first),
        "peak_rss": int(rss),
        "imports_s": float(imports),  # Python, torch and the book, before the load
        "imports_rss": int(base),
    }


def bounds(cfg, lim):
    """Tokens per second the machine allows: decode by bandwidth (every weight read once per token,
    the tied table once, as the head, at each format's real bytes per weight: int8 1 (one scale per
    row is negligible), our int4 0.625 (4 bits and a bf16 scale and offset per 32), llama.cpp's q8_0
    1.0625 (a fp16 scale per 32) and q4_0 0.5625, with its table kept at q6_K, 0.8203), prefill by
    GEMM rate (2 FLOP per weight and prompt token; the embedding is a lookup, and the head runs for
    the last position only, so the table does not count; the attention scores, which grow with the
    prompt, are left out: a bound for short prompts)."""
    from qwen.weights import parameter_budget

    budget = parameter_budget(cfg)
    params, head = sum(budget.values()), budget["embedding"]
    read = lim["read_GBps"] * 1e9
    return {
        "params": params,
        "decode_bf16_tok_s": read / (2 * params),
        "decode_int8_tok_s": read / params,
        "decode_int4_tok_s": read / (0.625 * params),
        "decode_q8_0_tok_s": read / (1.0625 * params),
        "decode_q4_0_tok_s": read / (0.5625 * (params - head) + 0.8203 * head),
        "prefill_tok_s": max(lim["gemm_fp32_GFLOPs"], lim["gemm_bf16_GFLOPs"])
        * 1e9
        / (2 * (params - head)),
    }


if __name__ == "__main__":
    sys.exit(main())
