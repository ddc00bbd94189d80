"""tests/test_kernels.py's check with AVX2's kernels, of the outputs not made with them: in a file
of its own, so that the full tier's two workers run the two checks at once."""

import pytest
import torch

from book.regen import kernels_of
from tests.test_kernels import KERNEL_SCRIPTS, check_passes, recorded_kernels


def test_check_passes_with_avx2_kernels():
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        pytest.skip(
            "this CPU's own kernels are AVX2's: tests/test_book.py::"
            "test_committed_outputs_are_current runs these scripts with them already"
        )
    # an output made with AVX2's kernels (its provenance says so) would be checked against itself:
    # the native --check (tests/test_book.py) and SSE's (tests/test_kernels.py) test it
    scripts = [s for s in KERNEL_SCRIPTS if recorded_kernels(s) != kernels_of("avx2")]
    if not scripts:
        pytest.skip(
            "every output it would check was made with AVX2's kernels (their provenance says so): "
            "this CPU's --check (tests/test_book.py) and SSE's (tests/test_kernels.py) test them"
        )
    check_passes("avx2", scripts)
