"""tests/test_kernels.py's check with AVX2's kernels (what the first machines of this book had):
in a file of its own, so that the full tier's two workers run the two checks at once."""

import pytest
import torch

from tests.test_kernels import check_passes


def test_check_passes_with_avx2_kernels():
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        pytest.skip(
            "this CPU's own kernels are AVX2's: tests/test_book.py::"
            "test_committed_outputs_are_current runs these scripts with them already"
        )
    check_passes("avx2")
