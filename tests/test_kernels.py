"""The outputs whose values go through bf16 or int8 kernels pass `regen --check` with another
CPU's kernels: ATen's loops and oneDNN capped to what an older CPU has (book.regen.KERNELS). The
native kernels' `--check` is tests/test_book.py::test_committed_outputs_are_current. Slow: every
script runs at that CPU's speed."""

import json
import subprocess
import sys
from pathlib import Path

from book.regen import KERNELS

ROOT = Path(__file__).resolve().parent.parent

KERNEL_LIMITS = KERNELS  # the CPU kinds a reader may have, on this one
KERNEL_SCRIPTS = [
    "ch03_norm",
    "ch04_rope",  # figures whose SVGs move in the last bits (tests/test_regen.py)
    "ch07_chunked",
    "ch09_model",
    "ch15_decoding",
    "ch16_int8",
    "ch17_loss",  # perplexity through bf16, int8, int4 kernels
    "ch18_gradients",  # gradient norms of a random model
    "ch19_backward",  # rounding-error sizes
    "ch20_lora",  # a short training run's losses
]  # bf16, int8 and argmax values


def recorded_kernels(name):
    """The kernels the committed output of `name` was made with (None: not recorded)."""
    return json.loads((ROOT / "docs" / "outputs" / f"{name}.json").read_text()).get("kernels")


def check_passes(limit, scripts=KERNEL_SCRIPTS):
    """`regen --check` of the kernel-dependent scripts with the kernels of KERNELS[limit]."""
    proc = subprocess.run(
        [sys.executable, "-m", "book.regen", "--check", "--kernels", limit, *scripts],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("\nsame  ") == len(scripts), proc.stdout


def test_check_passes_with_limited_kernels():
    """The outputs whose values go through bf16 or int8 kernels pass `--check` with SSE's kernels
    (AVX2's: tests/test_kernels_avx2.py, a file of its own so that the full tier's two workers run
    the two at once)."""
    check_passes("default")
