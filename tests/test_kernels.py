"""The outputs whose values go through bf16 or int8 kernels pass `regen --check` with another
CPU's kernels: ATen's loops and oneDNN capped to what an older CPU has (book.regen.KERNELS). The
native kernels' `--check` is tests/test_book.py::test_committed_outputs_are_current. Slow: every
script runs at that CPU's speed."""

import subprocess
import sys
from pathlib import Path

import torch

from book.pages import provenance

ROOT = Path(__file__).resolve().parent.parent

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
# fp32 only, and long: between kernel families their values move only as sums taken in another
# order do, as they move between this CPU's kernels and AVX2's, with which they are made
# (CONTRIBUTING.md) and which test_book's --check compares (ch20's held-out losses by 3-5% on an
# AVX-512 CPU); under SSE's kernels they would take another 87 s of the full tier
FP32_ONLY_LONG = ("ch18_gradients", "ch20_lora")


def recorded_kernels(name):
    """The kernels the committed output of `name` was made with (None: not recorded)."""
    return provenance(name).get("kernels")


def check_passes(limit, scripts=KERNEL_SCRIPTS):
    """`regen --check` of the kernel-dependent scripts with book.regen.KERNELS[limit]."""
    proc = subprocess.run(
        [sys.executable, "-m", "book.regen", "--check", "--kernels", limit, *scripts],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("\nsame  ") == len(scripts), proc.stdout


def sse_scripts():
    """The outputs checked with SSE's kernels: those whose values go through bf16, int8 or int4
    kernels (the scalar loops compute them otherwise, not only in another order), the short fp32
    ones, and the long fp32 ones where nothing else compares them with other kernels: where this
    CPU's own are the ones they were made with (or the record does not say)."""
    native = torch.backends.cpu.get_cpu_capability()
    return [
        s
        for s in KERNEL_SCRIPTS
        if s not in FP32_ONLY_LONG or (recorded_kernels(s) or {}).get("aten", native) == native
    ]


def test_check_passes_with_limited_kernels():
    """The kernel-dependent outputs pass `--check` with SSE's kernels (AVX2's: tests/
    test_kernels_avx2.py, a file of its own so that the full tier's two workers run the two at
    once)."""
    check_passes("default", sse_scripts())


def test_a_long_fp32_output_is_checked_with_sses_kernels_where_nothing_else_would(monkeypatch):
    """Made with AVX2's kernels, ch20's losses meet this CPU's in test_book's --check; made with
    this CPU's own, only SSE's run here compares them with other kernels."""
    here = sys.modules[__name__]  # the module whose sse_scripts() reads recorded_kernels
    native = torch.backends.cpu.get_cpu_capability()
    other = "AVX2" if native != "AVX2" else "AVX512"
    monkeypatch.setattr(here, "recorded_kernels", lambda s: {"aten": other})
    assert "ch20_lora" not in sse_scripts() and "ch17_loss" in sse_scripts()
    monkeypatch.setattr(here, "recorded_kernels", lambda s: {"aten": native})
    assert sse_scripts() == KERNEL_SCRIPTS
    monkeypatch.setattr(here, "recorded_kernels", lambda s: None)  # not recorded: checked
    assert sse_scripts() == KERNEL_SCRIPTS
