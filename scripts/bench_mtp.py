"""Benchmark of speculative decoding's calls (chapter 22): at the 0.8B shapes, with random bf16
weights, what a verify step of 2 or 3 tokens costs against greedy's 1-token decode step after a
128-token prompt, with and without keeping the DeltaNet states for a rollback, and what one guess
of the MTP head costs; from those, the speed-up speculation would give at each acceptance rate.

    python scripts/bench_mtp.py              # measure and print (2 threads)
    python scripts/bench_mtp.py --write      # docs/outputs/bench_mtp.txt/.json (the book)

The calls are timed in turns (round-robin after a warm-up), each the median of the repeats. The
costs depend on the CPU (a 2-token call runs other kernels than a 1-token one), so they are
measured here, with the CPU recorded, and not in the chapter's script.
"""

import argparse
import contextlib
import datetime
import io
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.bench.machine import cpu_info, machine_name  # noqa: E402
from qwen import mtp as M  # noqa: E402
from qwen.cache import KVCache  # noqa: E402
from qwen.model import Qwen  # noqa: E402
from qwen.timing import alternately  # noqa: E402
from qwen.weights import Config  # noqa: E402

VALUES = {}
REPEATS = 5


def record(**values):
    VALUES.update(values)


def record_measured(key, text, **tolerance):
    VALUES[key] = text
    return text


def measure():
    torch.set_grad_enabled(False)
    t0 = time.perf_counter()
    cfg = Config.load(ROOT / "book" / "data" / "qwen3.5-0.8b")
    with torch.device("meta"):
        big, big_head = Qwen(cfg), M.MTP(cfg)
    big, big_head = (m.to_empty(device="cpu").to(torch.bfloat16) for m in (big, big_head))
    big.lm_head.weight = big.embed_tokens.weight  # tied again (to_empty made two tensors)
    gen = torch.Generator().manual_seed(0)
    for m in (big, big_head):
        for p in m.parameters():
            p.normal_(0, 0.02, generator=gen)
    n_big, n_head = (sum(p.numel() for p in m.parameters()) for m in (big, big_head))
    record(params_08b=f"{n_big:,}")
    built = record_measured("built_s", f"{time.perf_counter() - t0:.0f}", tol=5, rel=2.0)
    print(
        f"\n0.8B shapes, random bf16 weights: {n_big:,} + {n_head:,} (MTP) parameters, "
        f"built in {built} s"
    )
    cache = big.new_cache()
    big(torch.randint(0, 200_000, (1, 128)), cache, last_only=True)  # a 128-token prompt
    saved = [dict(vars(c)) for c in cache.layers]

    def step(T, keeping=False):
        """One call of T tokens after the prompt; the cache is put back after it."""

        def run():
            for layer in big_layers:
                layer.keeping = keeping
            if T == 1:
                big(torch.tensor([[5]]), cache, last_only=True)  # greedy's decode step
            else:
                M.forward_hidden(big, torch.tensor([[5] * T]), cache)  # a verify step: T rows
            for layer in big_layers:
                layer.keeping = False
            for c, s in zip(cache.layers, saved):
                vars(c).update(s)
            cache.seq_len = 128

        return run

    big_layers = M.with_rollback(big)
    mcache = KVCache(1, cfg.num_key_value_heads, cfg.head_dim)
    kv = torch.randn(1, cfg.num_key_value_heads, 128, cfg.head_dim).bfloat16()
    hidden = torch.randn(1, 1, cfg.hidden_size).bfloat16()

    def draft():
        """One MTP row after 128 of its own, and the shared head on it: one guess."""
        mcache.k, mcache.v = kv, kv
        M.mtp_guess(big, big_head, hidden, torch.tensor([[5]]), torch.tensor([128]), mcache)

    ms = alternately(
        {
            "c1": step(1),
            "c2": step(2),
            "c2_keep": step(2, True),
            "c3": step(3),
            "c3_keep": step(3, True),
            "mtp": draft,
        },
        repeats=REPEATS,
    )
    print(
        f"CPU: {cpu_info()['name']}, {torch.get_num_threads()} thread(s); median of {REPEATS}, ms:"
    )
    labels = {
        "c1": "1 token (greedy's decode step)",
        "c2": "2 tokens (a verify step), no keeping",
        "c2_keep": "2 tokens, states kept for rollback",
        "c3": "3 tokens, no keeping",
        "c3_keep": "3 tokens, states kept for rollback",
        "mtp": "the MTP head: one row and the shared head",
    }
    for k, label in labels.items():
        shown = record_measured(f"ms_{k}", f"{ms[k]:.0f}", rel=2.0)  # another CPU, another time
        ratio = record_measured(f"x_{k}", f"{ms[k] / ms['c1']:.2f}", tol=0.5)
        print(f"  {label:44}{shown:>7}  ({ratio}× the decode step)")
    record(cpu=cpu_info()["name"], threads=torch.get_num_threads())

    r2 = (ms["c2_keep"] + ms["mtp"]) / ms["c1"]  # one guess: a 2-token call and a draft
    r3 = (ms["c3_keep"] + 2 * ms["mtp"]) / ms["c1"]  # two guesses: a 3-token call, two drafts

    def speedup(alpha, guesses=1):
        """Tokens per second against greedy at acceptance rate alpha (guesses accepted alike)."""
        tokens = sum(alpha**k for k in range(guesses + 1))  # 1 + α (+ α²)
        return tokens / (r2 if guesses == 1 else r3)

    shown = {
        k: record_measured(k, f"{v:.2f}", tol=0.5)
        for k, v in (("r2", r2), ("r3", r3), ("breakeven", max(r2 - 1, 0)))
    }
    print(
        f"cost of a speculative call / a decode step: {shown['r2']} (one guess), "
        f"{shown['r3']} (two)"
    )
    print(f"break-even acceptance (one guess): α = {shown['breakeven']}")
    print(f"  {'α':>5}{'one guess':>11}{'two guesses':>13}")
    for a in (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        one_ = record_measured(f"speedup_{round(a * 100)}", f"{speedup(a):.2f}", tol=0.5)
        two_ = record_measured(f"speedup2_{round(a * 100)}", f"{speedup(a, 2):.2f}", tol=0.5)
        print(f"  {a:5.1f}{one_:>10}×{two_:>12}×")


def main(argv=None):
    global REPEATS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write docs/outputs/bench_mtp.*")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    REPEATS = args.repeats
    torch.set_num_threads(args.threads)
    t0, load0 = time.perf_counter(), os.getloadavg()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        measure()
    text = printed.getvalue().strip()
    print(text)
    record(cpu=cpu_info()["name"], threads=str(args.threads))
    if args.write:
        from book import regen

        prov = {
            "script": "scripts/bench_mtp.py",
            "model": "the 0.8B shapes, random weights",
            "official": False,
            "weights_sha256": None,  # seeded random weights made in the run, no file read
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": f"cpu ({platform.machine()}, {args.threads} threads)",
            "dtype": "bfloat16",
            "seconds": round(time.perf_counter() - t0, 1),
            "values": VALUES,
            "figures": [],
            "measured": True,
            "machine": machine_name(),
            "cpu": cpu_info(),
            "threads": args.threads,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "load": {"before": load0, "after": os.getloadavg()},
            "results": {"repeats": args.repeats},
        }
        files = {
            "outputs/bench_mtp.txt": (text + "\n").encode(),
            "outputs/bench_mtp.json": regen.provenance_bytes(prov),
        }
        regen.replace_set(ROOT / "docs", "bench_mtp", files)
        print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)


if __name__ == "__main__":
    main()
