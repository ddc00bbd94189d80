"""Chapter 22's long run: chapter 21's small model gains an MTP head, trained with the
next-next-token loss while the model stays as it is; then its acceptance, and the decode speed of
speculation against plain greedy on the same model, measured side by side.

    python scripts/mtp_train.py --write   # the book's run: docs/outputs/mtp_train.*
    python scripts/mtp_train.py --smoke   # a tiny version (seconds): prints, writes nothing

The model is chapter 21's config and budget (scripts/pretrain.py's BOOK), trained again here from
the same seed; its bf16-or-fp32 choice is measured on this machine, so its weights equal those of
docs/outputs/pretrain.json only where that choice and the kernels are the same (the run says).
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as scripts/pretrain.py (read before torch)

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from book.bench.machine import cpu_info, machine_name  # noqa: E402
from qwen import mtp as M  # noqa: E402
from qwen import pretrain as pt  # noqa: E402
from qwen.cache import KVCache  # noqa: E402
from qwen.generate import generate  # noqa: E402
from qwen.timing import rounds  # noqa: E402
from scripts.pretrain import BOOK, SMOKE, data, weights_sha256  # noqa: E402

HEAD = {
    "steps": 600,
    "batch": 16,
    "length": 128,
    "lr": 3e-3,
    "prompts": 12,
    "prompt_len": 32,
    "new_tokens": 96,
    "repeats": 3,
}
HEAD_SMOKE = {
    "steps": 4,
    "batch": 4,
    "length": 32,
    "lr": 3e-3,
    "prompts": 2,
    "prompt_len": 8,
    "new_tokens": 12,
    "repeats": 1,
}
MODEL = "a small Qwen3.5-architecture model trained from scratch here, with an MTP head"
# the trained model and head, so that a second --write measures again without training again
CACHE = ROOT / ".cache" / "mtp_train.pt"


def train_both(s, h, log, cache=None):
    """Chapter 21's model from its seed, then the head on it; or both from `cache`, a file an
    earlier run of the same settings saved."""
    tok, train, val = data(s)
    cfg = pt.small_config(
        tok.get_vocab_size(), layers=s["layers"], hidden=s["hidden"], intermediate=s["intermediate"]
    )
    model, mtp = pt.new_model(cfg, seed=0), M.new_mtp(cfg, seed=1)
    length = h["length"]
    windows = val[: len(val) // length * length].view(-1, length)
    windows = windows[
        torch.linspace(0, len(windows) - 1, min(s["eval_windows"], len(windows))).long()
    ]
    saved = cache and cache.exists() and torch.load(cache, weights_only=True)
    if saved and saved["settings"] == [s, h]:
        model.load_state_dict(saved["model"])
        mtp.load_state_dict(saved["mtp"])
        trained = saved["trained"]
        log(f"(the model and the head of the run of {trained['date']}, from {cache})")
    else:
        t0 = time.perf_counter()
        hist = pt.pretrain(
            model,
            train,
            val,
            s["steps"],
            s["batch"],
            s["length"],
            s["lr"],
            eval_every=s["steps"],
            eval_windows=s["eval_windows"],
            autocast="auto",
            progress=True,
        )
        model_s = time.perf_counter() - t0
        model.requires_grad_(False).eval()
        before = M.mtp_accuracy(model, mtp, windows)
        t0 = time.perf_counter()
        losses = M.train_mtp(model, mtp, train, h["steps"], h["batch"], length, h["lr"])
        trained = {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "model_seconds": model_s,
            "head_seconds": time.perf_counter() - t0,
            "model_val_loss": hist["val_loss"][-1],
            "autocast": hist["autocast"],
            "head_losses": losses,
            "before": before,
        }
        if cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            torch.save(
                {
                    "settings": [s, h],
                    "model": model.state_dict(),
                    "mtp": mtp.state_dict(),
                    "trained": trained,
                },
                cache,
            )
    model.requires_grad_(False).eval()
    mtp.requires_grad_(False).eval()
    return model, mtp, cfg, val, windows, trained


def measure(s, h, log, cache=None):
    model, mtp, cfg, val, windows, trained = train_both(s, h, log, cache)
    sha = weights_sha256(model)
    book = json.loads((ROOT / "docs" / "outputs" / "pretrain.json").read_text())
    same = sha == book["results"]["runs"][0]["sha256"]
    ac = trained["autocast"]
    log(
        f"the model: chapter 21's hybrid 3:1, {sum(p.numel() for p in model.parameters()):,} "
        f"parameters, {s['steps']} steps ({'bf16 autocast' if ac['bf16'] else 'fp32'})"
    )
    log(
        f"  validation loss {trained['model_val_loss']:.3f}; its weights "
        f"{'equal' if same else 'differ from'} those of chapter 21's run"
    )
    loss, acc = M.mtp_accuracy(model, mtp, windows)
    before = trained["before"]
    log(
        f"the head: {sum(p.numel() for p in mtp.parameters()):,} parameters, {h['steps']} steps "
        f"of {h['batch']} x {h['length']} tokens, the model frozen"
    )
    log(f"  validation next-next-token loss {before[0]:.3f} -> {loss:.3f}")
    log(f"  top guess = the text's token i + 2: {before[1]:.1%} -> {acc:.1%}")

    torch.set_grad_enabled(False)
    starts = torch.linspace(0, len(val) - h["prompt_len"] - 1, h["prompts"]).long()
    prompts = [val[i : i + h["prompt_len"]].tolist() for i in starts]
    stats, equal = M.Speculation(), True
    for p in prompts:
        plain = list(generate(model, p, h["new_tokens"], stop_ids=()))
        spec = list(M.speculative_greedy(model, mtp, p, h["new_tokens"], stop_ids=(), stats=stats))
        equal &= plain == spec
    n = len(prompts) * h["new_tokens"]
    log(
        f"speculation: {len(prompts)} validation prompts of {h['prompt_len']} tokens, "
        f"{h['new_tokens']} new tokens each"
    )
    log(f"  tokens equal to greedy's: {equal}")
    log(f"  guesses accepted: {stats.accepted} of {stats.drafted} ({stats.acceptance:.1%})")
    log(f"  calls of the model: {stats.steps} for {n} tokens (greedy: {n})")
    if not equal:
        raise SystemExit("speculation gave other tokens than greedy decoding: not written")

    def greedy():
        for p in prompts:
            for _ in generate(model, p, h["new_tokens"], stop_ids=()):
                pass

    def speculative():
        for p in prompts:
            for _ in M.speculative_greedy(model, mtp, p, h["new_tokens"], stop_ids=()):
                pass

    big = json.loads((ROOT / "docs" / "outputs" / "bench_mtp.json").read_text())
    r2 = float(big["values"]["r2"])
    alpha, threads, timed = stats.acceptance, torch.get_num_threads(), {}
    for t in sorted({1, threads}):  # a model this small may decode faster on one thread
        torch.set_num_threads(t)
        ms = {
            k: 1e3 * sorted(v)[len(v) // 2]
            for k, v in rounds({"greedy": greedy, "speculative": speculative}, h["repeats"]).items()
        }
        calls = call_costs(model, mtp, cfg, prompts[0], h["repeats"])
        c = (calls["c2_keep"] + calls["mtp"]) / calls["c1"]
        timed[str(t)] = {
            "ms": ms,
            "speedup": ms["greedy"] / ms["speculative"],
            "call_ms": calls,
            "c": c,
            "predicted": (1 + alpha) / c,
        }
        log(
            f"decode on {t} thread{'s' if t > 1 else ''}, median of {h['repeats']} rounds in turns:"
        )
        log(
            f"  greedy {n / ms['greedy'] * 1e3:.0f} tok/s, speculative "
            f"{n / ms['speculative'] * 1e3:.0f} tok/s: {ms['greedy'] / ms['speculative']:.2f}x"
        )
        log(
            f"  its calls (ms, rounds of 50): 1 token {calls['c1']:.2f}, 2 tokens kept "
            f"{calls['c2_keep']:.2f} ({calls['c2_keep'] / calls['c1']:.2f}x), a guess "
            f"{calls['mtp']:.2f} ({calls['mtp'] / calls['c1']:.2f}x)"
        )
        log(f"  c = {c:.2f}, so (1 + a) / c = {(1 + alpha) / c:.2f}x at a = {alpha:.2f}")
    torch.set_num_threads(threads)
    log(
        f"at the 0.8B shapes' costs (bench_mtp, {big['cpu']['name']}): c = {r2:.2f}, the same a "
        f"would give {(1 + alpha) / r2:.2f}x"
    )
    return {
        "model_sha256": sha,
        "model_equals_chapter_21": same,
        **trained,
        "model_params": sum(p.numel() for p in model.parameters()),
        "head_params": sum(p.numel() for p in mtp.parameters()),
        "val_loss": loss,
        "val_acc": acc,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance": stats.acceptance,
        "calls": stats.steps,
        "tokens": n,
        "equal": equal,
        "timed": timed,
        "c_08b": r2,
        "speedup_08b": (1 + alpha) / r2,
    }


def call_costs(model, mtp, cfg, prompt, repeats):
    """Milliseconds of the three calls speculation makes, after `prompt`, timed in turns, 50 of
    each a round: a 1-token step, a 2-token step that keeps the DeltaNet states (its second
    token then forgotten: the cache grows by one token, as greedy's), one guess of the head."""
    layers = M.with_rollback(model)
    cache = model.new_cache()
    mcache = KVCache(1, cfg.num_key_value_heads, cfg.head_dim)
    _, hidden = M.forward_hidden(model, torch.tensor([prompt]), cache)
    M.mtp_guess(
        model,
        mtp,
        hidden[:, :-1],
        torch.tensor([prompt[1:]]),
        torch.arange(len(prompt) - 1),
        mcache,
    )
    one = torch.tensor([[prompt[-1]]])

    def c1():
        for _ in range(50):
            model(one, cache)

    def c2_keep():
        for _ in range(50):
            n = cache.seq_len
            for layer in layers:
                layer.keeping = True
            M.forward_hidden(model, torch.tensor([[prompt[-1], prompt[0]]]), cache)
            for layer in layers:
                layer.keeping = False
            M.keep_tokens(model, cache, n, 1)

    def guess():
        for _ in range(50):
            M.mtp_guess(
                model, mtp, hidden[:, -1:], one, torch.arange(len(prompt) - 1, len(prompt)), mcache
            )

    t = rounds({"c1": c1, "c2_keep": c2_keep, "mtp": guess}, repeats)
    return {k: 1e3 * sorted(v)[len(v) // 2] / 50 for k, v in t.items()}


def values(res):
    """The numbers the page quotes: {{ value("mtp_train", "acceptance") }}."""
    s, h = res["settings"], res["head"]
    v = {
        "cpu": res["cpu"],
        "threads": str(res["threads"]),
        "model_steps": str(s["steps"]),
        "model_val_loss": f"{res['model_val_loss']:.3f}",
        "model_minutes": f"{res['model_seconds'] / 60:.0f}",
        "model_autocast": "bf16" if res["autocast"]["bf16"] else "fp32",
        "model_equals_ch21": "yes" if res["model_equals_chapter_21"] else "no",
        "head_params": f"{res['head_params']:,}",
        "model_params": f"{res['model_params']:,}",
        "head_steps": str(h["steps"]),
        "head_batch": str(h["batch"]),
        "head_step_tokens": f"{h['batch'] * h['length']:,}",
        "head_minutes": f"{res['head_seconds'] / 60:.1f}",
        "loss_before": f"{res['before'][0]:.3f}",
        "acc_before": f"{res['before'][1]:.1%}",
        "val_loss": f"{res['val_loss']:.3f}",
        "val_acc": f"{res['val_acc']:.1%}",
        "prompts": str(h["prompts"]),
        "prompt_len": str(h["prompt_len"]),
        "new_tokens": str(h["new_tokens"]),
        "tokens": f"{res['tokens']:,}",
        "equal": "yes" if res["equal"] else "no",
        "drafted": f"{res['drafted']:,}",
        "accepted": f"{res['accepted']:,}",
        "acceptance": f"{res['acceptance']:.1%}",
        "alpha": f"{res['acceptance']:.2f}",
        "calls": f"{res['calls']:,}",
        "tokens_per_call": f"{res['tokens'] / res['calls']:.2f}",
        "c_08b": f"{res['c_08b']:.2f}",
        "speedup_08b": f"{res['speedup_08b']:.2f}",
        "breakeven_08b": f"{res['c_08b'] - 1:.2f}",
    }
    for t, r in res["timed"].items():
        v.update(
            {
                f"greedy_tok_s_{t}": f"{res['tokens'] / r['ms']['greedy'] * 1e3:.0f}",
                f"spec_tok_s_{t}": f"{res['tokens'] / r['ms']['speculative'] * 1e3:.0f}",
                f"speedup_{t}": f"{r['speedup']:.2f}",
                f"c_{t}": f"{r['c']:.2f}",
                f"predicted_{t}": f"{r['predicted']:.2f}",
                f"breakeven_{t}": f"{r['c'] - 1:.2f}",
            }
        )
        for k in ("c1", "c2_keep", "mtp"):
            v[f"ms_{k}_{t}"] = f"{r['call_ms'][k]:.2f}"
            v[f"x_{k}_{t}"] = f"{r['call_ms'][k] / r['call_ms']['c1']:.2f}"
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write docs/outputs/mtp_train.*")
    ap.add_argument("--smoke", action="store_true", help="a tiny run, seconds; writes nothing")
    ap.add_argument(
        "--retrain",
        action="store_true",
        help=f"train again even if {CACHE.relative_to(ROOT)} holds this run's model",
    )
    args = ap.parse_args(argv)
    if args.write and args.smoke:
        raise SystemExit("--write runs the book's budget: drop --smoke")
    s, h = (dict(SMOKE), dict(HEAD_SMOKE)) if args.smoke else (dict(BOOK), dict(HEAD))
    torch.set_num_threads(s["threads"])
    torch.manual_seed(0)
    lines = []

    def log(line=""):
        print(line, flush=True)
        lines.append(line)

    if args.retrain and CACHE.exists():
        CACHE.unlink()
    load0, t0 = os.getloadavg(), time.perf_counter()
    r = measure(s, h, log, None if args.smoke else CACHE)
    res = {
        "settings": s,
        "head": h,
        "cpu": cpu_info()["name"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "seconds": time.perf_counter() - t0,
        **r,
    }
    if not args.write:
        return res
    from book import regen

    text = "\n".join(line for line in lines if not line.startswith("(the model and the head"))
    prov = {
        "script": "scripts/mtp_train.py",
        "model": MODEL,
        "official": False,
        "weights_sha256": r["model_sha256"],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": f"cpu ({platform.machine()}, {res['threads']} threads)",
        "dtype": "float32",  # decode; how the model trained: values["model_autocast"]
        "seconds": round(res["seconds"], 1),
        "values": values(res),
        "figures": [],
        "measured": True,
        "machine": machine_name(),
        "cpu": cpu_info(),
        "threads": res["threads"],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "load": {"before": load0, "after": os.getloadavg()},
        "results": res,
    }
    files = {
        "outputs/mtp_train.txt": (text + "\n").encode(),
        "outputs/mtp_train.json": regen.provenance_bytes(prov),
    }
    regen.replace_set(ROOT / "docs", "mtp_train", files)
    print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)
    return res


if __name__ == "__main__":
    main()
