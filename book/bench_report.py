"""The benchmark's report: its tables, the values the pages quote, its figures, and its outputs in
docs/outputs (written like book.regen's: one set of files, all or nothing). scripts/bench.py
measures; `python -m book.bench_report [bench_steps bench_08b]` reprints and redraws the committed
runs without measuring."""

import datetime
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from book import regen
from book.checkpoint import identify

ROOT = Path(__file__).resolve().parent.parent
PAIR_REPEATS = 7  # turns of each context pair: a ratio near 1 needs more than --repeats


def steps_table(res):
    """The steps, one row each: tokens/s and the paired ratio to the step before."""
    cpu, dev = res["cpu"], res.get("device")
    lines = [
        f"{res['model']} · {dev['name']} (CUDA {dev['cuda']}; host {cpu['name']})"
        if dev
        else f"{res['model']} · {cpu['name']} ({', '.join(cpu['flags'])}) · "
        f"{res['threads']} threads",
        f"prefill of {res['steps_prompt']} tokens, then {res['new_tokens']} decode steps; tokens/s,"
        f" median of {res['repeats']} (x = median of paired ratios to the step before)",
        # each heading ends where its numbers end; the ratios (7 wide) sit to their right
        f"{'step':22}{'ch':>3}{'prefill':>9}{'':7}{'decode':>8}{'':7}  what it did",
    ]
    for r in res["steps"]:
        px = f" x{r['prefill_x_prev']:.2f}" if "prefill_x_prev" in r else ""
        dx = f" x{r['decode_x_prev']:.2f}" if "decode_x_prev" in r else ""
        lines.append(
            f"{r['step']:22}{r['chapter']:>3}{r['prefill_tok_s']:>9.2f}{px:<7}"
            f"{r['decode_tok_s']:>8.2f}{dx:<7}  {r['did']}"
        )
    refs = sorted(
        res.get("steps_reference", {}).items(), key=lambda kv: (kv[0] != "transformers", kv[0])
    )
    for name, row in refs:  # transformers first, then llama.cpp's formats (a JSON sorts its keys)
        lines.append(
            f"{name:22}{'':>3}{row['prefill_tok_s']:>9.2f}{'':7}{row['decode_tok_s']:>8.2f}"
        )
    if res.get("llama_cpp"):
        lines.append(f"llama.cpp: llama-bench -t {res['threads']}, {res['llama_cpp']}")
    if res.get("steps_compiled"):
        c = res["steps_compiled"]
        lines.append(
            f"the last bf16 step under torch.compile: decode {c['decode_tok_s']:.2f} tokens/s, "
            f"x{c['decode_x_eager']:.2f} the same model eager ({c['eager_decode_tok_s']:.2f}); "
            f"its first call, which compiles, {c['compile_seconds']:.0f} s"
        )
    prof = next((r["profile"] for r in res["steps"] if "profile" in r), None)
    if prof:
        lines.append(
            f"one decode step of the clear model, {prof['ms_per_step']:.0f} ms ({prof['calls']} "
            "operator calls), by operator: "
            + ", ".join(
                f"{o['op']} {o['ms']:.1f} ms ({o['ms'] / prof['ms_per_step']:.0%}, {o['calls']}x)"
                for o in prof["ops"][:6]
            )
            + f", the rest {prof['rest_ms']:.1f} ms"
        )
    for r in res["steps"]:
        if "split" in r:
            split = r["split"]
            lines.append(
                f"one decode step of the {r['step']} model, {split['step_ms']:.0f} ms "
                f"({split['calls']} operator calls): its {split['matmuls']} matrix products "
                f"alone, replayed, {split['matmul_ms']:.0f} ms"
            )
    if res.get("batch_sweep"):
        lines.append(
            "x @ w.T with w bf16 3584 x 1024, GFLOP/s by rows B: "
            + ", ".join(
                f"{r['batch']}: {r['plain_GFLOPs']:.0f}"
                + (f"/{r['packed_GFLOPs']:.0f}" if "packed_GFLOPs" in r else "")
                for r in res["batch_sweep"]
            )
            + (" (plain/packed)" if "packed_GFLOPs" in res["batch_sweep"][0] else "")
        )
    if res.get("load"):
        loads = by(res["load"], LOADS)
        lines.append(
            "from a cold process to the first token of a 128-token prompt: "
            + ", ".join(
                f"{k} {v['first_token_s']:.2f} s (load {v['seconds']:.2f} s, "
                f"peak RSS {v['peak_rss'] / 1e9:.2f} GB)"
                for k, v in loads.items()
                if "first_token_s" in v
            )
        )
        if imports_floor(res):
            s, rss = imports_floor(res)
            lines.append(
                "of which Python, torch and the book before any weight (median): "
                f"{s:.2f} s, {rss / 1e9:.2f} GB "
                f"(the bf16 weights: {2 * params_08b() / 1e9:.2f} GB)"
            )
    if res.get("limits"):
        lim = res["limits"]
        lines.append(
            f"machine: read {lim['read_GBps']:.1f} GB/s; GEMM fp32 {lim['gemm_fp32_GFLOPs']:.0f}, "
            f"bf16 {lim['gemm_bf16_GFLOPs']:.0f} GFLOP/s; load average "
            f"{res['load_avg']['before'][0]:.2f} -> {res['load_avg']['after'][0]:.2f}"
        )
    return "\n".join(lines)


