"""Benchmark of training (Stage 4): a training step of our model against transformers' on the same
config, batch and threads; the chunked delta rule's backward, autograd's against the one written by
hand (chapter 19) at the 0.8B layer's shapes; a LoRA step on the 0.8B shapes (chapter 20).

    python scripts/bench_train.py                # measure and print (2 threads)
    python scripts/bench_train.py --write        # docs/outputs/bench_train.txt/.json (the book)
    python scripts/bench_train.py --smoke        # tiny sizes: a smoke run, seconds

Each system is timed interleaved (round-robin over the systems, after a warm-up), each number is the
median of the repeats, each ratio the median of the ratios of the same round. Memory is counted, not
timed: the bytes autograd keeps for the backward (qwen.train.SavedBytes), the same on every machine.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qwen import fast  # noqa: E402
from qwen.deltanet import chunk_gated_delta_rule  # noqa: E402
from qwen.model import Qwen  # noqa: E402
from qwen.optim import AdamW  # noqa: E402
from qwen.timing import rounds  # noqa: E402
from qwen.train import SavedBytes, next_token_loss, trainable  # noqa: E402
from qwen.weights import Config, load  # noqa: E402
from scripts.bench import cpu_info, machine_name  # noqa: E402

# a small model of the real architecture (the 3:1 stack, the 0.8B head layout scaled down)
SMALL = dict(
    vocab_size=8192,
    hidden_size=384,
    intermediate_size=1024,
    num_hidden_layers=8,
    layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=48,
    linear_value_head_dim=48,
    linear_conv_kernel_dim=4,
    hidden_act="silu",
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 1e7,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
)
SMOKE = {
    **SMALL,
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "head_dim": 16,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "rope_parameters": {**SMALL["rope_parameters"], "mrope_section": [2, 1, 1]},
}


def reference_and_ours(fields, seed=0):
    """transformers' Qwen3_5ForCausalLM with seeded random weights, and our Qwen with copies."""
    import tempfile

    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    ref = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**fields)).train()
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(ref.config.to_dict()))
        cfg = Config.load(d)
    W = {k.removeprefix("model."): v.detach().clone() for k, v in ref.state_dict().items()}
    W.pop("lm_head.weight", None)
    return ref, load(Qwen(cfg), W)


def summary(times, tokens, base):
    out = {}
    for n, ts in times.items():
        out[n] = {
            "seconds": statistics.median(ts),
            "tok_s": tokens / statistics.median(ts),
            "x_base": statistics.median(b / t for b, t in zip(times[base], ts)),
        }
    return out


# ---------------------------------------------------------------------------- a training step
def training_steps(fields, batch, T, repeats):
    """Seconds of one step (forward, backward, AdamW) for transformers and our variants."""
    ref, ours = reference_and_ours(fields)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, fields["vocab_size"], (batch, T), generator=gen)
    variants = {"ours, clear": trainable(ours)}
    steps = ["joined projections", "fused norms", "sdpa prompts"]
    quick = copy.deepcopy(ours)
    for s in steps:
        fast.STEPS[s](quick)
    variants["ours, + joined, fused norms, sdpa"] = trainable(quick)
    try:
        from qwen.backward import hand_backward
    except ImportError:
        hand_backward = None
    if hand_backward is not None:
        variants["ours, + hand backward (ch19)"] = trainable(hand_backward(copy.deepcopy(quick)))
    variants["ours, + checkpointing"] = trainable(copy.deepcopy(quick), checkpointing=True)

    def step_of(model, loss_fn, opt):
        def step():
            opt.zero_grad()
            loss_fn(model).backward()
            opt.step()

        return step

    systems = {
        "transformers": step_of(
            ref,
            lambda m: m(ids, labels=ids).loss,
            torch.optim.AdamW(ref.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1),
        )
    }
    for name, m in variants.items():
        systems[name] = step_of(
            m, lambda m: next_token_loss(m(ids), ids), AdamW(m.parameters(), 1e-4)
        )
    saved = {}
    for name, m in [("transformers", ref), *variants.items()]:
        with SavedBytes(m) as s:
            loss = (
                m(ids, labels=ids).loss if name == "transformers" else next_token_loss(m(ids), ids)
            )
        del loss
        saved[name] = s.bytes
    res = summary(rounds(systems, repeats), batch * T, "transformers")
    for name in res:
        res[name]["saved_MB"] = saved[name] / 1e6
    params = sum(p.numel() for p in ours.parameters())
    return {"batch": batch, "T": T, "params_M": params / 1e6, "systems": res}


