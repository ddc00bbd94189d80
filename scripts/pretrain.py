"""Chapter 21's long run: a small Qwen3.5-architecture model (3:1 DeltaNet/attention) pretrained
from scratch on the lessons' English prose, then the same budget with every layer attention, next
to a bigram baseline on the same tokens.

    python scripts/pretrain.py --write   # the book's runs: docs/outputs/pretrain.*, figures
    python scripts/pretrain.py --smoke   # a tiny version (seconds): prints, writes nothing
    python scripts/pretrain.py --steps 50 --json out.json   # a shorter run of the book's config

The budget is a number of steps (tokens), never a time, so the losses are the same on any machine
with the same kernels; the seconds and tokens/s are measured and recorded with the CPU and the load.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

# two threads on a machine that other work shares: a thread that reaches a barrier first sleeps
# instead of spinning on a core the other thread needs (measured here: with spinning, a step of
# two threads took 20-30x as long as with one while two other programs ran; read before torch)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.corpus import english_prose  # noqa: E402
from qwen import pretrain as pt  # noqa: E402
from qwen.weights import parameter_budget  # noqa: E402

# one 3:1 block (3 DeltaNet layers, then attention) of width 256: at this budget a smaller model
# that reads more tokens beats a larger one that reads fewer (probes of a few hundred steps here)
BOOK = {
    "vocab": 2048,
    "layers": 4,
    "hidden": 256,
    "intermediate": 512,
    "steps": 1050,
    "batch": 16,
    "length": 128,
    "lr": 3e-3,
    "eval_every": 75,
    "sample_every": 525,
    "eval_windows": 96,
    "threads": 2,
}
SMOKE = {
    "vocab": 300,
    "layers": 4,
    "hidden": 64,
    "intermediate": 128,
    "steps": 6,
    "batch": 4,
    "length": 32,
    "lr": 3e-3,
    "eval_every": 3,
    "sample_every": 6,
    "eval_windows": 8,
    "threads": 1,
    "chars": 120_000,
}
PROMPTS = ["The President", "In 1850 the", "The Congress shall", "Computer science is"]
MODEL = "a small Qwen3.5-architecture model trained from scratch here"


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def weights_sha256(model):
    """The sha256 of a model's weights (names and fp32 values, in name order): equal runs, equal
    digests."""
    digest = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        digest.update(k.encode() + v.float().numpy().tobytes())
    return digest.hexdigest()


def data(s):
    """Train/validation ids, a tokenizer trained on the training split (a slice when smoke)."""
    train_docs, val_docs = pt.split_documents(english_prose())
    if "chars" in s:
        train_docs, val_docs = [train_docs[0][: s["chars"]]], [val_docs[0][: s["chars"] // 4]]
    tok = pt.train_tokenizer(train_docs, s["vocab"])
    return tok, pt.encode_all(tok, train_docs), pt.encode_all(tok, val_docs)


def run(s, label, all_attention, tok, train, val, log):
    cfg = pt.small_config(
        tok.get_vocab_size(),
        layers=s["layers"],
        hidden=s["hidden"],
        intermediate=s["intermediate"],
        all_attention=all_attention,
    )
    model = pt.new_model(cfg, seed=0)
    prompts = [tok.encode(p).ids for p in PROMPTS]
    folder = Path(tempfile.mkdtemp(prefix="pretrain-"))
    start = time.perf_counter()
    try:
        h = pt.pretrain(
            model,
            train,
            val,
            s["steps"],
            s["batch"],
            s["length"],
            s["lr"],
            eval_every=s["eval_every"],
            sample_every=s["sample_every"],
            prompts=prompts,
            eval_windows=s["eval_windows"],
            checkpoint=folder / "ckpt.pt",
            autocast="auto",
            progress=True,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in model.parameters())
    for smp in h["samples"]:
        for kind in ("greedy", "t0.8"):
            smp[kind] = [tok.decode(ids) for ids in smp[kind]]
    tokens = s["steps"] * s["batch"] * s["length"]
    log(
        f"\n== {label}: {cfg.layer_types.count('linear_attention')} DeltaNet + "
        f"{cfg.layer_types.count('full_attention')} attention layers, {params:,} parameters"
    )
    log(
        f"autocast: {'bf16' if h['autocast']['bf16'] else 'fp32'} (a step took "
        f"{h['autocast'].get('fp32_s', 0):.2f} s in fp32, {h['autocast'].get('bf16_s', 0):.2f} s "
        "with bf16 autocast)"
    )
    for st, v in zip(h["val_step"], h["val_loss"]):
        i = st - 1
        log(
            f"step {st:4}  train {h['loss'][i]:.3f}  val {v:.3f}  (ppl {pt.perplexity_of(v):7.1f})"
            f"  lr {h['lr'][i]:.2e}  grad norm {h['grad_norm'][i]:.2f}"
        )
    for smp in h["samples"]:
        log(f"-- samples after step {smp['step']} (greedy | temperature 0.8):")
        for p, g, t in zip(PROMPTS, smp["greedy"], smp["t0.8"]):
            log(f"  {p!r} -> {p + g!r}")
            log(f"  {'':{len(repr(p))}}    {p + t!r}")
    return {
        "label": label,
        "layer_types": cfg.layer_types,
        "params": params,
        "budget": parameter_budget(cfg),
        "history": h,
        "seconds": seconds,
        "tokens": tokens,
        "tok_s": tokens / seconds,
        "sha256": weights_sha256(model),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the book's outputs and figures")
    ap.add_argument("--smoke", action="store_true", help="a tiny run, seconds; writes nothing")
    ap.add_argument("--steps", type=int, help="steps per run (default: the book's)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument(
        "--from-json",
        type=Path,
        help="write the book's outputs from a run saved with --json (no training)",
    )
    args = ap.parse_args(argv)
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
        res = doc.get("results", doc)  # docs/outputs/pretrain.json holds the run under "results"
        if res["settings"] != BOOK:
            raise SystemExit(f"{args.from_json} is not a run of the book's budget: not written")
        # a redraw keeps the run's date: the run did not change, only its drawing
        write(res, res["text"], date=doc.get("date"))
        return res
    if args.write and (args.smoke or args.steps):
        raise SystemExit("--write runs the book's budget: drop --smoke and --steps")
    s = dict(SMOKE if args.smoke else BOOK)
    if args.steps:
        s["steps"] = args.steps
    torch.set_num_threads(s["threads"])
    torch.manual_seed(0)
    lines = []

    def log(line=""):
        print(line, flush=True)
        lines.append(line)

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    tok, train, val = data(s)
    log(
        f"corpus: {len(train):,} training tokens, {len(val):,} validation tokens "
        f"(vocabulary {tok.get_vocab_size():,}, byte-level BPE trained on the training split)"
    )
    windows = val[: len(val) // s["length"] * s["length"]].view(-1, s["length"])
    windows = windows[
        torch.linspace(0, len(windows) - 1, min(s["eval_windows"], len(windows))).long()
    ]
    k, losses = pt.bigram_baseline(train, windows, tok.get_vocab_size())
    log(
        f"bigram baseline: add-k smoothing, k = {k:g} (tuned on validation): val loss "
        f"{losses[k]:.3f}, perplexity {pt.perplexity_of(losses[k]):.1f}"
    )
    runs = [
        run(s, "hybrid 3:1", False, tok, train, val, log),
        run(s, "all attention", True, tok, train, val, log),
    ]
    seconds = time.perf_counter() - t0
    log("\n== side by side (the same tokens, the same steps)")
    log(f"{'':16}{'params':>12}{'val loss':>10}{'val ppl':>9}{'x bigram':>10}")
    for r in runs:
        v = r["history"]["val_loss"][-1]
        log(
            f"{r['label']:16}{r['params']:>12,}{v:>10.3f}{pt.perplexity_of(v):>9.1f}"
            f"{pt.perplexity_of(losses[k]) / pt.perplexity_of(v):>10.2f}"
        )
    log(f"{'bigram':16}{'':>12}{losses[k]:>10.3f}{pt.perplexity_of(losses[k]):>9.1f}{1:>10.2f}")
    res = {
        "settings": s,
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch": torch.__version__,
        "load_avg": {"before": load_before, "after": os.getloadavg()},
        "seconds": seconds,
        "tokens_train": len(train),
        "tokens_val": len(val),
        "vocab": tok.get_vocab_size(),
        "bigram": {"k": k, "losses": {str(a): b for a, b in losses.items()}},
        "runs": runs,
    }
    res["text"] = "\n".join(lines)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    if args.write:
        write(res, "\n".join(lines))
    return res


def values(res):
    """The numbers the page quotes: {{ value("pretrain", "hybrid_val_ppl") }}."""
    bigram = res["bigram"]["losses"][str(res["bigram"]["k"])]
    v = {
        "cpu": res["cpu"],
        "threads": str(res["threads"]),
        "vocab": f"{res['vocab']:,}",
        "tokens_train": f"{res['tokens_train']:,}",
        "tokens_val": f"{res['tokens_val']:,}",
        "bigram_k": f"{res['bigram']['k']:g}",
        "bigram_loss": f"{bigram:.3f}",
        "bigram_ppl": f"{pt.perplexity_of(bigram):.1f}",
        "seconds": f"{res['seconds']:.0f}",
        "load_before": f"{res['load_avg']['before'][0]:.1f}",
        "load_after": f"{res['load_avg']['after'][0]:.1f}",
    }
    for key, s in res["settings"].items():
        v[f"setting_{key}"] = f"{s:g}" if isinstance(s, float) else str(s)
    v["tokens_per_run"] = f"{res['runs'][0]['tokens']:,}"
    for r, key in zip(res["runs"], ("hybrid", "attn")):
        h = r["history"]
        ac = h["autocast"]
        v.update(
            {
                f"{key}_params": f"{r['params']:,}",
                f"{key}_params_m": f"{r['params'] / 1e6:.1f}",
                f"{key}_val_loss": f"{h['val_loss'][-1]:.3f}",
                f"{key}_val_ppl": f"{pt.perplexity_of(h['val_loss'][-1]):.1f}",
                f"{key}_x_bigram": f"{math.exp(bigram - h['val_loss'][-1]):.2f}",
                f"{key}_first_val_loss": f"{h['val_loss'][0]:.3f}",
                f"{key}_first_loss": f"{h['loss'][0]:.3f}",
                f"{key}_seconds": f"{r['seconds']:.0f}",
                f"{key}_minutes": f"{r['seconds'] / 60:.1f}",
                f"{key}_tok_s": f"{r['tok_s']:,.0f}",
                f"{key}_autocast": "bf16" if ac["bf16"] else "fp32",
                f"{key}_fp32_step_s": f"{ac.get('fp32_s', 0):.2f}",
                f"{key}_bf16_step_s": f"{ac.get('bf16_s', 0):.2f}",
                f"{key}_bf16_speedup": f"{ac.get('fp32_s', 0) / ac.get('bf16_s', 1):.2f}",
                f"{key}_max_grad_norm": f"{max(h['grad_norm']):.2f}",
                f"{key}_last_grad_norm": f"{h['grad_norm'][-1]:.2f}",
                f"{key}_clipped_steps": str(
                    sum(g > res["settings"].get("clip", 1.0) for g in h["grad_norm"])
                ),
            }
        )
        for smp in h["samples"]:
            v[f"{key}_sample_{smp['step']}"] = PROMPTS[0] + smp["greedy"][0]
    first = res["runs"][0]
    v["tokens_per_param"] = f"{first['tokens'] / first['params']:.3f}"
    v["bigram_tokens_x"] = f"{res['tokens_train'] / first['tokens']:.1f}"
    v["chinchilla_tokens"] = f"{20 * first['params']:,}"
    v["hybrid_minus_bigram_loss"] = f"{first['history']['val_loss'][-1] - bigram:+.3f}"
    v["target_loss"] = f"{bigram - math.log(2):.3f}"
    v["sample_temperature"] = "0.8"  # qwen.pretrain.pretrain's samples: greedy, and at 0.8
    a, b = (r["history"]["val_loss"][-1] for r in res["runs"])
    v["attn_minus_hybrid_loss"] = f"{b - a:+.3f}"
    v["attn_vs_hybrid_time"] = f"{res['runs'][1]['seconds'] / res['runs'][0]['seconds']:.2f}"
    v["warmup"] = str(max(1, res["settings"]["steps"] // 20))
    return v


def draw_loss(res, t):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    bigram = res["bigram"]["losses"][str(res["bigram"]["k"])]
    for r, color, name in zip(
        res["runs"], ("C0", "C1"), (t("混合 3:1", "hybrid 3:1"), t("全注意力", "all attention"))
    ):
        h = r["history"]
        w = 10  # a running mean over 10 steps
        smooth = [
            sum(h["loss"][max(0, i - w + 1) : i + 1]) / len(h["loss"][max(0, i - w + 1) : i + 1])
            for i in range(len(h["loss"]))
        ]
        ax.plot(
            [s + 1 for s in h["step"]],
            smooth,
            color=color,
            alpha=0.5,
            lw=1,
            label=t(f"{name} 训练（10 步平均）", f"{name} train (mean of 10 steps)"),
        )
        ax.plot(
            h["val_step"],
            h["val_loss"],
            color=color,
            marker="o",
            ms=3,
            lw=1.5,
            label=t(f"{name} 验证", f"{name} validation"),
        )
    ax.axhline(
        bigram, color="gray", ls="--", lw=1, label=t("二元模型（验证）", "bigram (validation)")
    )
    ax.axhline(  # the target: a loss ln 2 below the bigram's is half its perplexity
        bigram - math.log(2),
        color="gray",
        ls=":",
        lw=1,
        label=t("二元模型困惑度的一半", "half the bigram's perplexity"),
    )
    ax.set_xlabel(t("步数", "step"))
    ax.set_ylabel(t("损失（nat/词元）", "loss (nats per token)"))
    low = min(bigram - math.log(2), *(min(r["history"]["val_loss"]) for r in res["runs"])) - 0.3
    ax.set_ylim(low, low + 4.5)  # the first steps (near ln V) are cut off at the top
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def draw_schedule(res, t):
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3))
    h = res["runs"][0]["history"]
    steps = [s + 1 for s in h["step"]]
    a1.plot(steps, h["lr"], color="C2")
    a1.set_xlabel(t("步数", "step"))
    a1.set_ylabel(t("学习率", "learning rate"))
    a1.set_title(t("预热，然后余弦衰减", "warm-up, then cosine decay"), fontsize=10)
    a2.plot(steps, h["grad_norm"], color="C3", lw=1)
    a2.axhline(
        res["settings"].get("clip", 1.0),
        color="gray",
        ls="--",
        lw=1,
        label=t("裁剪阈值", "clipping threshold"),
    )
    a2.set_yscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    # plain numbers (0.5, 1, 2) where matplotlib would write 5 x 10^-1, on ticks inside the data
    lo, hi = a2.get_ylim()
    ticks = [v for v in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20) if lo <= v <= hi]
    a2.yaxis.set_major_locator(FixedLocator(ticks))
    a2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a2.yaxis.set_minor_formatter(NullFormatter())
    a2.set_xlabel(t("步数", "step"))
    a2.set_ylabel(t("梯度范数（裁剪前）", "gradient norm (before clipping)"))
    a2.legend(fontsize=8)
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def write(res, text, date=None):
    """docs/outputs/pretrain.{txt,json} and the figures, replaced together (regen.replace_set);
    dated today unless given the run's date."""
    from book import out, regen

    scratch = Path(tempfile.mkdtemp(prefix="pretrain-out-"))
    os.environ["BOOK_OUT"] = str(scratch)
    try:
        out.save_figure("pretrain_loss", lambda t: draw_loss(res, t))
        out.save_figure("pretrain_schedule", lambda t: draw_schedule(res, t))
        figdir = scratch / "figures"
        figures = sorted(figdir.glob("*.svg"))
        names = sorted({f.stem.rsplit("_", 1)[0] for f in figures})
        prov = {
            "script": "scripts/pretrain.py",
            "model": MODEL,
            "official": False,
            "weights_sha256": res["runs"][0]["sha256"],
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": f"cpu ({platform.machine()}, {res['threads']} threads)",
            "dtype": "bfloat16 autocast"
            if res["runs"][0]["history"]["autocast"]["bf16"]
            else "float32",
            "seconds": round(res["seconds"], 1),
            "values": values(res),
            "figures": names,
            "figure_data": {n: json.loads((figdir / f"{n}.json").read_text()) for n in names},
            "measured": True,
            "machine": res["cpu"],
            "cpu": {"name": res["cpu"]},
            "threads": res["threads"],
            "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "load": res["load_avg"],
            "results": res,
        }
        files = {
            "outputs/pretrain.txt": (text + "\n").encode(),
            "outputs/pretrain.json": regen.provenance_bytes(prov),
        }
        files.update({f"figures/{f.name}": f.read_bytes() for f in figures})
        regen.replace_set(ROOT / "docs", "pretrain", files)
        print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.environ.pop("BOOK_OUT", None)


if __name__ == "__main__":
    main()