SHORT = {
    "ours clear": "clear",
    "ours fast": "fast",
    "ours int8": "int8",
    "ours w8a8": "w8a8",
    "ours int4": "int4",
    "ours compiled": "compiled",
    "transformers": "hf",
}


def bound_of(name, b):
    """The decode bound of a system: that of its weights' format (bf16 for the unquantized)."""
    for key in ("q4_0", "q8_0", "int4", "int8", "w8a8"):
        if key in name:
            return b.get(f"decode_{'int8' if key == 'w8a8' else key}_tok_s", b["decode_int8_tok_s"])
    return b["decode_bf16_tok_s"]


def short(name):
    """The name a system's values have in the book: fast, int8, hf, llama_q8_0 ..."""
    return SHORT.get(name) or name.replace("llama.cpp ", "llama_")


def print_row(label, row):
    print(f"  {label:18}" + "  ".join(f"{k} {v['tok_s']:8.2f}" for k, v in row.items()), flush=True)


ORDER = [
    "ours clear",
    "ours fast",
    "ours int8",
    "ours int4",
    "ours w8a8",
    "ours compiled",
    "transformers",
    "llama.cpp bf16",
    "llama.cpp q8_0",
    "llama.cpp q4_0",
]


def in_order(res):
    """The run with its lengths in numeric order and its systems in the book's order (a run read
    back from a provenance file has them sorted as text: "2048" before "512")."""
    rank = {name: i for i, name in enumerate(ORDER)}
    res = dict(res)
    for kind in ("prefill", "decode", "context_pairs", "attention"):
        if kind in res:
            rows = sorted(res[kind].items(), key=lambda kv: int(kv[0]))
            res[kind] = {
                n: dict(sorted(row.items(), key=lambda kv: rank.get(kv[0], len(rank))))
                if kind in ("prefill", "decode")
                else row
                for n, row in rows
            }
    if "long_prefill" in res:
        res["long_prefill"] = dict(sorted(res["long_prefill"].items(), key=lambda kv: int(kv[0])))
    if "prefill_shares" in res:  # the parts and kernels in the order they are measured
        shares = res["prefill_shares"]["shares"]
        res["prefill_shares"] = {**res["prefill_shares"], "shares": by(shares, SHARES)}
    if "limits" in res:
        res["limits"] = by(res["limits"], [f"gemv_{k}_GBps" for k in GEMV])
    return res


SHARES = ["DeltaNet mixers", "chunked rule", "attention mixers", "MLPs", "other"]
GEMV = ["fp32", "bf16", "bf16_packed", "fp16_fbgemm", "int8", "int8_fbgemm"]
LOADS = ["clear", "mapped", "fast", "int8", "w8a8"]


def imports_floor(res):
    """(seconds, bytes) that Python, torch and the book take before any weight, the median over the
    benchmark's load processes (the same work in each), or None for a run that did not record it."""
    loads = res.get("load", {}).values()
    if not loads or not all("imports_rss" in x for x in loads):
        return None
    return (
        statistics.median(x["imports_s"] for x in loads),
        statistics.median(x["imports_rss"] for x in loads),
    )


def params_08b():
    """Qwen3.5-0.8B's parameters, counted from its official config (chapter 13's budget)."""
    from qwen.weights import Config, parameter_budget

    return sum(parameter_budget(Config.load(ROOT / "book" / "data" / "qwen3.5-0.8b")).values())


