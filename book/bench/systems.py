"""The systems the benchmark times side by side: our model (clear, fast, compiled), transformers,
llama.cpp; prefill and decode runs, interleaved A B B A, and their medians."""

import json
import statistics
import subprocess
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


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
