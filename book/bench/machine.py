"""What this machine can do, measured in the same run as the model: memory bandwidth, matrix
products per second, the attention kernels, batch sweeps; the CPU's name and flags."""

import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from qwen import fast
from qwen.quant import Int4Linear, Int8Linear, W8A8Linear

ROOT = Path(__file__).resolve().parents[2]


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
