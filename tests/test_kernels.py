"""The outputs whose values go through bf16 or int8 kernels pass `regen --check` with another
CPU's kernels: ATen's loops and oneDNN capped to what an older CPU has. The native kernels'
`--check` is tests/test_book.py::test_committed_outputs_are_current. Slow: every script runs at
that CPU's speed."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KERNEL_LIMITS = {  # the CPU kinds a reader may have, on this one: ATen's loops and oneDNN capped
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    },
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}  # the machine's own kernels: tests/test_book.py::test_committed_outputs_are_current
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


def check_passes(limit):
    """`regen --check` of the kernel-dependent scripts with the kernels of KERNEL_LIMITS[limit]."""
    proc = subprocess.run(
        [sys.executable, "-m", "book.regen", "--check", *KERNEL_SCRIPTS],
        cwd=ROOT,
        env={**os.environ, **KERNEL_LIMITS[limit]},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_passes_with_limited_kernels():
    """The outputs whose values go through bf16 or int8 kernels pass `--check` with SSE's kernels
    (AVX2's: tests/test_kernels_avx2.py, a file of its own so that the full tier's two workers run
    the two at once)."""
    check_passes("default")