def by(d, order):
    """d with the keys named in order first, in that order, then the others as they were."""
    rank = {k: i for i, k in enumerate(order)}
    return dict(sorted(d.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def table(res):
    """One row per system, one column per measurement: tokens/s (x paired ratio to the base)."""
    res = in_order(res)
    b, lim = res["bounds"], res["limits"]
    cols = [("prefill", n) for n in res["prefill"]] + [("decode", n) for n in res["decode"]]
    names = list(dict.fromkeys(name for kind, n in cols for name in res[kind][n]))
    base = "transformers" if "transformers" in names else "ours clear"
    # a column is 15 wide: tokens/s right-aligned in 8 (decimal points in line), then the ratio
    # (" x16.90": 7 wide); its heading starts over the numbers
    heads = [f"prefill {n}" if k == "prefill" else f"decode@{n}" for k, n in cols]
    lines = [
        f"{res['model']} · {res['machine']} · {res['threads']} threads",
        f"tokens/s, median of {res['repeats']} (x = median of paired ratios to {base})",
        (f"{'':16}" + "".join(f"  {h:<13}" for h in heads)).rstrip(),
    ]
    for name in names:
        cells = ""
        for kind, n in cols:
            r = res[kind][n].get(name)
            if r is None:
                cells += f"{'-':>8}{'':7}"
            else:
                x = f" x{r['x_' + base]:.2f}" if "x_" + base in r and name != base else ""
                cells += f"{r['tok_s']:>8.2f}{x:<7}"
        lines.append(f"{name:16}{cells}".rstrip())
    lines.append(
        (
            f"{'bound':16}"
            + "".join(  # one decimal: its point under the others'
                f"{b['prefill_tok_s'] if k == 'prefill' else b['decode_bf16_tok_s']:>7.1f}{'':8}"
                for k, n in cols
            )
        ).rstrip()
    )
    first = next(iter(res["decode"].values()))
    lines.append(
        "decode as a fraction of its bound: "
        + ", ".join(
            f"{name} {row['tok_s'] / bound_of(name, b):.0%}"
            for name, row in first.items()
            if "q4" not in name
        )
    )
    if res.get("compile_seconds") is not None:
        lines.append(
            f"torch.compile: the first decode call took {res['compile_seconds']:.1f} s"
            + (
                f" ({res['compile_seconds_warm_cache']:.1f} s with torch's compile cache "
                "already filled)"
                if "compile_seconds_warm_cache" in res
                else ""
            )
        )
    for n, a in res.get("attention", {}).items():
        lines.append(
            f"one token's attention over {n} cached tokens ({a['cache_MB']:.0f} MB), per layer: "
            f"sdpa {a['sdpa_ms']:.2f} ms, ours {a['ours_ms']:.2f} ms"
            + (f", reading it once {a['read_ms']:.2f} ms" if "read_ms" in a else "")
        )
    if res.get("context_pairs"):
        lines.append(
            "ours fast, decode after a longer context against after the first, timed in turn "
            f"(median of {PAIR_REPEATS} paired ratios): "
            + ", ".join(
                f"{n}: {p['ratio']:.2f}x ({p['long_tok_s']:.2f} vs {p['short_tok_s']:.2f} tok/s)"
                for n, p in res["context_pairs"].items()
            )
        )
    if res.get("prefill_shares"):
        p = res["prefill_shares"]
        lines.append(
            f"ours fast, where a prefill of {p['tokens']} tokens goes: "
            + ", ".join(f"{k} {v:.0%}" for k, v in p["shares"].items())
            + " (the chunked rule is part of the DeltaNet mixers)"
        )
    if res["long_prefill"]:
        lines.append(
            "ours fast prefill, tok/s by prompt length: "
            + ", ".join(f"{n}: {v:.1f}" for n, v in res["long_prefill"].items())
        )
    lines.append(
        "loading (s, peak RSS GB): "
        + ", ".join(
            f"{k} {v['seconds']:.2f} s {v['peak_rss'] / 1e9:.2f} GB"
            for k, v in by(res["load"], LOADS).items()
        )
    )
    lines.append(
        f"machine: read {lim['read_GBps']:.1f} GB/s; GEMM fp32 {lim['gemm_fp32_GFLOPs']:.0f},"
        f" bf16 {lim['gemm_bf16_GFLOPs']:.1f} GFLOP/s; GEMV GB/s: "
        + ", ".join(f"{k[5:-5]} {v:.1f}" for k, v in lim.items() if k.startswith("gemv_"))
    )
    lines.append(
        f"bounds: decode bf16 {b['decode_bf16_tok_s']:.1f}, int8 {b['decode_int8_tok_s']:.1f}"
        f", prefill {b['prefill_tok_s']:.0f} tok/s; load average "
        f"{res['load_avg']['before'][0]:.2f} -> {res['load_avg']['after'][0]:.2f}"
    )
    return "\n".join(lines)


def flat_values(res):
    """The numbers the pages quote, under flat keys: {{ value("bench_08b", "decode_128_fast") }}."""
    res = in_order(res)
    v = {}
    for kind in ("prefill", "decode"):
        for n, row in res[kind].items():
            for name, r in row.items():
                v[f"{kind}_{n}_{short(name)}"] = f"{r['tok_s']:.1f}"
                for k, x in r.items():
                    if k.startswith("x_"):
                        v[f"{kind}_{n}_{short(name)}_x"] = f"{x:.2f}"
    if res.get("compile_seconds") is not None:
        v["compile_s"] = f"{res['compile_seconds']:.0f}"
        if "compile_seconds_warm_cache" in res:
            v["compile_warm_s"] = f"{res['compile_seconds_warm_cache']:.0f}"
        row = next(iter(res["decode"].values()))
        saved = 1 / row["ours fast"]["tok_s"] - 1 / row["ours compiled"]["tok_s"]  # s per token
        if saved > 0:  # tokens after which the compile time is won back
            v["compile_breakeven_tokens"] = f"{res['compile_seconds'] / saved:,.0f}"
    pairs = [
        ("ours compiled", "ours fast"),
        ("ours fast", "llama.cpp bf16"),
        ("ours int8", "llama.cpp q8_0"),
        ("ours int8", "llama.cpp q4_0"),
        ("ours w8a8", "llama.cpp q8_0"),
        ("ours w8a8", "ours int8"),
        ("ours w8a8", "ours fast"),
        ("ours fast", "ours clear"),
    ]
    for kind in ("prefill", "decode"):  # ratios of medians, not paired
        for n, row in res[kind].items():
            for a, b in pairs:
                if a in row and b in row:
                    v[f"{kind}_{n}_{short(a)}_vs_{short(b)}"] = (
                        f"{row[a]['tok_s'] / row[b]['tok_s']:.2f}"
                    )
    for n, t in res["long_prefill"].items():
        v[f"long_{n}"] = f"{t:.1f}"
    for k, x in res.get("prefill_shares", {}).get("shares", {}).items():
        v["share_" + k.split()[0].lower()] = f"{x:.0%}"
    for n, a in res.get("attention", {}).items():
        v[f"attn_{n}_sdpa_ms"], v[f"attn_{n}_ours_ms"] = (
            f"{a['sdpa_ms']:.2f}",
            f"{a['ours_ms']:.2f}",
        )
        v[f"attn_{n}_sdpa_vs_ours"] = f"{a['sdpa_ms'] / a['ours_ms']:.1f}"
        v[f"attn_{n}_cache_MB"] = f"{a['cache_MB']:.0f}"
        if "read_ms" in a:
            v[f"attn_{n}_read_ms"] = f"{a['read_ms']:.2f}"
            v[f"attn_{n}_ours_vs_read"] = f"{a['ours_ms'] / a['read_ms']:.1f}"
        # what one token reads from the KV caches of the attention layers, next to the weights'
        # bytes
        layers = res.get("attention_layers", 6)
        v[f"kv_{n}_vs_weights"] = (
            f"{layers * a['cache_MB'] * 1e6 / (2 * res['bounds']['params']):.1%}"
        )
    for k, x in res["load"].items():
        v[f"load_{k}_s"], v[f"load_{k}_gb"] = f"{x['seconds']:.2f}", f"{x['peak_rss'] / 1e9:.2f}"
    v.update({k: f"{x:.1f}" for k, x in res["limits"].items()})
    v.update({k: f"{x:.1f}" for k, x in res["bounds"].items() if k != "params"})
    dec = res["decode"]
    first = next(iter(dec))
    for n in list(dec)[1:]:  # timed in turn when the run has the pairs, else apart
        pair = res.get("context_pairs", {}).get(n)
        v[f"decode_{n}_vs_{first}_fast"] = (
            f"{pair['ratio']:.2f}"
            if pair
            else f"{dec[n]['ours fast']['tok_s'] / dec[first]['ours fast']['tok_s']:.2f}"
        )
    for name, r in dec[first].items():
        v[f"decode_{first}_{short(name)}_of_bound"] = (
            f"{r['tok_s'] / bound_of(name, res['bounds']):.0%}"
        )
    return v


# decode targets against llama.cpp's format of as many bytes: bf16 at 0.8x bf16, int8 and w8a8 at
# q8_0's speed, int4 at 0.8x q4_0
TARGETS = {"bf16": 0.8, "int8": 1.0, "w8a8": 1.0, "int4": 0.8}


def split_values(name, split, fmt, llama):
    """One decode step of model `name` split into its matrix products and the rest; with
    llama.cpp's row of format `fmt`: its whole step, our products' speed against it, and what a
    step at the target speed (TARGETS) leaves for everything but the products (0 where the products
    alone take longer)."""
    v = {
        f"{name}_step_ms": f"{split['step_ms']:.0f}",
        f"{name}_matmul_ms": f"{split['matmul_ms']:.0f}",
        f"{name}_rest_ms": f"{split['step_ms'] - split['matmul_ms']:.0f}",
        f"{name}_calls": f"{split['calls']:,}",
    }
    if llama:
        ms = 1e3 / llama["decode_tok_s"]
        target = TARGETS["bf16" if fmt == "bf16" else name]
        v[f"llama_{fmt}_step_ms"] = f"{ms:.0f}"
        v[f"{name}_matmul_vs_llama_{fmt}"] = f"{ms / split['matmul_ms']:.2f}"
        v[f"{name}_rest_budget_ms"] = f"{max(0.0, ms / target - split['matmul_ms']):.0f}"
    return v


def steps_values(res):
    """The numbers the pages quote from the steps chain: {{ value("bench_steps", "decode_fast")
    }}."""
    v = {
        "cpu": res["cpu"]["name"],
        "cpu_flags": ", ".join(res["cpu"]["flags"]),
        "threads": str(res["threads"]),
    }
    if res.get("device"):  # a GPU's run: its name, and what torch.compile bought there
        v["device"] = res["device"]["name"]
    if res.get("steps_compiled"):
        c = res["steps_compiled"]
        v.update(
            compiled_decode=f"{c['decode_tok_s']:.1f}",
            compiled_eager_decode=f"{c['eager_decode_tok_s']:.1f}",
            compiled_x_eager=f"{c['decode_x_eager']:.1f}",
            compile_s=f"{c['compile_seconds']:.0f}",
        )
    rows = {r["step"]: r for r in res["steps"]}
    for r in res["steps"]:
        key = r["step"].replace(" ", "_").replace("-", "_")
        v[f"{key}_prefill"], v[f"{key}_decode"] = (
            f"{r['prefill_tok_s']:.1f}",
            f"{r['decode_tok_s']:.2f}",
        )
        for k in ("prefill", "decode"):
            if f"{k}_x_prev" in r:
                v[f"{key}_{k}_x"] = f"{r[f'{k}_x_prev']:.2f}"
        v[f"{key}_did"] = r["did"]
    fast_row = [r for r in res["steps"] if r["chain"] == "bf16"][-1]
    for k in ("prefill", "decode"):
        v[f"fast_{k}"] = f"{fast_row[f'{k}_tok_s']:.1f}"
        v[f"fast_vs_clear_{k}"] = f"{fast_row[f'{k}_tok_s'] / rows['clear'][f'{k}_tok_s']:.2f}"
        hf = res.get("steps_reference", {}).get("transformers")
        if hf:
            v[f"hf_{k}"] = f"{hf[f'{k}_tok_s']:.1f}"
            v[f"clear_vs_hf_{k}"] = f"{hf[f'{k}_x_clear']:.2f}"
            # the chain's end against transformers: each ratio measured in turn, multiplied along
            v[f"fast_vs_hf_{k}"] = (
                f"{hf[f'{k}_x_clear'] * fast_row[f'{k}_tok_s'] / rows['clear'][f'{k}_tok_s']:.2f}"
            )
    # llama.cpp on GGUFs of the same weights, and ours against the format that reads as many bytes:
    # each ratio to the clear model measured in turn, multiplied along (as for transformers)
    twins = {"bf16": fast_row["step"], "q8_0": "w8a8", "q4_0": "int4"}
    for name, ref in res.get("steps_reference", {}).items():
        if name.startswith("llama.cpp "):
            fmt = name.split()[1]
            key = f"llama_{fmt}"
            v[f"{key}_prefill"], v[f"{key}_decode"] = (
                f"{ref['prefill_tok_s']:.1f}",
                f"{ref['decode_tok_s']:.2f}",
            )
            ours = rows.get(twins.get(fmt))
            for mine in {"bf16": [], "q8_0": ["int8", "w8a8"], "q4_0": ["int4"]}.get(fmt, []):
                split = rows.get(mine, {}).get("split")
                if split:  # its products alone against llama.cpp's whole step, in ms per token
                    v.update(split_values(mine, split, fmt, ref))
            if ours:
                for k in ("prefill", "decode"):
                    x = ours[f"{k}_tok_s"] / rows["clear"][f"{k}_tok_s"] / ref[f"{k}_x_clear"]
                    v[f"{key}_ours_{k}_x"] = f"{x:.2f}"
    weights = 2 * params_08b()  # bytes of the bf16 weights
    if imports_floor(res):
        s, rss = imports_floor(res)
        v["imports_s"], v["imports_gb"] = f"{s:.2f}", f"{rss / 1e9:.2f}"
    for k, x in res.get("load", {}).items():
        v[f"load_{k}_s"], v[f"load_{k}_gb"] = f"{x['seconds']:.2f}", f"{x['peak_rss'] / 1e9:.2f}"
        v[f"load_{k}_x_weights"] = f"{x['peak_rss'] / weights:.2f}"
        if "first_token_s" in x:
            v[f"first_token_{k}_s"] = f"{x['first_token_s']:.2f}"
        if "imports_rss" in x:
            v[f"load_{k}_above_imports_x_weights"] = (
                f"{(x['peak_rss'] - x['imports_rss']) / weights:.2f}"
            )
    lim = res.get("limits", {})
    v.update({k: f"{x:.1f}" for k, x in lim.items()})
    prof = next((r["profile"] for r in res["steps"] if "profile" in r), None)
    if prof:
        top = prof["ops"][0]
        v.update(
            profile_ms=f"{prof['ms_per_step']:.0f}",
            profile_calls=f"{prof['calls']:,}",
            profile_top_op=top["op"],
            profile_top_ms=f"{top['ms']:.0f}",
            profile_top_share=f"{top['ms'] / prof['ms_per_step']:.0%}",
        )
    if lim:
        from qwen.weights import Config, parameter_budget

        budget = parameter_budget(Config.load(ROOT / "book" / "data" / "qwen3.5-0.8b"))
        params, head, read = sum(budget.values()), budget["embedding"], lim["read_GBps"] * 1e9
        peak = max(lim["gemm_fp32_GFLOPs"], lim["gemm_bf16_GFLOPs"])
        v.update(
            bound_decode_bf16=f"{read / (2 * params):.1f}",
            bound_decode_int8=f"{read / params:.1f}",
            bound_decode_int4=f"{read / (0.625 * params):.1f}",
            bound_prefill=f"{peak * 1e9 / (2 * (params - head)):.0f}",
            ridge=f"{peak / lim['read_GBps']:.0f}",
            peak_GFLOPs=f"{peak:.0f}",
        )
    split = fast_row.get("split")
    if split:  # llama.cpp's whole bf16 step, in turn with the clear model, against our products
        llama = res.get("steps_reference", {}).get("llama.cpp bf16")
        v.update(split_values("fast", split, "bf16", llama))
        v["fast_matmul_share"] = f"{split['matmul_ms'] / split['step_ms']:.0%}"
    for r in res.get("batch_sweep", []):
        for k in ("plain", "packed"):
            if f"{k}_GFLOPs" in r:
                v[f"sweep_{r['batch']}_{k}"] = f"{r[f'{k}_GFLOPs']:.0f}"
    return v


def drawn(res, name):
    """The figures of one benchmark's run, {"figures/<name>_<lang>.svg": bytes}, drawn through
    book.out in a scratch folder."""
    from book import out

    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    os.environ["BOOK_OUT"] = str(scratch)
    try:
        if name == "bench_08b" and res.get("long_prefill"):
            out.save_figure(f"{name}_prefill_length", lambda t: draw_long(res, t))
        if name == "bench_steps":
            out.save_figure("bench_steps", lambda t: draw_steps(res, t))
            if res.get("batch_sweep"):
                out.save_figure("bench_roofline", lambda t: draw_roofline(res, t))
        folder = scratch / "figures"
        return {f"figures/{f.name}": f.read_bytes() for f in sorted(folder.glob("*.svg"))}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.environ.pop("BOOK_OUT", None)


def figure_names(files):
    return sorted({Path(f).stem.rsplit("_", 1)[0] for f in files if f.startswith("figures/")})


def write_outputs(res, text, folder, name="bench_08b", date=None, sha256=None):
    """docs/outputs/<name>.txt and .json (with "measured": true, the CPU and the load) and its
    figures,
    replaced together through book.regen (a crash leaves all of them or none)."""
    if "0.8B" not in res["model"]:
        raise SystemExit(
            f"{name}: the book records the 0.8B runs only, not one on the {res['model']}"
        )
    figures = drawn(res, name)
    dev = res.get("device")
    prov = {
        "script": "scripts/bench.py",
        "model": res["model"],
        "weights_sha256": identify(folder).sha256,
        "torch": res.get("torch", torch.__version__),
        "python": res.get("python", platform.python_version()),
        "device": f"cuda ({dev['name']})"
        if dev
        else f"cpu ({platform.machine()}, {res['threads']} threads)",
        "dtype": "bfloat16",
        "seconds": round(res["seconds"], 1),
        "values": steps_values(res) if name.startswith("bench_steps") else flat_values(res),
        "figures": figure_names(figures),
        "measured": True,
        "machine": f"{dev['name']}, host {res['machine']}" if dev else res["machine"],
        "cpu": res.get("cpu"),
        "threads": res["threads"],
        "date": res.get("date")
        or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "load": res.get("load_avg"),
        "results": res,
    }
    files = {
        f"outputs/{name}.txt": (text + "\n").encode(),
        f"outputs/{name}.json": regen.provenance_bytes(prov),
        **figures,
    }
    regen.replace_set(ROOT / "docs", name, files)
    print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)


def redraw(name, docs=ROOT / "docs"):
    """Rewrite docs/outputs/<name>.txt and its figures from the run in its committed JSON, without
    measuring: the run (its date, machine, load and results) stays as it was; only how it is
    printed and drawn changes. Returns the files that changed."""
    doc = docs / "outputs" / f"{name}.json"
    prov = json.loads(doc.read_text())
    res = prov["results"]
    text = steps_table(res) if name.startswith("bench_steps") else table(res)
    values = steps_values(res) if name.startswith("bench_steps") else flat_values(res)
    for key in sorted(
        k for k in values.keys() & prov["values"].keys() if values[k] != prov["values"][k]
    ):
        # the values stay the run's: a redraw changes no number the pages quote
        print(
            f"{name}: {key} is {prov['values'][key]!r} as committed, {values[key]!r} by this code"
        )
    figures = drawn(res, name)
    prov["figures"] = figure_names(figures)
    files = {
        f"outputs/{name}.txt": (text + "\n").encode(),
        f"outputs/{name}.json": regen.provenance_bytes(prov),
        **figures,
    }
    changed = [
        f
        for f, data in files.items()
        if not (docs / f).is_file() or (docs / f).read_bytes() != data
    ]
    if changed:
        regen.replace_set(docs, name, files)
    return changed


STEP_ZH = {
    "clear": "清晰版（第一部分）",
    "mapped load": "映射加载",
    "joined projections": "合并投影",
    "activations": "激活精度",
    "packed weights": "预排权重",
    "fused norms": "融合归一化",
    "decode conv": "解码卷积",
    "sdpa prompts": "提示词 SDPA",
    "grouped decode": "分组解码注意力",
    "roomy cache": "预留缓存",
    "in-place state": "原地状态",
    "no subnormals": "没有次正规数",
    "one solve per chunk": "每块一次求解",
    "weight-first prompts": "提示词权重在前",
}


def draw_steps(res, t):
    """Tokens/s after each step, prefill and decode side by side, the chains one after the other."""
    import matplotlib.pyplot as plt

    rows = res["steps"]
    labels = [t(STEP_ZH.get(r["step"], r["step"]), r["step"]) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(8, 0.32 * len(rows) + 1.2), sharey=True)
    for ax, kind, title in zip(
        axes,
        ("prefill", "decode"),
        (
            t(f"预填充 {res['steps_prompt']} 词元", f"prefill {res['steps_prompt']} tokens"),
            t("解码", "decode"),
        ),
    ):
        values = [r[f"{kind}_tok_s"] for r in rows]
        colors = [
            "#888888" if r["step"] == "clear" else "#4c72b0" if r["chain"] == "bf16" else "#dd8452"
            for r in rows
        ]
        ax.barh(range(len(rows)), values, color=colors)
        hf = res.get("steps_reference", {}).get("transformers")
        if hf:
            ax.axvline(hf[f"{kind}_tok_s"], color="#c44e52", ls="--", lw=1, label="transformers")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(t("词元/秒", "tokens/s"), fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(range(len(rows)), labels)
    axes[0].invert_yaxis()
    from matplotlib.patches import Patch

    # one legend for both panels, below them: inside an axes it covers bars, and on a phone a
    # legend to the right is off-screen
    keys = [
        Patch(color="#888888", label=t("清晰版模型", "the clear model")),
        Patch(color="#4c72b0", label=t("bf16 的各步", "bf16 steps")),
        Patch(color="#dd8452", label=t("量化的各步", "quantized steps")),
        *axes[0].get_lines()[:1],
    ]
    fig.legend(handles=keys, loc="lower center", ncol=len(keys), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))  # 0.3 inch for the legend
    return fig


def draw_roofline(res, t):
    """The roofline of this CPU: GFLOP/s against FLOP per byte of weight read (= the batch B for a
    bf16 weight), the read bandwidth's slope and the GEMM peak, and the measured matmuls."""
    import matplotlib.pyplot as plt

    lim, sweep = res["limits"], res["batch_sweep"]
    peak = max(lim["gemm_fp32_GFLOPs"], lim["gemm_bf16_GFLOPs"])
    bw = lim["read_GBps"]
    xs = [r["batch"] for r in sweep]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    grid = [xs[0] / 2] + xs + [xs[-1] * 2]
    ax.plot(
        grid,
        [min(peak, bw * x) for x in grid],
        "-",
        color="#444444",
        label=t(
            f"上限：读 {bw:.0f} GB/s，GEMM {peak:.0f} GFLOP/s",
            f"bound: read {bw:.0f} GB/s, GEMM {peak:.0f} GFLOP/s",
        ),
    )
    ax.plot(xs, [r["plain_GFLOPs"] for r in sweep], "o-", label=t("bf16 F.linear", "bf16 F.linear"))
    if "packed_GFLOPs" in sweep[0]:
        ax.plot(
            xs,
            [r["packed_GFLOPs"] for r in sweep],
            "s--",
            label=t("bf16 预排（oneDNN）", "bf16 packed (oneDNN)"),
        )
    ax.axvline(bw and peak / bw, color="#c44e52", ls=":", lw=1)
    ax.text(  # at the foot of the ridge line: x in data, y in the axes' own units
        peak / bw,
        0.04,
        t(" 拐点", " ridge"),
        color="#c44e52",
        fontsize=8,
        transform=ax.get_xaxis_transform(),
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(
        t(
            "每字节权重的 FLOP（= 每次读权重服务的序列数 B）",
            "FLOP per byte of weight (= B, sequences served per weight read)",
        )
    )
    ax.set_ylabel("GFLOP/s")
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.yaxis.set_major_formatter, ax.xaxis.set_major_formatter):
        axis(FuncFormatter(lambda v, _: f"{v:g}"))
    # between the decades, 20 and 50 (200, 500, ...) get a label too: the points are read off them
    between = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else "")
    ax.yaxis.set_minor_formatter(between)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_long(res, t):
    """ms per prompt token against prompt length: the fast path's curve (the prefill rows and the
    long
    prompts), and the other systems where they were timed."""
    import matplotlib.pyplot as plt

    labels = {
        "ours fast": t("我们的快速路径（bf16 权重）", "ours, fast path (bf16 weights)"),
        "transformers": "transformers (bf16)",
        "llama.cpp bf16": "llama.cpp bf16",
        "llama.cpp q8_0": "llama.cpp q8_0",
    }
    series = {name: {} for name in labels}
    for n, row in res.get("prefill", {}).items():
        for name in labels:
            if name in row:
                series[name][int(n)] = row[name]["tok_s"]
    # lengths as numbers: read back with --from-json they are strings, which matplotlib would plot
    # as categories
    series["ours fast"].update({int(n): tok_s for n, tok_s in res["long_prefill"].items()})
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, style in zip(labels, ("o-", "s--", "^:", "v:")):
        points = sorted(series[name].items())
        if points:
            ax.plot(
                [n for n, _ in points],
                [1e3 / tok_s for _, tok_s in points],
                style,
                label=labels[name],
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel(t("提示词长度（词元）", "prompt length (tokens)"))
    ax.set_ylabel(t("每个提示词元的毫秒数（对数）", "ms per prompt token (log)"))
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(FuncFormatter(lambda y, _: f"{y:g}"))  # 20, 30, 60 rather than 2 x 10^1
    ax.grid(True, which="both", alpha=0.3)
    # below the plot: on a phone the figure scrolls sideways, and a legend on the right is
    # off-screen
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    return fig


if __name__ == "__main__":  # python -m book.bench_report bench_steps bench_08b: redraw, no timing
    for name in sys.argv[1:] or ["bench_steps", "bench_steps_cuda", "bench_08b"]:
        print(f"{name}: {', '.join(redraw(name)) or 'the same'}")
