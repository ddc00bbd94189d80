"""tests/test_kernels.py's check with AVX2's kernels (what the first machines of this book had):
in a file of its own, so that the full tier's two workers run the two checks at once."""

from tests.test_kernels import check_passes


def test_check_passes_with_avx2_kernels():
    check_passes("avx2")