# ---------------------------------------------------------------------------- the delta rule
def delta_rule_backward(H, dk, dv, T, repeats):
    """Forward + backward of the chunked rule at one layer's shapes: autograd through chapter 7's
    code, the backward written by hand (chapter 19), transformers' torch fallback."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    gen = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(1, H, T, dk, generator=gen), dim=-1) * dk**-0.5
    k = torch.nn.functional.normalize(torch.randn(1, H, T, dk, generator=gen), dim=-1)
    v = torch.randn(1, H, T, dv, generator=gen)
    g = -torch.rand(1, H, T, generator=gen) * 0.1
    beta = torch.rand(1, H, T, generator=gen)
    inputs = [t.requires_grad_() for t in (q, k, v, g, beta)]
    rules = {"autograd (ch07 code)": chunk_gated_delta_rule}
    try:
        from qwen.backward import chunk_gated_delta_rule_hand

        rules["by hand (ch19)"] = chunk_gated_delta_rule_hand
    except ImportError:
        pass

    def theirs(q, k, v, g, beta):
        # [B, T, H, d] in, scaling already applied (and q, k normalised) as above
        o, s = hf.torch_chunk_gated_delta_rule(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            g.transpose(1, 2),
            beta.transpose(1, 2),
            initial_state=None,
            output_final_state=True,
            use_qk_l2norm_in_kernel=False,
        )
        return o.transpose(1, 2), s

    rules["transformers (torch fallback)"] = theirs

    # transformers scales q by dk**-0.5 inside: give it the unscaled q for the same result
    def bound(rule, scale):
        return lambda: rule(q * scale, k, v, g, beta)  # the product in the call: a graph per call

    call = {n: bound(r, dk**0.5 if "transformers" in n else 1.0) for n, r in rules.items()}
    saved, systems = {}, {}
    for n, f in call.items():
        with SavedBytes() as s:
            o, S = f()
        saved[n] = s.bytes - sum(t.untyped_storage().nbytes() for t in inputs)
        dO = torch.randn_like(o)

        def fwd_bwd(f=f, dO=dO):
            o, S = f()
            torch.autograd.backward([o, S], [dO, torch.zeros_like(S)])

        systems[n] = fwd_bwd
    res = summary(rounds(systems, repeats), T, "autograd (ch07 code)")
    for n in res:
        res[n]["saved_MB"] = saved[n] / 1e6
        res[n]["saved_x_autograd"] = saved[n] / saved["autograd (ch07 code)"]
    return {"H": H, "dk": dk, "dv": dv, "T": T, "rules": res}


# ---------------------------------------------------------------------------- LoRA on 0.8B
def lora_step(T, repeats, smoke):
    """Seconds of one LoRA step (forward, backward, AdamW on the adapters) on the 0.8B shapes with
    random weights (chapter 20), fp32."""
    try:
        from qwen.lora import add_lora
    except ImportError:
        return None
    from scripts.bench import RANDOM_08B, make_random_08b

    if smoke:
        from book import tiny

        folder = tiny.path()
    else:
        folder = make_random_08b(RANDOM_08B)
    from qwen.model import from_pretrained

    model = add_lora(from_pretrained(folder), r=16, alpha=32)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.cfg.vocab_size, (1, T), generator=gen)
    opt = AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()

    def step():
        opt.zero_grad()
        next_token_loss(model(ids), ids).backward()
        opt.step()

    times = rounds({"lora": step}, repeats)["lora"]
    trainable_n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "T": T,
        "seconds": statistics.median(times),
        "tok_s": T / statistics.median(times),
        "trainable_M": trainable_n / 1e6,
        "model": "tiny test model" if smoke else "Qwen3.5-0.8B shapes, random weights",
    }


# ---------------------------------------------------------------------------- the report
def report(res):
    lines = [
        f"CPU: {res['cpu']['name']} ({', '.join(res['cpu']['flags'])}), "
        f"{res['threads']} threads, torch {res['torch']}"
    ]
    ts = res["train_step"]
    lines += [
        "",
        f"training step: {ts['params_M']:.1f}M-parameter Qwen3.5 (3:1), batch "
        f"{ts['batch']} x {ts['T']} tokens, fp32, AdamW; median of {res['repeats']}",
        f"{'system':<36} {'tok/s':>8} {'x transformers':>15} {'saved MB':>9}",
    ]
    for n, r in ts["systems"].items():
        lines.append(f"{n:<36} {r['tok_s']:>8.0f} {r['x_base']:>15.2f} {r['saved_MB']:>9.1f}")
    dr = res["delta_rule"]
    lines += [
        "",
        f"delta rule forward + backward: {dr['H']} heads, dk = dv = {dr['dk']}, "
        f"T = {dr['T']}, batch 1, fp32",
        f"{'rule':<32} {'ms':>8} {'x autograd':>11} {'saved MB':>9} {'x autograd':>11}",
    ]
    for n, r in dr["rules"].items():
        lines.append(
            f"{n:<32} {r['seconds'] * 1e3:>8.0f} {r['x_base']:>11.2f} "
            f"{r['saved_MB']:>9.1f} {r['saved_x_autograd']:>11.2f}"
        )
    if res.get("lora"):
        lo = res["lora"]
        lines += [
            "",
            f"LoRA step (r = 16 on every projection, AdamW on the adapters): {lo['model']}, "
            f"1 x {lo['T']} tokens, fp32: {lo['seconds']:.2f} s per step "
            f"({lo['trainable_M']:.2f}M trainable parameters)",
        ]
    return "\n".join(lines)


def values(res):
    ts, dr = res["train_step"]["systems"], res["delta_rule"]["rules"]
    v = {
        "cpu": res["cpu"]["name"],
        "threads": str(res["threads"]),
        "step_params_m": f"{res['train_step']['params_M']:.1f}",
        "step_tokens": str(res["train_step"]["batch"] * res["train_step"]["T"]),
        "transformers_tok_s": f"{ts['transformers']['tok_s']:.0f}",
        "clear_tok_s": f"{ts['ours, clear']['tok_s']:.0f}",
        "clear_x": f"{ts['ours, clear']['x_base']:.2f}",
        "fast_tok_s": f"{ts['ours, + joined, fused norms, sdpa']['tok_s']:.0f}",
        "fast_x": f"{ts['ours, + joined, fused norms, sdpa']['x_base']:.2f}",
        "ckpt_x": f"{ts['ours, + checkpointing']['x_base']:.2f}",
        "rule_T": str(res["delta_rule"]["T"]),
        "rule_autograd_ms": f"{dr['autograd (ch07 code)']['seconds'] * 1e3:.0f}",
        "rule_autograd_mb": f"{dr['autograd (ch07 code)']['saved_MB']:.0f}",
    }
    if "ours, + hand backward (ch19)" in ts:
        v["hand_step_x"] = f"{ts['ours, + hand backward (ch19)']['x_base']:.2f}"
    if "by hand (ch19)" in dr:
        h = dr["by hand (ch19)"]
        v.update(
            rule_hand_ms=f"{h['seconds'] * 1e3:.0f}",
            rule_hand_x=f"{h['x_base']:.2f}",
            rule_hand_mb=f"{h['saved_MB']:.0f}",
            rule_hand_bytes_x=f"{h['saved_x_autograd']:.2f}",
        )
    t = dr["transformers (torch fallback)"]
    v.update(rule_hf_ms=f"{t['seconds'] * 1e3:.0f}", rule_hf_mb=f"{t['saved_MB']:.0f}")
    if res.get("lora"):
        v["lora_tokens"] = str(res["lora"]["T"])
        v["lora_step_s"] = f"{res['lora']['seconds']:.1f}"
        v["lora_trainable_m"] = f"{res['lora']['trainable_M']:.2f}"
    return v


def write(res, text):
    from book import regen
    from book.checkpoint import identify
    from scripts.bench import RANDOM_08B

    prov = {
        "script": "scripts/bench_train.py",
        "model": res["model"],
        "official": False,
        # the weights of the one checkpoint read (the LoRA step's random 0.8B); the others are
        # seeded random weights made in the run
        "weights_sha256": identify(RANDOM_08B).sha256,
        "torch": res["torch"],
        "python": platform.python_version(),
        "device": f"cpu ({platform.machine()}, {res['threads']} threads)",
        "dtype": "float32",
        "seconds": round(res["seconds"], 1),
        "values": values(res),
        "figures": [],
        "measured": True,
        "machine": res["machine"],
        "cpu": res["cpu"],
        "threads": res["threads"],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "load": res["load_avg"],
        "results": res,
    }
    files = {
        "outputs/bench_train.txt": (text + "\n").encode(),
        "outputs/bench_train.json": regen.provenance_bytes(prov),
    }
    regen.replace_set(ROOT / "docs", "bench_train", files)
    print(f"wrote docs/{', docs/'.join(files)}", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write docs/outputs/bench_train.*")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: seconds, nothing written")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--from-json",
        type=Path,
        help="report (and --write) the results kept in an earlier run's JSON, e.g. "
        "docs/outputs/bench_train.json, instead of measuring",
    )
    args = ap.parse_args(argv)
    if args.from_json:
        res = json.loads(args.from_json.read_text())
        res = res.get("results", res)
        if args.write and "smoke" in res["model"]:
            ap.error("--write: a --smoke run is not the book's")
        text = report(res)
        print(text)
        if args.write:
            write(res, text)
        return
    if args.write and args.smoke:
        ap.error("--write records the book's full run; a --smoke run is not written")
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    torch.set_num_threads(args.threads)
    t0, load0 = time.perf_counter(), os.getloadavg()
    res = {
        "model": "tiny configs (smoke)"
        if args.smoke
        else "random weights: a small Qwen3.5, the 0.8B DeltaNet layer's shapes, the 0.8B model",
        "cpu": cpu_info(),
        "machine": machine_name(),
        "threads": args.threads,
        "torch": torch.__version__,
        "repeats": args.repeats,
    }
    res["train_step"] = training_steps(
        SMOKE if args.smoke else SMALL, *((2, 70) if args.smoke else (4, 256)), args.repeats
    )
    res["delta_rule"] = (
        delta_rule_backward(2, 16, 16, 200, args.repeats)
        if args.smoke
        else delta_rule_backward(16, 128, 128, 4096, args.repeats)
    )
    res["lora"] = lora_step(64 if args.smoke else 256, min(args.repeats, 3), args.smoke)
    res["seconds"] = time.perf_counter() - t0
    res["load_avg"] = {"before": load0, "after": os.getloadavg()}
    text = report(res)
    print(text)
    if args.write:
        write(res, text)


if __name__ == "__main__":
    main()
