"""Benchmark: our model (clear and fast paths), transformers and llama.cpp on the same weights, next
to the limits of this machine measured in the same run.

    python scripts/bench.py                      # 0.8B shapes, random bf16 weights, 2 threads
    python scripts/bench.py --tiny --repeats 1   # the tiny test model: a smoke run, seconds
    python scripts/bench.py --json out.json      # also write every measurement as JSON
    python scripts/bench.py --write              # docs/outputs/bench_* and figures (the book)
    python scripts/bench.py --make-random-08b    # only build the random 0.8B checkpoint

The 0.8B checkpoint is built once, deterministically, in .cache/random-qwen3.5-0.8b in the official
layout (speed does not depend on the values). Systems are timed interleaved, A B B A, after a
warm-up; each number is the median of the repeats, and each ratio the median of the ratios of
paired runs. llama.cpp is timed when `llama-bench` is on PATH (or --llama-bench) and a GGUF of the
same checkpoint is given with --gguf (convert it with llama.cpp's own convert_hf_to_gguf.py ...
--no-mtp).

This file is the command line; the measuring is in book/bench/ (checkpoints, machine, systems,
steps), the tables and figures in book/bench_report.py.
"""

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.bench.checkpoints import (  # noqa: E402
    RANDOM_08B,
    compile_in_subprocess,
    load_in_subprocess,
    make_random_08b,
    prompt_ids,
    tiny_folder,
)
from book.bench.machine import (  # noqa: E402
    attention_kernels,
    batch_sweep,
    bounds,
    cpu_info,
    device_info,
    machine_limits,
    machine_name,
)
from book.bench.steps import (  # noqa: E402
    prefill_shares,
    step_chain,
)
from book.bench.systems import (  # noqa: E402
    Compiled,
    LlamaCpp,
    Ours,
    Transformers,
    context_pairs,
    decode_run,
    interleaved,
    prefill_run,
    summarize,
)
from book.bench_report import PAIR_REPEATS, print_row, steps_table, table, write_outputs  # noqa: E402
from book.checkpoint import TINY  # noqa: E402
from qwen import fast  # noqa: E402
from qwen.model import from_pretrained as clear_from_pretrained  # noqa: E402
from qwen.weights import Config  # noqa: E402


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


if __name__ == "__main__":
    sys.exit(main())
