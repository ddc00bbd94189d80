"""The checkpoints the benchmark runs on: Qwen3.5-0.8B's layout and shapes with seeded random
weights (built once), the tiny test model, prompts; a fresh Python that loads one and times it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from book import tiny

ROOT = Path(__file__).resolve().parents[2]

RANDOM_08B = ROOT / ".cache" / "random-qwen3.5-0.8b"


CONFIG_08B = ROOT / "book" / "data" / "qwen3.5-0.8b" / "config.json"  # the official config.json


TEXT_08B = json.loads(CONFIG_08B.read_text())["text_config"]


# ---------------------------------------------------------------------------- the checkpoint
def make_random_08b(folder=RANDOM_08B):
    """Qwen3.5-0.8B's official file layout and shapes with seeded random bf16 weights (no mtp.*)."""
    from safetensors.torch import save_file

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


def prompt_ids(cfg, n):
    """The benchmark's prompt: n token ids, the same in every run (their first k are any shorter
    one)."""
    return torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))


def tiny_folder():
    from book.tiny import path

    return path()


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
from book.bench.checkpoints import prompt_ids
from book.bench.systems import Compiled
from qwen import fast
m = fast.from_pretrained(sys.argv[1], torch.bfloat16)
ids = prompt_ids(m.cfg, 128)
system = Compiled(m)
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
                "PYTHONPATH": str(ROOT),
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
